"""The adjoint's region tree, device loops included.

A straight body reverses task by task. A `qgraph.repeat` loop whose body's adjoints read no
array the loop overwrites (linear updates) reverses to a repeat loop of the reversed body, and
a `qgraph.cond` branch on a flag the kernel never writes to a branch on the same flag: neither
keeps anything. A repeat loop whose adjoints read what it overwrites (`LoopStates`) keeps
checkpoints instead: its *recording* source (the forward pass a tape runs) copies the arrays the
loop carries every `every` passes, and its adjoint recomputes each segment of passes from its
checkpoint, last segment first, keeping each task's inputs per pass, then runs the passes'
adjoints in reverse, each after restoring the inputs its task saw. A flag loop (`qgraph.loop`,
`graph_while`) always keeps states: the recording counts its passes, which the adjoint reads.
Counters and loop flags are 0-d arrays the generated serial tasks advance, so the CPU runner,
the CUDA graph's WHILE nodes and the host fallback run it unchanged.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

from ..front.parse import KernelSource, Param
from ..front.regions import (
    DeviceLoop,
    Dim,
    IfRegion,
    Region,
    RepeatLoop,
    Sequence,
    Task,
    children_of,
    leaf_tasks,
    with_bodies,
)
from .source_facts import arrays_stored

PREFIX = "_qg_lp_"  # the hidden parameters of a loop's recording and adjoint sources
PASS, EVERY, SEGMENT, STEP, STEPS, GO, COUNT, MORE = (
    PREFIX + n for n in ("pass", "every", "seg", "j", "n", "go", "count", "more"))


@dataclass(frozen=True)
class LoopStates:
    """What the gradient of a kernel's top-level device loop keeps: `carried` (array, index rank)
    are the arrays the loop body writes (checkpointed every `every` passes); `stored` (primal
    task, arrays) the carried arrays each body task's adjoint reads (kept per pass while a
    segment is recomputed)."""

    loop: RepeatLoop | DeviceLoop
    carried: tuple[tuple[str, int], ...]
    stored: tuple[tuple[int, tuple[str, ...]], ...]

    @property
    def count(self) -> str:
        """The pass count as the adjoint reads it: the recording's pass counter (a flag loop's
        count is known only once it ran)."""
        return f"{COUNT}[()]"

    def checkpoint(self, name: str) -> str:
        return f"{PREFIX}ck_{name}"

    def inputs(self, task: int, name: str) -> str:
        return f"{PREFIX}st{task}_{name}"

    def buffers(self) -> list[tuple[str, str, str]]:
        """(parameter, array it copies, "checkpoint" or "pass") of every buffer, in parameter order."""
        out = [(self.checkpoint(n), n, "checkpoint") for n, _ in self.carried]
        return out + [(self.inputs(t, n), n, "pass") for t, names in self.stored for n in names]


def loop_title(loop: Region) -> str:
    """How messages name a loop region."""
    if isinstance(loop, RepeatLoop):
        return "qgraph.repeat loop"
    return "qgraph.loop loop" if loop.test_first else "graph_while loop"


def reversed_regions(src: KernelSource, region: Region, order: list[int | None], analysis: bool = False) -> Region:
    """`region` reversed for the adjoint; `order` gets the primal task of each adjoint task.
    `analysis`: a flag loop reversed as a repeat loop would be (to find what the adjoints read)."""
    if isinstance(region, Task):
        order.append(region.index)
        return dataclasses.replace(region, index=len(order) - 1)
    if isinstance(region, Sequence):
        return Sequence(tuple(reversed_regions(src, c, order, analysis) for c in reversed(region.children)))
    if isinstance(region, IfRegion) and not arrays_stored([s for t in src.tasks for s in t.body], {region.flag}):
        return with_bodies(region, lambda body: reversed_regions(src, body, order, analysis))
    if isinstance(region, RepeatLoop) or (analysis and isinstance(region, DeviceLoop)):
        return with_bodies(region, lambda body: reversed_regions(src, body, order, analysis))
    if isinstance(region, IfRegion):
        raise src.error(f"kernel {src.name}: cannot differentiate the qgraph.cond branch on `{region.flag}`, which "
                        "the kernel writes; compute the flag in a kernel of its own", region.lineno)
    assert isinstance(region, DeviceLoop)
    raise src.error(f"kernel {src.name}: the gradient of a flag loop (qgraph.loop, graph_while) needs the count of "
                    "its passes, which a qgraph.Tape records; record the call under a tape and call tape.backward",
                    region.lineno)


def recording_source(src: KernelSource, states: LoopStates) -> KernelSource:
    """The forward pass a tape runs for a call: `src` with the carried arrays copied into their
    checkpoints before every `every`-th pass and after the last one (the last slot)."""
    loop, line = states.loop, states.loop.lineno
    saves = [_copy(states.checkpoint(n), f"{PASS}[()] // {EVERY}", n, rank, line,
                   when=f"{PASS}[()] % {EVERY} == 0 and {PASS}[()] // {EVERY} < {states.checkpoint(n)}.shape[0] - 1")
             for n, rank in states.carried]
    body = Sequence((*saves, *loop.body.children, _serial(f"{PASS}[()] += 1", line)))
    final = [_copy(states.checkpoint(n), f"{states.checkpoint(n)}.shape[0] - 1", n, rank, line)
             for n, rank in states.carried]
    children: list[Region] = []
    for child in src.body.children:
        if child is loop:
            children += [_serial(f"{PASS}[()] = 0", line), dataclasses.replace(loop, body=body), *final]
        else:
            children.append(child)
    tree, _ = _indexed(src, Sequence(tuple(children)))
    hidden = tuple(p for p in hidden_adjoint_params(src, states) if p.name.startswith(PREFIX + "ck_"))
    return dataclasses.replace(src, name=f"{src.name}_recording", qualname=f"{src.qualname}.recording",
                               params=src.params + hidden + (Param(PASS, None, False), Param(EVERY, None, False)),
                               tasks=tuple(leaf_tasks(tree)), body=tree, graph_while=None)


def checkpointed_regions(src: KernelSource, states: LoopStates, order: list[int | None]) -> Region:
    """The adjoint's tree for a kernel whose loop keeps states (see the module docstring); the
    carried arrays are working arrays of the tape's, restored from the buffers as needed."""
    loop, line = states.loop, states.loop.lineno
    ranks = dict(states.carried)
    stored = dict(states.stored)

    def restore(slot, when: str | None = None) -> list[Task]:
        return [_copy(states.checkpoint(n), slot(n), n, r, line, when, restore=True) for n, r in states.carried]

    written = arrays_stored([s for t in src.tasks for s in t.body], {r.flag for r in _branches(loop.body)})

    def passes(seq: Sequence) -> tuple[list[Region], list[Region]]:
        """A pass's forward part (keeping each task's inputs) and its backward part (restoring them)."""
        forward: list[Region] = []
        backward: list[Region] = []
        for child in seq.children:
            if isinstance(child, IfRegion) and child.flag not in written:  # the same branch on the way back
                (then_f, then_b), (else_f, else_b) = passes(child.then), passes(child.orelse)
                forward.append(IfRegion(child.flag, Sequence(tuple(then_f)), Sequence(tuple(else_f)), child.lineno))
                backward.insert(0, IfRegion(child.flag, Sequence(tuple(then_b)), Sequence(tuple(else_b)),
                                            child.lineno))
                continue
            if not isinstance(child, Task):
                raise src.error(f"kernel {src.name}: cannot differentiate this device region inside the "
                                f"{loop_title(loop)} whose passes keep states yet (a branch only on a flag the kernel "
                                "never writes); call the inner part as a kernel of its own", getattr(child, "lineno",
                                                                                                     loop.lineno))
            names = stored.get(child.index, ())
            forward += [_copy(states.inputs(child.index, n), f"{STEP}[()]", n, ranks[n], line) for n in names]
            forward.append(_Forward(child))
            backward = [*(_copy(states.inputs(child.index, n), f"{STEP}[()]", n, ranks[n], line, restore=True)
                          for n in names), _Adjoint(child), *backward]
        return forward, backward

    forward, backward = passes(loop.body)
    forward.append(_serial(f"{STEP}[()] += 1\n{GO}[()] = 1 if {STEP}[()] < {STEPS}[()] else 0", line))
    backward.append(_serial(f"{STEP}[()] -= 1\n{GO}[()] = 1 if {STEP}[()] >= 0 else 0", line))
    segment = Sequence((
        *restore(lambda n: f"{SEGMENT}[()]"),
        _serial(f"{PASS}[()] = {SEGMENT}[()] * {EVERY}\n{STEP}[()] = 0\n"
                f"{STEPS}[()] = min({EVERY}, {states.count} - {PASS}[()])\n{GO}[()] = 1", line),
        DeviceLoop(GO, Sequence(tuple(forward)), line, test_first=True, max_iterations=None),
        _serial(f"{STEP}[()] = {STEPS}[()] - 1\n{GO}[()] = 1", line),
        DeviceLoop(GO, Sequence(tuple(backward)), line, test_first=True, max_iterations=None),
        _serial(f"{SEGMENT}[()] -= 1\n{MORE}[()] = 1 if {SEGMENT}[()] >= 0 else 0", line)))
    children: list[Region] = restore(lambda n: f"{states.checkpoint(n)}.shape[0] - 1")
    for child in reversed(src.body.children):
        if child is loop:
            first = f"({states.count} + {EVERY} - 1) // {EVERY} - 1"  # the last segment
            children += [_serial(f"{SEGMENT}[()] = {first}\n{MORE}[()] = 1 if {SEGMENT}[()] >= 0 else 0", line),
                         DeviceLoop(MORE, segment, line, test_first=True, max_iterations=None),
                         *restore(lambda n: "0", f"{states.count} > 0")]  # slot 0 holds a state only then
        else:
            children.append(_Adjoint(child))
    tree, primal = _indexed(src, Sequence(tuple(children)))
    order += primal
    return tree


