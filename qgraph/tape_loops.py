"""A qgraph.Tape's part in the gradient of a `qgraph.repeat` loop that keeps states
(lang.adjoint.loops): the checkpoint spacing and the memory it costs, checked against the
tape's budget before the call starts; the buffers, made per recorded call; the recording
forward pass, run in place of the call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .backends.adjoint_calls import recording_kernel
from .errors import QgraphError
from .runtime import state as runtime
from .runtime.arrays import Ndarray


@dataclass(frozen=True)
class LoopPlan:
    """One recorded call's loop: its pass count, the passes between checkpoints, the segments."""

    states: object  # lang.adjoint.LoopStates
    count: int
    every: int
    segments: int
    nbytes: int


def plan(tape, kernel, args: tuple, states) -> LoopPlan:
    """The spacing of a call's checkpoints: the tape's checkpoint_every, else sqrt(count) passes,
    else (over the tape's byte budget) the spacing that keeps least; raises when none fits."""
    src = kernel._source
    count = max(int(args[src.param_names.index(states.loop.count)]), 0)
    by_name = {n: args[src.param_names.index(n)] for n, _ in states.carried}
    carried = sum(a.nbytes for a in by_name.values())
    stored = sum(by_name[n].nbytes for _, names in states.stored for n in names)

    def cost(every: int) -> int:  # checkpoints (and the final state), per-pass inputs, working arrays
        return (-(-count // every) + 2) * carried + min(every, max(count, 1)) * stored

    every = tape.checkpoint_every or max(1, math.isqrt(max(count - 1, 0)) + 1)
    budget = tape.checkpoint_bytes
    if budget is not None and cost(every) > budget and tape.checkpoint_every is None:
        every = min(max(count, 1), max(1, round(math.sqrt(count * carried / max(stored, 1)))))
    if budget is not None and cost(every) > budget:
        raise QgraphError(f"kernel {src.name}: the gradient of its qgraph.repeat loop (line {states.loop.lineno}, "
                          f"{count} passes, a checkpoint every {every}) keeps {cost(every)} bytes, over the tape's "
                          f"checkpoint_bytes={budget}; raise qgraph.Tape(checkpoint_bytes=...), or record fewer "
                          "passes per call (the tape copies between calls)")
    return LoopPlan(states, count, every, -(-count // every), cost(every))


def run(tape, kernel, args: tuple, values: list, loop: LoopPlan) -> tuple:
    """Run the recording forward pass of the call (in place of the call) and put working arrays
    in `values` for the carried arrays: (the states, the adjoint's hidden arguments)."""
    src, states = kernel._source, loop.states
    by_name = {n: args[src.param_names.index(n)] for n, _ in states.carried}
    buffers = [_stacked(by_name[n], loop.segments + 1 if kind == "checkpoint" else min(loop.every, max(loop.count, 1)))
               for _, n, kind in states.buffers()]
    checkpoints = buffers[:len(states.carried)]
    counters = [_scalar(by_name, np.int64) for _ in range(4)]  # pass, segment, step in segment, steps in segment
    go = _scalar(by_name, np.int32)
    recording = recording_kernel(kernel, states)
    if recording._generation != runtime.STATE.generation:
        recording._attach()
    recording._launch(*args, *checkpoints, counters[0], loop.every, None)
    for n in by_name:
        k = src.param_names.index(n)
        values[k] = _stacked(by_name[n], None)
    tape.stats.checkpoint_bytes += loop.nbytes
    hidden = (*buffers, counters[0], loop.every, counters[1], loop.segments, counters[2], counters[3], go)
    return states, hidden


def _stacked(a: Ndarray, count: int | None) -> Ndarray:
    """A zero-filled array of `count` arrays like `a` (`a`'s own shape for None), on `a`'s device."""
    from .tape_kernels import index_rank

    shape = a.shape[:index_rank(a)]
    shape = shape if count is None else (count, *shape)
    with _on(a):
        return Ndarray(a._element or a.dtype, shape)


def _scalar(by_name: dict, dtype) -> Ndarray:
    with _on(next(iter(by_name.values()))):
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
