"""The adjoint's region tree, device loops included.

A straight body reverses task by task. A `qgraph.repeat` loop whose body's adjoints read no
array the kernel overwrites (linear updates) reverses to a repeat loop of the reversed body, and
a `qgraph.cond` branch on a flag the kernel never writes to a branch on the same flag: neither
keeps anything. A kernel whose loops' adjoints read what it overwrites, or with a flag loop (whose
pass count the adjoint needs) or a branch on a flag it writes, keeps states instead
(`LoopStates`, built by lang.adjoint.checkpoints): a recording forward pass and an adjoint that
recomputes each loop's passes from checkpoints, nested loops and branches included.
Counters and loop flags are 0-d arrays the generated serial tasks advance, so the CPU runner,
the CUDA graph's WHILE nodes and the host fallback run it unchanged.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from functools import cached_property

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

PREFIX = "_qg_lp_"  # the hidden parameters of a kernel's recording and adjoint sources
COUNTERS = ("count", "most", "seg", "j", "n", "go", "more", "every")  # per loop that keeps states


@dataclass(frozen=True)
class LoopStates:
    """What the gradient of a kernel keeps when its adjoints need states it overwrites.
    `carried` (array, index rank): every array the kernel writes (working arrays in the adjoint,
    restored before each read); `stored` (primal task, arrays): the carried arrays each task's
    adjoint reads (kept per pass of the innermost loop around it, once outside loops); `kept`
    (loop, arrays): per loop that keeps states, in pre-order, the carried arrays its passes
    touch (its checkpoints, and its entry state inside an outer loop's pass); `branches`: the
    `qgraph.cond` branches on a flag the kernel writes (the flag kept per pass); `loop`: the
    region messages name."""

    body: Region
    loop: Region
    carried: tuple[tuple[str, int], ...]
    stored: tuple[tuple[int, tuple[str, ...]], ...]
    kept: tuple[tuple[Region, tuple[str, ...]], ...] = ()
    branches: tuple[IfRegion, ...] = ()

    def checkpoint(self, j: int, name: str) -> str:
        return f"{PREFIX}ck{j}_{name}"

    def entry(self, j: int, name: str) -> str:
        return f"{PREFIX}in{j}_{name}"

    def inputs(self, task: int, name: str) -> str:
        return f"{PREFIX}st{task}_{name}"

    def flag(self, branch: int) -> str:
        return f"{PREFIX}fl{branch}"

    def counter(self, name: str, j: int) -> str:
        return f"{PREFIX}{name}{j}"

    def loop_index(self, region: Region) -> int | None:
        return next((j for j, (loop, _) in enumerate(self.kept) if loop is region), None)

    @cached_property
    def owners(self) -> dict[int, int | None]:
        """id(task, branch or loop) -> the innermost loop that keeps states around it (its index), or None."""
        found: dict[int, int | None] = {}

        def walk(region: Region, owner: int | None) -> None:
            found[id(region)] = owner
            j = self.loop_index(region)
            for child in children_of(region):
                walk(child, owner if j is None else j)

        walk(self.body, None)
        return found

    def buffers(self) -> list[tuple[str, str, str, int | None]]:
        """(parameter, array it copies, "checkpoint" or "pass", loop index) of every buffer, in
        parameter order: a checkpoint buffer has a slot per segment of its loop; a pass buffer a
        slot per pass of a segment of its loop (one slot for None: outside every loop)."""
        out = [(self.checkpoint(j, n), n, "checkpoint", j) for j, (_, names) in enumerate(self.kept) for n in names]
        out += [(self.entry(j, n), n, "pass", self.owners[id(loop)]) for j, (loop, names) in enumerate(self.kept)
                if self.owners[id(loop)] is not None for n in names]
        tasks = {t.index: t for t in leaf_tasks(self.body)}
        out += [(self.inputs(t, n), n, "pass", self.owners[id(tasks[t])]) for t, names in self.stored for n in names]
        return out + [(self.flag(b), r.flag, "pass", self.owners[id(r)]) for b, r in enumerate(self.branches)]

    def counters(self) -> list[str]:
        return [self.counter(c, j) for j in range(len(self.kept)) for c in COUNTERS]


def loop_title(loop: Region) -> str:
    """How messages name a loop region."""
    if isinstance(loop, RepeatLoop):
        return "qgraph.repeat loop"
    if isinstance(loop, IfRegion):
        return "qgraph.cond branch"
    return "qgraph.loop loop" if loop.test_first else "graph_while loop"


def reversed_regions(src: KernelSource, region: Region, order: list[int | None], analysis: bool = False) -> Region:
    """`region` reversed for the adjoint; `order` gets the primal task of each adjoint task.
    `analysis`: flag loops and branches on written flags reversed as if they kept nothing (to
    find what the adjoints read)."""
    if isinstance(region, Task):
        order.append(region.index)
        return dataclasses.replace(region, index=len(order) - 1)
    if isinstance(region, Sequence):
        return Sequence(tuple(reversed_regions(src, c, order, analysis) for c in reversed(region.children)))
    if isinstance(region, IfRegion) and (analysis or not arrays_stored([s for t in src.tasks for s in t.body],
                                                                         {region.flag})):
        return with_bodies(region, lambda body: reversed_regions(src, body, order, analysis))
    if isinstance(region, RepeatLoop) or (analysis and isinstance(region, DeviceLoop)):
        return with_bodies(region, lambda body: reversed_regions(src, body, order, analysis))
    if isinstance(region, IfRegion):
        raise src.error(f"kernel {src.name}: the gradient of the qgraph.cond branch on `{region.flag}`, which "
                        "the kernel writes, needs the branch taken, which a qgraph.Tape records; record the call "
                        "under a tape and call tape.backward", region.lineno)
    assert isinstance(region, DeviceLoop)
    raise src.error(f"kernel {src.name}: the gradient of a flag loop (qgraph.loop, graph_while) needs the count of "
                    "its passes, which a qgraph.Tape records; record the call under a tape and call tape.backward",
                    region.lineno)


def hidden_adjoint_params(src: KernelSource, states: LoopStates) -> tuple[Param, ...]:
    """The recording's and the checkpointed adjoint's parameters after the gradients: buffers,
    then per loop its counters, flags and spacing. A buffer of an array annotated `qgraph.vec3[:]`
    is annotated `qgraph.vec3[:, :]`."""
    by_name = {p.name: p for p in src.params}
    buffers = [Param(p, _stacked(by_name[n].annotation), False) for p, n, _, _ in states.buffers()]
    return tuple(buffers) + tuple(Param(n, None, False) for n in states.counters())


def _stacked(annotation: ast.expr | None) -> ast.expr | None:
    """`qgraph.vec3[:]` -> `qgraph.vec3[:, :]` (a leading axis of slots); others: None."""
    if not isinstance(annotation, ast.Subscript):
        return None
    dims = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    slices = ast.Tuple([ast.Slice() for _ in range(len(dims) + 1)], ast.Load())
    return ast.copy_location(ast.Subscript(annotation.value, slices, ast.Load()), annotation)


# -- generated tasks ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Forward(Region):
    """A primal task run forward inside an adjoint (recomputing a segment) or a recording."""

    task: Task


@dataclass(frozen=True, eq=False)
class Adjoint(Region):
    """A primal region whose adjoint goes here (reversed)."""

    region: Region


def indexed(src: KernelSource, tree: Region) -> tuple[Region, list[int | None]]:
    """The tree with every task renumbered in launch order, and per task the primal task whose
    adjoint it is (None: it runs forward)."""
    order: list[int | None] = []

    def walk(region: Region) -> Region:
        if isinstance(region, Adjoint):
            return reversed_regions(src, region.region, order)
        if isinstance(region, (Forward, Task)):
            order.append(None)
            return dataclasses.replace(getattr(region, "task", region), index=len(order) - 1)
        if isinstance(region, Sequence):
            return Sequence(tuple(walk(c) for c in region.children))
        return with_bodies(region, walk)

    return walk(tree), order


def serial(code: str, line: int) -> Task:
    return Task(-1, False, line, _parsed(code, line))


def _parsed(code: str, line: int) -> list[ast.stmt]:
    body = ast.parse(code).body
    for s in body:
        ast.fix_missing_locations(ast.increment_lineno(s, line - 1))
    return body


def copy_task(buffer: str, slot: str, array: str, rank: int, line: int, when: str | None = None,
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