def _branches(region: Region) -> list[IfRegion]:
    found = [region] if isinstance(region, IfRegion) else []
    for child in children_of(region):
        found += _branches(child)
    return found


def hidden_adjoint_params(src: KernelSource, states: LoopStates) -> tuple[Param, ...]:
    """The checkpointed adjoint's parameters after the gradients: buffers, counters, flags, sizes.
    A buffer of an array annotated `qgraph.vec3[:]` is annotated `qgraph.vec3[:, :]`."""
    by_name = {p.name: p for p in src.params}
    buffers = [Param(p, _stacked(by_name[n].annotation), False) for p, n, _ in states.buffers()]
    names = (PASS, EVERY, SEGMENT, STEP, STEPS, GO, COUNT, MORE)
    return tuple(buffers) + tuple(Param(n, None, False) for n in names)


def _stacked(annotation: ast.expr | None) -> ast.expr | None:
    """`qgraph.vec3[:]` -> `qgraph.vec3[:, :]` (a leading axis of slots); others: None."""
    if not isinstance(annotation, ast.Subscript):
        return None
    dims = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    slices = ast.Tuple([ast.Slice() for _ in range(len(dims) + 1)], ast.Load())
    return ast.copy_location(ast.Subscript(annotation.value, slices, ast.Load()), annotation)


