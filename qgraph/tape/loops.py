"""A qgraph.Tape's part in the gradient of a kernel that keeps states (lang.adjoint.loops): each
loop's checkpoint spacing and the memory it costs, checked against the tape's budget before the
call starts; the buffers, made per recorded call; the recording forward pass, run in place of
the call; for flag loops, the check that their passes fitted the checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..autodiff.adjoint_calls import recording_kernel
from ..errors import QgraphError
from ..lang.adjoint.loops import COUNTERS, loop_title
from ..lang.front.regions import DeviceLoop
from ..runtime import state as runtime
from ..runtime.arrays import Ndarray

FLAG_EVERY = 16  # a flag loop's default spacing (its pass count is unknown when the call starts)
FLAG_SLOTS = 64  # and its default number of checkpoints (without checkpoint_bytes): 1024 passes


@dataclass(frozen=True)
class LoopPlan:
    """One recorded call's kept states: per loop that keeps them (LoopStates.kept's order) its
    pass count (None for a flag loop: counted on the device), the passes between checkpoints and
    the checkpoints (segments); the bytes kept in all."""

    states: object  # lang.adjoint.LoopStates
    counts: tuple[int | None, ...]
    every: tuple[int, ...]
    segments: tuple[int, ...]
    nbytes: int

    def rows(self, j: int | None) -> int:
        """Slots of a pass buffer of loop `j` (one outside loops)."""
        if j is None:
            return 1
        count = self.counts[j]
        return self.every[j] if count is None else min(self.every[j], max(count, 1))


def plan(tape, kernel, args: tuple, states) -> LoopPlan:
    """The spacing of each loop's checkpoints: the tape's checkpoint_every, else sqrt(count) passes,
    else (over the tape's byte budget) the spacing that keeps least; raises when none fits. A flag
    loop gets FLAG_EVERY and as many checkpoints as its share of the budget holds (else FLAG_SLOTS)."""
    src = kernel.source
    size = {n: args[src.param_names.index(n)].nbytes for n, _ in states.carried}
    fixed = sum(size.values()) + sum(size[n] for _, n, kind, j in states.buffers() if kind == "pass" and j is None)
    kept = [sum(size[n] for n in names) for _, names in states.kept]
    owned = [sum(size[n] for _, n, kind, o in states.buffers() if kind == "pass" and o == j)
             for j in range(len(states.kept))]
    counts = tuple(None if isinstance(loop, DeviceLoop) else max(int(_count(src, args, loop.count)), 0)
                   for loop, _ in states.kept)
    budget = tape.checkpoint_bytes

    def cost(j: int, every: int, slots: int | None = None) -> int:  # checkpoints and per-pass inputs
        count = counts[j]
        if count is None:
            return slots * kept[j] + every * owned[j]
        return -(-count // every) * kept[j] + min(every, max(count, 1)) * owned[j]

    every = [tape.checkpoint_every or (FLAG_EVERY if c is None else max(1, math.isqrt(max(c - 1, 0)) + 1))
             for c in counts]
    slots = [FLAG_SLOTS if c is None else -(-c // every[j]) for j, c in enumerate(counts)]
    if budget is not None:
        repeats = [j for j, c in enumerate(counts) if c is not None]
        flags = [j for j, c in enumerate(counts) if c is None]
        if tape.checkpoint_every is None and fixed + sum(cost(j, every[j]) for j in repeats) > budget:
            for j in repeats:  # the spacing that keeps least
                every[j] = min(max(counts[j], 1), max(1, round(math.sqrt(counts[j] * kept[j] / max(owned[j], 1)))))
                slots[j] = -(-counts[j] // every[j])
        left = budget - fixed - sum(cost(j, every[j]) for j in repeats)
        for j in flags:  # an equal share of what is left each
            slots[j] = (left // len(flags) - every[j] * owned[j]) // max(kept[j], 1)
    nbytes = fixed + sum(cost(j, every[j], slots[j]) for j in range(len(counts)))
    if budget is not None and (nbytes > budget or min(slots, default=1) < 1):
        j = max(range(len(counts)), key=lambda j: cost(j, every[j], max(slots[j], 1)), default=None)
        loop = states.kept[j][0] if j is not None else states.loop
        passes = "passes counted on the device" if j is None or counts[j] is None else f"{counts[j]} passes"
        need = fixed + sum(cost(k, every[k], max(slots[k], 1)) for k in range(len(counts)))
        raise _over(src, loop, passes, every[j] if j is not None else 1, need, budget)
    return LoopPlan(states, counts, tuple(every), tuple(slots), nbytes)


def _count(src, args: tuple, name: str):
    """A repeat loop's count: a parameter, or a struct parameter's field (`s.steps`)."""
    root, *fields = name.split(".")
    value = args[src.param_names.index(root)]
    for field in fields:
        value = getattr(value, field)
    return value


def _over(src, loop, passes: str, every: int, nbytes: int, budget: int) -> QgraphError:
    return QgraphError(f"kernel {src.name}: the gradient of its {loop_title(loop)} (line {loop.lineno}, "
                       f"{passes}, a checkpoint every {every}) keeps {nbytes} bytes, over the tape's "
                       f"checkpoint_bytes={budget}; raise qgraph.Tape(checkpoint_bytes=...), or record fewer "
                       "passes per call (the tape copies between calls)")


def run(tape, kernel, args: tuple, values: list, loop: LoopPlan) -> tuple:
    """Run the recording forward pass of the call (in place of the call) and put working arrays
    in `values` for the carried arrays: (the states, the adjoint's hidden arguments, the plan)."""
    src, states = kernel.source, loop.states
    by_name = {n: args[src.param_names.index(n)] for n, _ in states.carried}
    buffers = [_stacked(by_name[n], loop.segments[j] if kind == "checkpoint" else loop.rows(j))
               for _, n, kind, j in states.buffers()]
    home = next(a for a in (*by_name.values(), *args) if isinstance(a, Ndarray))
    counters = []
    for j in range(len(states.kept)):
        for name in COUNTERS:
            dtype = np.int32 if name in ("go", "more") else np.int64
            counters.append(loop.every[j] if name == "every" else _scalar(home, dtype))
    hidden = (*buffers, *counters)
    recording = recording_kernel(kernel, states)
    recording.launch_values(*args, *hidden, None)  # counts the passes it runs
    for target, launcher in kernel.launchers.items():  # the kernel's stats report the call as it ran
        if target in recording.launchers:
            launcher.adopt_last(recording.launchers[target])
    for n in by_name:
        values[src.param_names.index(n)] = _stacked(by_name[n], None)
    tape.stats.checkpoint_bytes += loop.nbytes
    return states, hidden, loop


def check(kernel, loop: tuple) -> None:
    """Before the adjoint of a call with flag loops runs outside a captured step: their passes
    fitted the checkpoints (the recording kept the most passes each loop ran)."""
    states, hidden, plan = loop
    for j, count in enumerate(plan.counts):
        if count is not None:
            continue
        ran = int(hidden[len(hidden) - len(COUNTERS) * (len(plan.counts) - j) + COUNTERS.index("most")].to_numpy())
        if ran > plan.segments[j] * plan.every[j]:
            lp = states.kept[j][0]
            raise QgraphError(f"kernel {kernel.source.name}: its {loop_title(lp)} (line {lp.lineno}) ran {ran} "
                              f"passes, more than the tape's checkpoints held ({plan.segments[j]} checkpoints every "
                              f"{plan.every[j]} passes); record it again under qgraph.Tape(checkpoint_every="
                              f"{-(-ran // plan.segments[j])}) or a larger checkpoint_bytes=")


def _stacked(a: Ndarray, count: int | None) -> Ndarray:
    """A zero-filled array of `count` arrays like `a` (`a`'s own shape for None), on `a`'s device."""
    from .kernels import index_rank

    shape = a.shape[:index_rank(a)]
    shape = shape if count is None else (count, *shape)
    with _on(a):
        return Ndarray(a.element or a.dtype, shape)


def _scalar(home: Ndarray, dtype) -> Ndarray:
    with _on(home):
        return Ndarray(dtype, ())


class _on:
    """The device of an array (nothing on the CPU)."""

    def __init__(self, a: Ndarray) -> None:
        self._context = runtime.device(a.cuda_device.info.ordinal) if a.cuda_device is not None else None

    def __enter__(self):
        if self._context is not None:
            self._context.__enter__()

    def __exit__(self, *exc):
        if self._context is not None:
            self._context.__exit__(*exc)
