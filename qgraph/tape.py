"""Reverse-mode gradients of kernel calls: `kernel.grad(...)` and `qgraph.Tape`.

The adjoint of a kernel is a kernel too (lang.adjoint): one per set of arrays with
gradients, made on first use and kept by the primal kernel, so it is compiled, cached,
graphed and captured like any other. A Tape records the kernel calls its thread makes
(the launchers tell it before each call runs) and runs their adjoints in reverse.

In-place code is correct by construction: before a call overwrites an array that the
adjoint of an earlier recorded call (or of this one) must read, the tape copies the array
and hands the copy to that adjoint; an array no adjoint reads is never copied (the update
`x[i] += dt * v[i]` has an adjoint that reads nothing). Arrays a recorded call writes that
have no `.grad` get a temporary gradient for the backward pass (intermediate state), so a
gradient never stops silently at an array the user did not mark.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from . import tape_loops
from .backends import step_body
from .backends.adjoint_calls import adjoint_reads, kernel_facts, launch_adjoint, loop_states
from .errors import QgraphError
from .runtime import state as runtime
from .runtime.arrays import Ndarray


@dataclass
class TapeStats:
    """What a tape holds: the calls recorded, the arrays it copied before a call overwrote them
    (and their bytes), and the temporary gradients of arrays without `.grad` (their bytes)."""

    calls: int = 0
    snapshots: int = 0
    snapshot_bytes: int = 0
    temporary_grads: int = 0
    temporary_grad_bytes: int = 0
    checkpoint_bytes: int = 0  # repeat loops' checkpoints, per-pass inputs and working arrays (lang.adjoint.loops)

    @property
    def extra_bytes(self) -> int:
        return self.snapshot_bytes + self.temporary_grad_bytes + self.checkpoint_bytes


class _Call:
    """One recorded call: the kernel, the values its adjoint reads (copies where a later call
    overwrote them), and the arrays as the user passed them (whose gradients it accumulates)."""

    __slots__ = ("kernel", "values", "arrays", "step", "loop")

    def __init__(self, kernel, values: list, arrays: tuple, step) -> None:
        self.kernel = kernel
        self.values = values
        self.arrays = arrays
        self.step = step  # (the calls list, the step function) of the @qgraph.graph call it was made in, or None
        self.loop = None  # (LoopStates, the adjoint's hidden arguments, LoopPlan) of a loop that keeps states


class Tape:
    """Records the kernel calls this thread makes inside `with qgraph.Tape() as tape:`;
    `tape.backward(loss)` runs their adjoints in reverse (see the module docstring)."""

    def __init__(self, checkpoint_every: int | None = None, checkpoint_bytes: int | None = None) -> None:
        for name, value in (("checkpoint_every", checkpoint_every), ("checkpoint_bytes", checkpoint_bytes)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"qgraph.Tape({name}={value!r}): give a positive int, or None for the default")
        self.checkpoint_every = checkpoint_every  # passes between a repeat loop's checkpoints (None: sqrt of the count)
        self.checkpoint_bytes = checkpoint_bytes  # the most a recorded call's loop may keep (None: no limit)
        self._calls: list[_Call] = []
        self._readers: dict[int, list[tuple[_Call, int]]] = {}  # id(array) -> (call, position) reading it live
        self._arrays: dict[int, Ndarray] = {}  # id -> every array the recorded calls passed
        self._written: set[int] = set()  # ids of arrays a recorded call wrote
        self._temporary: dict[int, Ndarray] = {}  # id(array) -> its gradient for this tape (no .grad of its own)
        self._busy = False  # the tape's own calls (copies, fills, adjoints) are not recorded
        self._previous = None
        self._entered = False
        self._home = None  # the step body the tape was entered in (its calls are not grouped)
        self.stats = TapeStats()

    def __enter__(self) -> Tape:
        if self._entered:
            raise QgraphError("qgraph.Tape: this tape is recording already; a tape is entered once at a time")
        self._entered = True
        self._home = step_body.current_body()
        self._previous = step_body.push_tape(self)
        return self

    def __exit__(self, *exc) -> None:
        step_body.pop_tape(self._previous)
        self._entered = False
        self._previous = None

    # -- recording ---------------------------------------------------------------------------

    def record(self, kernel, args: tuple, key: tuple) -> bool:
        """Called by the launchers before `kernel` runs on `args` (see step_body.tape_call): True
        when the tape ran the call itself (a repeat loop's forward pass that keeps checkpoints)."""
        if self._busy or kernel._source.adjoint is not None:
            return False
        info = kernel_facts(kernel)
        states = loop_states(kernel, key)
        self._busy = True
        try:
            values = list(args)
            loop = None if states is None else tape_loops.plan(self, kernel, args, states)
            for k in info.written:  # copy what earlier adjoints read before this call overwrites it
                a = args[k]
                if isinstance(a, Ndarray):
                    self._copy_for_readers(a)
            step = step_body.current_body()
            if step is not None and self._home is not None and step[0] is self._home[0]:
                step = None  # the tape lives inside this step: its backward is captured with it
            call = _Call(kernel, values, tuple(args), step)
            if loop is not None:  # the arrays the loop carries: working arrays of the adjoint's own
                call.loop = tape_loops.run(self, kernel, args, values, loop)
            reads = adjoint_reads(kernel, key)
            for k, a in enumerate(args):
                if not isinstance(a, Ndarray):
                    continue
                self._arrays[id(a)] = a
                if k in info.written:
                    self._written.add(id(a))
                when = reads.get(kernel._source.params[k].name)
                if when == "before" and k in info.written:
                    values[k] = self._snapshot(a)
                elif when is not None:  # read live: copied if a later call overwrites it
                    self._readers.setdefault(id(a), []).append((call, k))
            self._calls.append(call)
            self.stats.calls += 1
        finally:
            self._busy = False
        return loop is not None

    def _copy_for_readers(self, a: Ndarray) -> None:
        readers = self._readers.pop(id(a), None)
        if readers:
            copy = self._snapshot(a)
            for call, k in readers:
                call.values[k] = copy

    def _snapshot(self, a: Ndarray) -> Ndarray:
        from .tape_kernels import COPY, index_rank

        copy = _like(a)
        COPY[index_rank(a)](copy, a)
        self.stats.snapshots += 1
        self.stats.snapshot_bytes += a.nbytes
        return copy

    # -- the backward pass -------------------------------------------------------------------

    def gradient(self, a: Ndarray) -> Ndarray | None:
        """The gradient array of `a` in this tape: its `.grad`, else the tape's temporary one."""
        return a.grad if a.grad is not None else self._temporary.get(id(a))

    def backward(self, loss: Ndarray | None = None, grads: dict | None = None) -> None:
        """Run the recorded calls' adjoints in reverse. `loss`: its gradient is set to ones first;
        `grads={array: seed}`: each array's gradient is set to its seed (an array or a number)."""
        if loss is None and not grads:
            raise QgraphError("Tape.backward: give the loss array (backward(loss)) or seeds "
                              "(backward(grads={array: seed}))")
        self._busy = True
        try:
            for id_ in self._written:  # intermediate state: a gradient for the backward pass
                a = self._arrays[id_]
                if a.grad is None and id_ not in self._temporary and a.dtype.kind == "f":
                    self._temporary[id_] = g = _like(a)
                    self.stats.temporary_grads += 1
                    self.stats.temporary_grad_bytes += g.nbytes
            seeds = dict(grads or {})
            if loss is not None:
                seeds[loss] = 1.0
            for a, seed in seeds.items():
                self._seed(a, seed)
            if step_body.current_body() is not None:  # inside a step: the adjoints are captured with it
                for call in reversed(self._calls):
                    self._adjoint(call)
            else:
                for group in _step_groups(reversed(self._calls)):
                    if group[0].step is None:
                        self._adjoint(group[0])
                    else:  # the calls of one @qgraph.graph call: their adjoints as one captured step
                        _backward_step(group[0].step[1])(self, group)
        finally:
            self._busy = False

    def _adjoint(self, call: _Call) -> None:
        found = {}
        for p, a in zip(call.kernel._source.params, call.arrays):
            if isinstance(a, Ndarray):
                g = self.gradient(a)
                if g is not None:
                    found[p.name] = g
        if found:
            states, hidden = call.loop[:2] if call.loop else (None, ())
            if call.loop and step_body.current_body() is None:
                tape_loops.check(call.kernel, call.loop)
            launch_adjoint(call.kernel, tuple(call.values), found, states=states, hidden=hidden)

    def _seed(self, a, seed) -> None:
        if not isinstance(a, Ndarray) or a.dtype.kind != "f":
            raise TypeError(f"Tape.backward: a seed is given for {a!r}, which is not a float qgraph array")
        g = self.gradient(a)
        if g is None:
            a.requires_grad = True
            g = a.grad
        if isinstance(seed, (int, float)):
            _fill(g, float(seed))
        else:
            g.from_numpy(np.broadcast_to(np.asarray(seed, dtype=g.dtype), g.shape))

    def zero(self) -> None:
        """Zero the gradients of every array the recorded calls passed (their .grad and the tape's)."""
        self._busy = True
        try:
            for a in self._arrays.values():
                g = self.gradient(a)
                if g is not None:
                    _fill(g, 0.0)
        finally:
            self._busy = False

    def reset(self) -> None:
        """Forget the recorded calls, copies and temporary gradients (the arrays' .grad stay)."""
        self._calls.clear()
        self._readers.clear()
        self._arrays.clear()
        self._written.clear()
        self._temporary.clear()
        self.stats = TapeStats()


def _step_groups(calls):
    """Consecutive calls made in one @qgraph.graph call, together; other calls alone."""
    group: list[_Call] = []
    for call in calls:
        if group and (call.step is None or group[0].step is None or call.step[0] is not group[0].step[0]):
            yield group
            group = []
        group.append(call)
    if group:
        yield group


_BACKWARD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # step function -> its adjoints' step


def _backward_step(fn):
    """The captured backward of step function `fn`: one GraphFunction per step, so its graph is
    built once and replayed, with node updates where arrays or numbers changed."""
    found = _BACKWARD.get(fn)
    if found is None:
        from .step import GraphFunction

        def backward(tape: Tape, calls: list) -> None:
            for call in calls:
                tape._adjoint(call)

        backward.__name__ = backward.__qualname__ = f"{getattr(fn, '__name__', 'step')}.backward"
        found = _BACKWARD[fn] = GraphFunction(backward, None)
    return found


def _like(a: Ndarray) -> Ndarray:
    """A zero-filled array of `a`'s kind on `a`'s device."""
    from .tape_kernels import index_rank

    shape = a.shape[:index_rank(a)]
    if a._device is not None:
        with runtime.device(a._device.info.ordinal):
            return Ndarray(a._element or a.dtype, shape)
    return Ndarray(a._element or a.dtype, shape)


def _fill(a: Ndarray, value: float) -> None:
    from .tape_kernels import FILL, index_rank

    FILL[index_rank(a)](a, a._element(value) if a._element is not None else value)  # a vector for vector arrays
