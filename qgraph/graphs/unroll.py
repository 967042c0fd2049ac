"""Unrolled device loops: several copies of a loop's body per pass of its CUDA WHILE node.

A pass of a WHILE node costs microseconds beyond its body's kernel nodes (the table below), so a
loop with a short body pays most of its time to the loop. The graph builder (graphs.builder) builds
the region tree `unrolled` returns, in which a loop unrolled U times is:
- a repeat loop of k passes: a WHILE node of k // U passes of U copies of the body, then one of
  k % U passes of one copy (`CountPart`s: both counts come from k, so a new k is a node update);
- a flag loop (`qgraph.loop`, `graph_while=`): U copies per pass, each after the first a `Gated`
  copy behind a gate kernel, which counts a pass and checks the flag and the runaway guard as the
  condition kernel does at the end of a pass, and clears the loop's `live` word where the loop
  ends. The copy's tasks run their gated variant (compiler.ptx_text.gated: after its
  griddepcontrol.wait a kernel reads `live` and returns at once if it is 0), so a copy does
  work exactly where the loop would have gone on: the same passes, guard and results as U = 1.
  (With PREDICATE_TASKS off, the condition kernel sets the handle of an IF node around each copy
  instead: measured slower than the WHILE pass it saves.) Where the body ends in a serial task (the
  usual flag update; FOLD_GATES), there is no gate kernel: that task's node in each copy followed by
  another runs its gating variant (compiler.ptx_text.gating), which does the gate's work on the same
  thread after its body, and in a gated copy, as every task there, nothing at all once `live` is 0.
Copies are the same task kernels (new nodes, updated like the first copy's). A loop whose body
holds another loop or repeat keeps one copy (an inner loop's stats.iterations is its last entry's
passes, which copies would blur); `if` regions in the body are copied with it. Eager launches, the
host fallback and the CPU runner walk the tree as written: U changes nothing there.

A repeat loop with U chosen whose count is small (`MAX_STRAIGHT_NODES` kernel nodes in all) is
built, in the kernel's own graph, as that many copies in a straight line (`Straight`: no WHILE
node, the nodes joined as any top-level sequence) for the count of the call that builds the graph;
the graph records the count (`FixedCount`), and a call with another count rebuilds the graph once
in the WHILE form, which later counts update in place (backends.cuda). Only where stats.iterations
stays exact without a pass counter: a repeat whose body holds no loop, inside no `if` and at most
one loop, outside debug mode (whose failed check ends loops early).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from ..compiler.cuda_program import TaskKernel, blocks_in
from ..compiler.launch_code import tiles_of
from ..compiler.ptx_variants import gating_tasks
from ..errors import QgraphError
from ..lang.front.regions import (
    USE_KERNEL,
    DeviceLoop,
    IfRegion,
    Region,
    RepeatLoop,
    Sequence,
    Task,
    control_regions,
    leaf_tasks,
    with_bodies,
)

# Costs the automatic choice weighs, in microseconds, from `benchmarks/unroll_loops.py --quick` on an
# H100 (driver for CUDA 13.0), per iteration of 1000-iteration loops of one-block tasks:
#   repeat loop, 1 task:  U=1 5.0-5.1, U=16 1.04-1.06     8 tasks: U=1 10.2, U=4 6.8-7.1 (raw WHILE 6.2 / 14.4)
#   flag loop, 1 task + the flag's task:  U=1 6.1-6.3, U=2 4.84, U=4 4.11, U=10 3.07 (gated task variants)
#                                         U=2 7.9-8.3, U=4 8.4-9.3 (an IF node around each copy)
# Solved for the costs: a kernel node 0.78, a WHILE pass with its condition kernel 4.2, a gate kernel
# before a copy 1.2-2.4, a gate with an IF node 8.5-9.3 (more than the pass it saves: PREDICATE_TASKS).
# The gate folded into the flag's serial task (FOLD_GATES; `--quick --loops`, 2026-11-26, two runs, each
# side by side), folded / with gate kernels:
#   flag loop, 1 task:  U=2 4.22-4.45 / 4.67-4.85, U=4 3.43-3.80 / 3.97-4.04, chosen 2.91-3.18 (U=16) /
#                       3.49-3.60 (U=10);  8 tasks: chosen 9.53-9.56 (U=3) / 9.56-9.75
#   relax 512^2: 8.49-8.60 (U=8) / 9.18-9.35 (U=6), the hand-written solver 8.28-8.59
# a folded gate costs 0.3-0.8 us less than a gate kernel: most of the gate's cost was its trips to memory
# (its decision's two), which the serial task's thread now makes, not its launch.
WHILE_PASS_US = 4.2  # a WHILE pass beyond its body's nodes, the condition kernel included
KERNEL_NODE_US = 0.78  # a task's kernel node behind a programmatic edge
IF_GATE_US = 9.0  # the gate kernel and IF node before a copy of a flag loop's body (PREDICATE_TASKS off)
GATE_US = 1.5  # the gate kernel before a copy whose tasks read `live` (their gated variant)
FOLDED_GATE_US = 0.9  # the gate's work done by the serial task ending the copy before (no node)
PREDICATE_TASKS = True  # a flag loop's copies run their tasks' gated variants (False: an IF node per copy)
FOLD_GATES = True  # a body ending in a serial task: that task does the gate's work (False: a gate kernel)
MAX_UNROLL = 16  # copies per pass at most
# MAX_COPY_NODES was 32 with gate kernels. Folded, U = 32 // nodes rose for every flag loop ending in a
# serial task (stable_fluids' solve 8 -> 10), and a 15-pass solve then ran 20 copies, 5 gated off after
# its last pass, for 16 with 1: its step 89.1-89.5 -> 93.9-95.2 us (the bench's examples rows at
# 128^2, H100, side by side with the code before). At 48 (U 16: one WHILE pass, 1 copy
# gated off) 81.0-81.3 us; relax U 8 -> 12: 0.99-1.00x -> 0.92-0.96x the hand-written solver; the one-task
# flag loop stays at U 16 (MAX_UNROLL), 8 tasks U 3 -> 5: 0.925x -> 0.889x its U=1 form.
MAX_COPY_NODES = 48  # kernel nodes of all copies of a body: larger graphs build and upload slower
# A repeat of k passes as k straight-line copies saves every WHILE pass of its unrolled form (4.2 us
# each, one per MAX_COPY_NODES nodes, and the remainder loop's) for a build that grows with its nodes.
# `benchmarks/unroll_loops.py --quick --fluids --repeats` on an H100 (driver for CUDA 13.0), per pass
# of 128 kernel nodes as a straight line / the WHILE form with the chosen U:
#   1 task x 128: 0.78 / 1.12 us (U=16)    8 tasks x 16: 6.23 / 7.95 us (U=4)
#   the fluids pressure solve, 50 passes of 2 sweeps: 123.3 / 158.0 us (U=16) per solve
# and a straight graph of 100-128 nodes built in 4.4-7.8 ms (40-60 us a node, once per graph, and the
# WHILE form's 1-3 ms once more if the count changes): paid back within a few hundred calls.
MAX_STRAIGHT_NODES = 128  # kernel nodes of a repeat built as a straight line, at most
# A temporally tiled task (lang.cuda.tiling) replaces S passes of its loop where its tiles fit in this
# many waves of the device: a small grid's passes wait on launches, which tiling saves (the fluids solve
# at 256x128 on an H100: 52.3 us against 105.9 untiled); a large grid's are bound by memory and
# arithmetic, which the halo's recomputation adds to (2048x2048: S=2/3/4 2232/2057/2275 against 2117 us).
MAX_TILED_WAVES = 1


@dataclass(frozen=True, eq=False)
class Gated(Sequence):
    """A copy of a flag loop's body that works only where the loop goes on: a gate kernel before it,
    and its tasks' gated variants (or, with PREDICATE_TASKS off, an IF node around it). With the gates
    folded (folds_gate), every copy is a Gated without a `gate` kernel: each but the last is `gating`
    (its last, serial task does the gate's work for the copy after it); the `first` runs its tasks as
    they are."""

    gate: bool = True
    gating: bool = False
    first: bool = False


@dataclass(frozen=True, eq=False)
class CountPart(RepeatLoop):
    """One WHILE node of a repeat loop unrolled `divisor` times: count // divisor passes of the
    copies in `body`, or with `remainder` count % divisor passes of one copy."""

    divisor: int = 1
    remainder: bool = False


@dataclass(frozen=True, eq=False)
class Straight(Sequence):
    """A repeat loop built as `passes` copies of its body in a straight line: no WHILE node; the
    count is fixed when the graph is built (the graph's FixedCount)."""

    count: str = ""
    passes: int = 0


class FixedCount(NamedTuple):
    """A repeat count a graph was built straight for: its loop's place in stats.iterations (`index`,
    and `inside`, the loop around it or None), its passes, and the count's bytes in a call's packed
    arguments (at `slot`: spec.flags's (argument, struct leaf or None))."""

    index: int
    passes: int
    inside: int | None
    slot: tuple
    raw: bytes


def body_nodes(body: Region) -> int:
    """Kernel nodes of one copy of `body`: its tasks and the helper kernel of each branch."""
    return sum(1 for _ in leaf_tasks(body)) + sum(isinstance(r, IfRegion) for r in control_regions(body))


def unroll_factor(loop: DeviceLoop | RepeatLoop, kernel_unroll: int | None) -> int:
    """Copies of `loop`'s body per WHILE pass: the loop's unroll=, else the kernel's, else chosen."""
    if any(isinstance(r, (DeviceLoop, RepeatLoop)) for r in control_regions(loop.body)):
        return 1
    setting = kernel_unroll if loop.unroll == USE_KERNEL else loop.unroll
    if setting is not None:
        return setting
    nodes = max(body_nodes(loop.body), 1)
    if isinstance(loop, DeviceLoop):  # a copy of a flag loop's body adds a gate (a node unless folded)
        folded = folds_gate(loop)
        if (FOLDED_GATE_US if folded else GATE_US if PREDICATE_TASKS else IF_GATE_US) >= WHILE_PASS_US:
            return 1
        nodes += not folded
    # U copies save (U - 1) WHILE passes
    return max(1, min(MAX_UNROLL, MAX_COPY_NODES // nodes))


def folds_gate(loop: DeviceLoop, gating: set | None = None) -> bool:
    """Whether the gates between copies of a flag loop's body are its last task's work: a serial task
    (compiler.ptx_variants.gating_tasks) with gating variants (the task indices `gating`, if given)."""
    last = loop.body.children[-1] if loop.body.children else None
    return (FOLD_GATES and PREDICATE_TASKS and isinstance(last, Task) and last.index in gating_tasks(loop)
            and (gating is None or last.index in gating))


def clone(region: Region) -> Region:
    """A copy of `region` with fresh identities (the graph gives each its own nodes), tasks kept."""
    if isinstance(region, Task):
        return dataclasses.replace(region)
    if isinstance(region, Sequence):
        return Sequence(tuple(clone(child) for child in region.children))
    return with_bodies(region, clone)


def unrolled(region: Region, kernel_unroll: int | None, straight=None, around: tuple = (), tiles=None,
             gating: set | None = None) -> Region:
    """The region tree the graph builder builds: every loop as unroll_factor says; a repeat loop for
    which `straight(loop, around)` (`around`: the regions around it) gives passes as a Straight.
    `tiles`: task index -> the TaskKernel of each temporally tiled task the specialisation compiled;
    `gating`: the indices of the tasks compiled with gating variants (None: every one folds_gate names)."""
    if isinstance(region, Task):
        return region
    if isinstance(region, Sequence):
        return Sequence(tuple(unrolled(child, kernel_unroll, straight, around, tiles, gating)
                              for child in region.children))
    passes = straight(region, around) if straight is not None and isinstance(region, RepeatLoop) else None
    if passes is not None:
        return Straight(passes_of(region, region.body, passes, tiles), region.count, passes)
    inner = with_bodies(region, lambda body: unrolled(body, kernel_unroll, straight, around + (region,), tiles,
                                                      gating))
    if isinstance(region, IfRegion):
        return inner
    u = unroll_factor(region, kernel_unroll)
    if u == 1:
        return inner
    copies = passes_of(region, inner.body, u, tiles)
    if isinstance(region, RepeatLoop):
        return Sequence(
            (
                CountPart(region.count, Sequence(copies), region.lineno, region.unroll, divisor=u),
                CountPart(region.count, clone(inner.body), region.lineno, region.unroll, divisor=u, remainder=True),
            )
        )
    if folds_gate(region, gating):  # each copy but the last ends in the gate's work
        last = len(copies) - 1
        return dataclasses.replace(inner, body=Sequence(tuple(
            Gated(c.children, gate=False, gating=k < last, first=k == 0) for k, c in enumerate(copies))))
    return dataclasses.replace(inner, body=Sequence((copies[0],) + tuple(Gated(c.children) for c in copies[1:])))


def passes_of(loop: Region, body: Sequence, passes: int, tiles) -> tuple[Sequence, ...]:
    """`passes` consecutive copies of a repeat loop's `body`; where the loop is temporally tiled
    (lang.front.temporal_tiling) and its task compiled, each S of them as the tiled task and the
    body's last task, the rest as copies."""
    tk = tiles.get(getattr(loop, "tiled", None)) if tiles else None
    if tk is None or passes < tk.temporal[0]:
        return (body,) + tuple(clone(body) for _ in range(passes - 1))
    s, tail = tk.temporal[0], body.children[-1]
    groups = tuple(Sequence((dataclasses.replace(tk.task), clone(tail))) for _ in range(passes // s))
    return groups + tuple(clone(body) for _ in range(passes % s))


def graph_tree(spec, packs: tuple, own: bool,
               tiled: TiledChoice | None = None) -> tuple[Region, tuple[FixedCount, ...]]:
    """The tree a graph of `spec` (graphs.builder.GraphSpec) builds for a call packed as `packs`, and the
    repeat counts it fixes: with `own` (the kernel's own graph, not a part of another) and
    `spec.straight_counts`, the repeats `_Straightening` allows as Straight copies of this count;
    `tiled`: the temporally tiled tasks whose tiles fit for the call (tiled_choice)."""
    if not spec.device_loops:  # the host do-while repeats the graph of the plain body
        return spec.body, ()
    tiles = tiled.kernels if tiled is not None else {}
    gating = {tk.task.index for tk in getattr(spec, "kernels", ()) if tk.gating}
    if not (own and spec.straight_counts) or spec.stop_word:
        return unrolled(spec.body, spec.options.unroll, tiles=tiles, gating=gating), ()
    straight = _Straightening(spec, packs)
    return unrolled(spec.body, spec.options.unroll, straight, tiles=tiles, gating=gating), tuple(straight.fixed)


def tiled_kernels(spec, args: tuple | None) -> dict:
    """Task index -> TaskKernel of each temporally tiled task of `spec` whose grid of tiles for these
    arguments fits MAX_TILED_WAVES waves (none once a call's grid changed that: `spec.tiling`)."""
    kernels = [tk for tk in getattr(spec, "kernels", ()) if tk.temporal]
    if not kernels or args is None or not getattr(spec, "tiling", True):
        return {}
    counts = spec.bounds(*args)[2]
    return {tk.task.index: tk for tk in kernels
            if blocks_in(tiles_of(counts[tk.bounds_slot], *tk.temporal[1:3])) <= MAX_TILED_WAVES * tk.wave}


class _Straightening:
    """unrolled()'s `straight` for one build: the passes of a repeat loop built as a straight line,
    or None; each one recorded as a FixedCount."""

    def __init__(self, spec, packs: tuple) -> None:
        self.spec, self.packs = spec, packs
        loops = (r for r in control_regions(spec.body) if isinstance(r, (DeviceLoop, RepeatLoop)))
        self.order = {loop: k for k, loop in enumerate(loops)}  # stats.iterations's order
        self.fixed: list[FixedCount] = []

    def __call__(self, loop: RepeatLoop, around: tuple) -> int | None:
        unroll = self.spec.options.unroll if loop.unroll == USE_KERNEL else loop.unroll
        # around: no `if` and one loop at most, so the loop around it ran iff its passes are not 0
        if unroll is not None or len(around) > 1 or any(isinstance(r, IfRegion) for r in around):
            return None
        if any(isinstance(r, (DeviceLoop, RepeatLoop)) for r in control_regions(loop.body)):
            return None
        slot = self.spec.flags[loop.count]
        raw = packed_count(self.packs, slot)
        passes = int.from_bytes(raw, "little", signed=True)
        if not 1 <= passes * max(body_nodes(loop.body), 1) <= MAX_STRAIGHT_NODES:
            return None
        inside = self.order[around[0]] if around else None
        self.fixed.append(FixedCount(self.order[loop], passes, inside, slot, raw))
        return passes


def packed_count(packs: tuple, slot: tuple) -> bytes:
    """A repeat count's bytes in a call's packed arguments: p[k], or leaf j of a struct's p[k]."""
    k, j = slot
    return packs[k] if j is None else packs[k][j]


def counts_hold(fixed: tuple[FixedCount, ...], packs: tuple) -> bool:
    """Whether a call packed as `packs` has the counts a graph was built straight for (on the
    new-numbers path: a graph with none makes no generator)."""
    return not fixed or all(packed_count(packs, f.slot) == f.raw for f in fixed)


def count_part(loop: RepeatLoop) -> tuple[int, bool]:
    """(divisor, remainder) of a repeat loop's WHILE node (conditional.WhileLoop's count_part)."""
    return (loop.divisor, loop.remainder) if isinstance(loop, CountPart) else (1, False)


def loop_passes(loops: list, fixed: tuple[FixedCount, ...] = ()) -> tuple[int, ...]:
    """stats.iterations from a graph's WhileLoops in pre-order: a repeat loop's remainder loop adds
    to its main loop's passes (each already times its copies); a straight repeat's fixed passes at
    its place (0 where the loop around it ran no pass: it was not entered)."""
    passes: list[int] = []
    for loop in loops:
        if loop.remainder:
            passes[-1] += loop.passes()
        else:
            passes.append(loop.passes())
    for f in fixed:  # in source order: the loops before each are in place when it is inserted
        passes.insert(f.index, f.passes if f.inside is None or passes[f.inside] > 0 else 0)
    return tuple(passes)


def gated_kernel(tk: TaskKernel, live: int) -> TaskKernel:
    """`tk` as a node of a gated copy: its gated variant, whose block ends with `live`'s address."""
    pad = -tk.param_size % 8
    return dataclasses.replace(tk, function=tk.gated_function, trigger_function=tk.gated_trigger_function,
                               param_size=tk.param_size + pad + 8, gate=bytes(pad) + live.to_bytes(8, "little"))


def gating_kernel(tk: TaskKernel, state: int, live: int | None) -> TaskKernel:
    """`tk` as the last node of a copy followed by another: its gating variant, whose block ends with
    the loop's state block's address (`state`), and with `live`, also gated (gated_kernel)."""
    words = state.to_bytes(8, "little") + (b"" if live is None else live.to_bytes(8, "little"))
    pad = -tk.param_size % 8
    return dataclasses.replace(tk, function=tk.gating[live is not None], trigger_function=None,
                               param_size=tk.param_size + pad + len(words), gate=bytes(pad) + words)


def plan_gated(builder, region: Gated, by_task: dict, plan: list) -> None:
    """graphs.builder.GraphBuilder.plan of a gated copy in the builder's loop: its tasks' gated variants
    where every task has one (the copy is then `predicated`), else the tasks as they are, for an IF node;
    a `gating` copy's last task as its gating variant."""
    loop = builder.loop
    tasks, kernels = list(leaf_tasks(region)), by_task
    if not region.first and PREDICATE_TASKS and all(by_task[t.index].gated_function is not None for t in tasks):
        by_task = {t.index: gated_kernel(by_task[t.index], loop.live_address) for t in tasks}
        loop.predicated.add(region)
    if not (region.gate or region.first or region in loop.predicated):  # no gate and no gated tasks
        raise QgraphError(f"kernel {builder.name}: a copy of an unrolled loop without its tasks' gated variants; "
                          f"please report this (unroll=1 on the loop avoids it)")
    if region.gating:
        end = region.children[-1].index
        by_task = {**by_task, end: gating_kernel(kernels[end], loop.slot, None if region.first else loop.live_address)}
    for child in region.children:
        builder.plan(child, by_task, plan)


def add_gated(builder, region: Gated, deps: list) -> list:
    """graphs.builder.GraphBuilder.add of a gated copy (in the builder's loop's body): its gate, then the
    copy (no gate where the copy before did its work: its last task, behind which the copy's first has a
    programmatic edge)."""
    loop = builder.loop
    if not region.gate:
        return builder.add(Sequence(region.children), deps)
    predicated = region in loop.predicated
    behind_kernel = builder.programmatic and len(deps) == 1 and builder.is_kernel_node(deps[0])
    body, after = loop.add_gate(builder.graph, deps, behind_kernel, predicated)
    if not predicated:  # the copy in an IF node's body
        builder.body(body).add(Sequence(region.children), [])
        return after
    builder.count_as_kernel_node(after[0])  # the copy's first task, in this graph after the gate: a programmatic edge
    return builder.add(Sequence(region.children), after)


class TiledChoice(NamedTuple):
    """The temporally tiled tasks a graph of `spec` was built to run tiled: task index -> TaskKernel
    (tiled_kernels)."""

    spec: object
    kernels: dict

    def holds(self, args: tuple) -> bool:
        """Whether a call with `args` tiles the same loops (a new grid's tiles may no longer fit a
        wave, or now fit one): graph_cache.TaskGraph rebuilds where not."""
        return tiled_kernels(self.spec, args).keys() == self.kernels.keys()


def tiled_choice(spec, args: tuple | None) -> TiledChoice | None:
    """What a graph of `spec` built for `args` runs tiled; None where `spec` has no tiled task (a
    miss then checks nothing)."""
    if not any(tk.temporal for tk in getattr(spec, "kernels", ())):
        return None
    return TiledChoice(spec, tiled_kernels(spec, args))
