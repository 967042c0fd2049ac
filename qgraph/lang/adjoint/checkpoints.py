"""The recording forward pass and the checkpointed adjoint of a kernel that keeps states
(lang.adjoint.loops.LoopStates), built by one recursion over its region tree.

`record` is forward code that keeps what `back` needs: each task's inputs (the carried arrays
its adjoint reads) and each written branch flag, in a slot per pass of the innermost loop that
keeps states around it (one slot outside loops); a loop at the top level saves its checkpoints
every `every` passes and counts its passes; a loop nested in another keeps its entry state
instead. `back` runs the adjoints in reverse, restoring each task's inputs first; a top-level
loop's adjoint takes its segments from the last: restore the segment's checkpoint, recompute its
passes with `record`, run them backwards with `back`. A nested loop's adjoint restores its entry
state, runs its own recording (checkpoints in buffers reused by every outer pass), then its
segments: so each nesting level costs one more forward pass of the inner loop, and memory stays
the sum of the levels' buffers.
"""

from __future__ import annotations

import dataclasses

from ..front.parse import KernelSource
from ..front.regions import DeviceLoop, IfRegion, Region, Sequence, Task, leaf_tasks, with_bodies
from .loops import Adjoint, Forward, LoopStates, copy_task, hidden_adjoint_params, indexed, serial


def recording_source(src: KernelSource, states: LoopStates) -> KernelSource:
    """The forward pass a tape runs for a call: `src` keeping what its adjoint needs."""
    builder = _Builder(src, states)
    tree, _ = indexed(src, _flattened(Sequence(tuple(builder.record(src.body, None)))))
    return dataclasses.replace(src, name=f"{src.name}_recording", qualname=f"{src.qualname}.recording",
                               params=src.params + hidden_adjoint_params(src, states),
                               tasks=tuple(leaf_tasks(tree)), body=tree, graph_while=None)


def checkpointed_regions(src: KernelSource, states: LoopStates, order: list[int | None]) -> Region:
    """The adjoint's tree for a kernel that keeps states (see the module docstring); the carried
    arrays are working arrays of the tape's, restored from the buffers before each read."""
    tree, primal = indexed(src, _flattened(Sequence(tuple(_Builder(src, states).back(src.body, None)))))
    order += primal
    return tree


def _flattened(region: Region) -> Region:
    """`region` with sequences inside sequences spliced into them."""
    if isinstance(region, Sequence):
        children: list[Region] = []
        for child in (_flattened(c) for c in region.children):
            children += child.children if isinstance(child, Sequence) else [child]
        return Sequence(tuple(children))
    if isinstance(region, (Task, Forward, Adjoint)):
        return region
    return with_bodies(region, _flattened)