# -- generated tasks ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Forward(Region):
    """A primal task run forward inside an adjoint (recomputing a segment)."""

    task: Task


@dataclass(frozen=True, eq=False)
class _Adjoint(Region):
    """A primal region whose adjoint goes here (a task outside the loop, reversed)."""

    region: Region


def _indexed(src: KernelSource, tree: Region) -> tuple[Region, list[int | None]]:
    """The tree with every task renumbered in launch order, and per task the primal task whose
    adjoint it is (None: it runs forward)."""
    order: list[int | None] = []

    def walk(region: Region) -> Region:
        if isinstance(region, _Adjoint):
            return reversed_regions(src, region.region, order)
        if isinstance(region, (_Forward, Task)):
            order.append(None)
            return dataclasses.replace(getattr(region, "task", region), index=len(order) - 1)
        if isinstance(region, Sequence):
            return Sequence(tuple(walk(c) for c in region.children))
        return with_bodies(region, walk)

    return walk(tree), order


def _serial(code: str, line: int) -> Task:
    return Task(-1, False, line, _parsed(code, line))


def _parsed(code: str, line: int) -> list[ast.stmt]:
    body = ast.parse(code).body
    for s in body:
        ast.fix_missing_locations(ast.increment_lineno(s, line - 1))
    return body


def _copy(buffer: str, slot: str, array: str, rank: int, line: int, when: str | None = None,
          restore: bool = False) -> Task:
    """`buffer[slot, ...] = array[...]` over every element of `array` (`restore`: the other way
    round), inside `if when:` where given: a parallel task (a serial one for a 0-d array)."""
    idx = [f"{PREFIX}i{d}" for d in range(rank)]
    element = f"{array}[{', '.join(idx) or '()'}]"
    kept = f"{buffer}[{', '.join([slot, *idx])}]"
    stmt = f"{element} = {kept}" if restore else f"{kept} = {element}"
    body = _parsed(f"if {when}:\n    {stmt}" if when else stmt, line)
    if not rank:
        return Task(-1, False, line, body)
    dims = tuple(Dim(ast.Constant(0), _parsed(f"{array}.shape[{d}]", line)[0].value) for d in range(rank))
    return Task(-1, True, line, body, tuple(idx), dims)
