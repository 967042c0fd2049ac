"""A qgraph.Tape's part in the gradient of a device loop that keeps states (lang.adjoint.loops):
the checkpoint spacing and the memory it costs, checked against the tape's budget before the
call starts; the buffers, made per recorded call; the recording forward pass, run in place of
the call; for a flag loop, the check that its passes fitted the checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .backends.adjoint_calls import recording_kernel
from .errors import QgraphError
from .lang.adjoint.loops import loop_title
from .lang.front.regions import DeviceLoop
from .runtime import state as runtime
from .runtime.arrays import Ndarray

FLAG_EVERY = 16  # a flag loop's default spacing (its pass count is unknown when the call starts)
FLAG_SLOTS = 64  # and its default number of checkpoints (without checkpoint_bytes): 1024 passes


@dataclass(frozen=True)
class LoopPlan:
    """One recorded call's loop: its pass count (None for a flag loop: counted on the device),
    the passes between checkpoints, the checkpoints (segments) and the bytes kept."""

    states: object  # lang.adjoint.LoopStates
    count: int | None
    every: int
    segments: int
    nbytes: int

    @property
    def rows(self) -> int:
        """Passes a segment keeps inputs for."""
        return self.every if self.count is None else min(self.every, max(self.count, 1))


def plan(tape, kernel, args: tuple, states) -> LoopPlan:
    """The spacing of a call's checkpoints: the tape's checkpoint_every, else sqrt(count) passes,
    else (over the tape's byte budget) the spacing that keeps least; raises when none fits. A
    flag loop gets FLAG_EVERY and as many checkpoints as the budget holds (else FLAG_SLOTS)."""
    src = kernel._source
    by_name = {n: args[src.param_names.index(n)] for n, _ in states.carried}
    carried = sum(a.nbytes for a in by_name.values())
    stored = sum(by_name[n].nbytes for _, names in states.stored for n in names)
    budget = tape.checkpoint_bytes
    if isinstance(states.loop, DeviceLoop):
        every = tape.checkpoint_every or FLAG_EVERY
        slots = FLAG_SLOTS if budget is None else (budget - 2 * carried - every * stored) // max(carried, 1)
        nbytes = (slots + 2) * carried + every * stored
        if slots < 1:
            raise _over(src, states, "passes counted on the device", every, nbytes, budget)
        return LoopPlan(states, None, every, slots, nbytes)
    count = max(int(args[src.param_names.index(states.loop.count)]), 0)

    def cost(every: int) -> int:  # checkpoints (and the final state), per-pass inputs, working arrays
        return (-(-count // every) + 2) * carried + min(every, max(count, 1)) * stored

    every = tape.checkpoint_every or max(1, math.isqrt(max(count - 1, 0)) + 1)
    if budget is not None and cost(every) > budget and tape.checkpoint_every is None:
        every = min(max(count, 1), max(1, round(math.sqrt(count * carried / max(stored, 1)))))
    if budget is not None and cost(every) > budget:
        raise _over(src, states, f"{count} passes", every, cost(every), budget)
    return LoopPlan(states, count, every, -(-count // every), cost(every))


def _over(src, states, passes: str, every: int, nbytes: int, budget: int) -> QgraphError:
    return QgraphError(f"kernel {src.name}: the gradient of its {loop_title(states.loop)} (line {states.loop.lineno}, "
                       f"{passes}, a checkpoint every {every}) keeps {nbytes} bytes, over the tape's "
                       f"checkpoint_bytes={budget}; raise qgraph.Tape(checkpoint_bytes=...), or record fewer "
                       "passes per call (the tape copies between calls)")


def run(tape, kernel, args: tuple, values: list, loop: LoopPlan) -> tuple:
    """Run the recording forward pass of the call (in place of the call) and put working arrays
    in `values` for the carried arrays: (the states, the adjoint's hidden arguments, the plan)."""
    src, states = kernel._source, loop.states
    by_name = {n: args[src.param_names.index(n)] for n, _ in states.carried}
    buffers = [_stacked(by_name[n], loop.segments + 1 if kind == "checkpoint" else loop.rows)
               for _, n, kind in states.buffers()]
    checkpoints = buffers[:len(states.carried)]
    home = next(a for a in (*by_name.values(), *args) if isinstance(a, Ndarray))
    count, passed, segment, step, steps = (_scalar(home, np.int64) for _ in range(5))
    go, more = _scalar(home, np.int32), _scalar(home, np.int32)
    recording = recording_kernel(kernel, states)
    if recording._generation != runtime.STATE.generation:
        recording._attach()
    recording._launch(*args, *checkpoints, count, loop.every, None)  # counts the passes it runs
    for n in by_name:
        values[src.param_names.index(n)] = _stacked(by_name[n], None)
    tape.stats.checkpoint_bytes += loop.nbytes
    hidden = (*buffers, passed, loop.every, segment, step, steps, go, count, more)
    return states, hidden, loop


def check(kernel, loop: tuple) -> None:
    """Before a flag loop's adjoint runs outside a captured step: its passes fitted the checkpoints."""
    states, hidden, plan = loop
    if plan.count is not None:
        return
    count = int(hidden[-2].to_numpy())
    if count > plan.segments * plan.every:
        raise QgraphError(f"kernel {kernel._source.name}: its {loop_title(states.loop)} (line {states.loop.lineno}) "
                          f"ran {count} passes, more than the tape's checkpoints held ({plan.segments} checkpoints "
                          f"every {plan.every} passes); record it again under qgraph.Tape(checkpoint_every="
                          f"{-(-count // plan.segments)}) or a larger checkpoint_bytes=")


def _stacked(a: Ndarray, count: int | None) -> Ndarray:
    """A zero-filled array of `count` arrays like `a` (`a`'s own shape for None), on `a`'s device."""
    from .tape_kernels import index_rank

    shape = a.shape[:index_rank(a)]
    shape = shape if count is None else (count, *shape)
    with _on(a):
        return Ndarray(a._element or a.dtype, shape)


def _scalar(home: Ndarray, dtype) -> Ndarray:
    with _on(home):
        return Ndarray(dtype, ())


class _on:
    """The device of an array (nothing on the CPU)."""

    def __init__(self, a: Ndarray) -> None:
        self._context = runtime.device(a._device.info.ordinal) if a._device is not None else None

    def __enter__(self):
        if self._context is not None:
            self._context.__enter__()

    def __exit__(self, *exc):
        if self._context is not None:
            self._context.__exit__(*exc)