class _Builder:
    def __init__(self, src: KernelSource, states: LoopStates) -> None:
        self.states = states
        self.ranks = dict(states.carried)
        self.stored = dict(states.stored)
        self.branches = {id(b): k for k, b in enumerate(states.branches)}

    def _slot(self, owner: int | None) -> str:
        return "0" if owner is None else f"{self.states.counter('j', owner)}[()]"

    def _copies(self, pairs, slot: str, line: int, restore: bool = False, when: str | None = None) -> list[Task]:
        return [copy_task(buffer, slot, n, self.ranks[n], line, when, restore) for buffer, n in pairs]

    def record(self, region: Region, owner: int | None) -> list[Region]:
        """Forward code for `region` keeping, in `owner`'s pass slot, what `back` reads."""
        if isinstance(region, Sequence):
            return [r for c in region.children for r in self.record(c, owner)]
        slot, states = self._slot(owner), self.states
        if isinstance(region, Task):
            names = self.stored.get(region.index, ())
            return [*self._copies([(states.inputs(region.index, n), n) for n in names], slot, region.lineno),
                    Forward(region)]
        if isinstance(region, IfRegion):
            b = self.branches.get(id(region))
            keep = [] if b is None else self._copies([(states.flag(b), region.flag)], slot, region.lineno)
            return [*keep, with_bodies(region, lambda body: Sequence(tuple(self.record(body, owner))))]
        j = states.loop_index(region)
        if j is None:  # keeps nothing
            return [self.forward(region, counted=False)]
        if owner is None:
            return self.recording(region, j)
        names = states.kept[j][1]
        return [*self._copies([(states.entry(j, n), n) for n in names], slot, region.lineno),
                self.forward(region, counted=False)]

    def forward(self, region: Region, counted: bool) -> Region:
        """`region` run forward; `counted`: the loops that keep states count their passes
        (`most`: the most passes one ran, which the tape checks against a flag loop's checkpoints)."""
        if isinstance(region, Task):
            return Forward(region)
        if isinstance(region, Sequence):
            return Sequence(tuple(self.forward(c, counted) for c in region.children))
        body = with_bodies(region, lambda b: self.forward(b, counted))
        j = self.states.loop_index(region)
        if not counted or j is None:
            return body
        count, most, line = self.states.counter("count", j), self.states.counter("most", j), region.lineno
        body = dataclasses.replace(body, body=Sequence((*body.body.children, serial(f"{count}[()] += 1", line))))
        return Sequence((serial(f"{count}[()] = 0", line), body,
                         serial(f"{most}[()] = max({most}[()], {count}[()])", line)))

    def recording(self, loop: Region, j: int) -> list[Region]:
        """`loop` run forward saving its checkpoints every `every` passes and counting its passes."""
        states, line = self.states, loop.lineno
        count, every = states.counter("count", j), states.counter("every", j)
        names = states.kept[j][1]
        saves = [copy_task(states.checkpoint(j, n), f"{count}[()] // {every}", n, self.ranks[n], line,
                           f"{count}[()] % {every} == 0 and {count}[()] // {every} < "
                           f"{states.checkpoint(j, n)}.shape[0]") for n in names]
        inner = self.forward(loop.body, counted=True)
        body = Sequence((*saves, *inner.children, serial(f"{count}[()] += 1", line)))
        most = states.counter("most", j)
        return [serial(f"{count}[()] = 0", line), dataclasses.replace(loop, body=body),
                serial(f"{most}[()] = max({most}[()], {count}[()])", line)]

    def back(self, region: Region, owner: int | None) -> list[Region]:
        """The adjoint of `region`, each read of a carried array restored first."""
        if isinstance(region, Sequence):
            return [r for c in reversed(region.children) for r in self.back(c, owner)]
        slot, states = self._slot(owner), self.states
        if isinstance(region, Task):
            names = self.stored.get(region.index, ())
            return [*self._copies([(states.inputs(region.index, n), n) for n in names], slot, region.lineno,
                                  restore=True), Adjoint(region)]
        if isinstance(region, IfRegion):
            b = self.branches.get(id(region))
            keep = [] if b is None else self._copies([(states.flag(b), region.flag)], slot, region.lineno, True)
            return [*keep, with_bodies(region, lambda body: Sequence(tuple(self.back(body, owner))))]
        j = states.loop_index(region)
        if j is None:
            return [Adjoint(region)]
        if owner is None:
            return self.segments(region, j)
        names = states.kept[j][1]
        return [*self._copies([(states.entry(j, n), n) for n in names], slot, region.lineno, restore=True),
                *self.recording(region, j), *self.segments(region, j)]

    def segments(self, loop: Region, j: int) -> list[Region]:
        """The adjoint of a loop whose checkpoints and count are kept: its segments from the last."""
        states, line = self.states, loop.lineno
        c = {name: states.counter(name, j) for name in ("count", "every", "seg", "j", "n", "go", "more")}
        count, every, seg, step, steps, go, more = c.values()
        forward = [*self.record(loop.body, j),
                   serial(f"{step}[()] += 1\n{go}[()] = 1 if {step}[()] < {steps}[()] else 0", line)]
        backward = [*self.back(loop.body, j),
                    serial(f"{step}[()] -= 1\n{go}[()] = 1 if {step}[()] >= 0 else 0", line)]
        restore = self._copies([(states.checkpoint(j, n), n) for n in states.kept[j][1]], f"{seg}[()]", line,
                               restore=True)
        segment = Sequence((
            *restore,
            serial(f"{step}[()] = 0\n{steps}[()] = min({every}, {count}[()] - {seg}[()] * {every})\n{go}[()] = 1",
                   line),
            DeviceLoop(go, Sequence(tuple(forward)), line, test_first=True, max_iterations=None),
            serial(f"{step}[()] = {steps}[()] - 1\n{go}[()] = 1", line),
            DeviceLoop(go, Sequence(tuple(backward)), line, test_first=True, max_iterations=None),
            serial(f"{seg}[()] -= 1\n{more}[()] = 1 if {seg}[()] >= 0 else 0", line)))
        first = f"({count}[()] + {every} - 1) // {every} - 1"  # the last segment
        return [serial(f"{seg}[()] = {first}\n{more}[()] = 1 if {seg}[()] >= 0 else 0", line),
                DeviceLoop(more, segment, line, test_first=True, max_iterations=None)]

