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

from ..autodiff.adjoint_calls import launch_adjoint, plan_for, writes_of
from ..autodiff.gradient_args import identity, is_array, is_float_array, scan_args, written_aliases
from ..errors import QgraphError
from ..runtime import call_hooks
from ..runtime.arrays import Ndarray
from ..runtime.call_hooks import BoundCall, StepBody
from ..tracebacks import entry_point
from . import loops as tape_loops
from .arrays import FollowedArrays
from .kernels import ADD, COPY, fill, give_back, index_rank, like, scratch_like


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


class TapeEntry:
    """One recorded call (a BoundCall, whose arguments are the arrays as the user passed them, whose
    gradients it accumulates) and what its adjoint needs: the values it reads (copies where a later
    call overwrote them), the step it was made in, the loop states it kept."""

    __slots__ = ("call", "values", "step", "loop", "seen", "aliases", "scratch", "keys")

    def __init__(self, call: BoundCall, values: list, step: StepBody | None, aliases: dict[int, int] | None,
                 keys: tuple) -> None:
        self.call = call
        self.values = values
        self.step = step  # the @qgraph.graph body the call was made in, or None
        self.loop = None  # (LoopStates, the adjoint's hidden arguments, LoopPlan) of a loop that keeps states
        self.seen: tuple[tuple[int, int], ...] = ()  # (position, version) of qgraph arrays its adjoint reads live
        self.aliases = aliases  # position -> an earlier position passing the same array (read-only), or None
        self.scratch: dict[int, Ndarray] | None = None  # position -> the gradient of an alias, added after
        self.keys = keys  # (position, parameter name, identity) of each array argument

    @property
    def kernel(self):
        return self.call.kernel

    @property
    def arrays(self) -> tuple:
        return self.call.args


class Tape:
    """Records the kernel calls this thread makes inside `with qgraph.Tape() as tape:`;
    `tape.backward(loss)` runs their adjoints in reverse (see the module docstring)."""

    def __init__(self, checkpoint_every: int | None = None, checkpoint_bytes: int | None = None) -> None:
        for name, value in (("checkpoint_every", checkpoint_every), ("checkpoint_bytes", checkpoint_bytes)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"qgraph.Tape({name}={value!r}): give a positive int, or None for the default")
        self.checkpoint_every = checkpoint_every  # passes between a repeat loop's checkpoints (None: sqrt of the count)
        self.checkpoint_bytes = checkpoint_bytes  # the most a recorded call's loop may keep (None: no limit)
        self._calls: list[TapeEntry] = []
        self._readers: dict[tuple, list[tuple[TapeEntry, int]]] = {}  # identity -> (call, position) reading it live
        self._followed = FollowedArrays()  # every array the recorded calls passed (tape_arrays)
        self._memo: dict = {}  # kernel -> (its last recorded arguments, what record found of them, has structs)
        self._temporary: dict[tuple, Ndarray] = {}  # identity -> its accumulated gradient (no .grad of its own)
        self._working: dict[tuple, Ndarray] = {}  # identity -> its gradient within one backward pass
        # given back for later tapes when this one dies, unless a captured step's graph holds them
        self._give_back = weakref.finalize(self, give_back, self._working.values())
        self._busy = False  # the tape's own calls (copies, fills, adjoints) are not recorded
        self._previous = None
        self._entered = False
        self._home = None  # the step body the tape was entered in (its calls are not grouped)
        self._unwatch = None  # set while kernel calls must count their writes for this tape (call_hooks.watch)
        self.stats = TapeStats()

    def __enter__(self) -> Tape:
        if self._entered:
            raise QgraphError("qgraph.Tape: this tape is recording already; a tape is entered once at a time")
        self._entered = True
        self._home = call_hooks.current_body()
        self._previous = call_hooks.push_tape(self)
        return self

    def __exit__(self, *exc) -> None:
        call_hooks.pop_tape(self._previous)
        self._entered = False
        self._previous = None
        self._busy = True
        try:  # arrays of other libraries read live: copied now, as the tape cannot see their later writes
            for key in list(self._readers):
                if not isinstance(self._followed.arrays[key], Ndarray):
                    self._copy_for_readers(key)
        finally:
            self._busy = False

    # -- recording ---------------------------------------------------------------------------

    def record(self, bound: BoundCall) -> bool:
        """Called by the launchers before a call runs (runtime.call_hooks.on_call): True when the
        tape ran the call itself (a repeat loop's forward pass that keeps checkpoints)."""
        kernel, args, key = bound.kernel, bound.args, bound.key
        if self._busy or kernel.source.adjoint is not None:
            return False
        src = kernel.source
        who = f"kernel {src.name} (recorded on a qgraph.Tape)"
        info = writes_of(kernel)
        memo = self._memo.get(kernel)  # a simulation passes the same arrays step after step
        if memo is not None and len(memo[0]) == len(args) and all(a is b for a, b in zip(memo[0], args)) \
                and not memo[2]:
            arrays, keys, aliases, names = memo[1]
        else:
            arrays, keys = scan_args(src, args, who)
            aliases = written_aliases(src, keys, info.written, who)
            names = tuple((k, src.params[k].name, keys[k]) for k in arrays)
            structs = any(getattr(type(a), "_qgraph_struct", False) for a in args)  # their fields may change
            self._memo[kernel] = (args, (arrays, keys, aliases, names), structs)
        self._followed.check_structs(src, args, keys, who)
        plan = plan_for(kernel, key)
        states = plan.states
        self._busy = True
        try:
            values = list(args)
            loop = None if states is None else tape_loops.plan(self, kernel, args, states)
            for k in info.written:  # copy what earlier adjoints read before this call overwrites it
                if k in arrays:
                    self._copy_for_readers(keys[k])
                    if type(arrays[k]) is Ndarray:
                        arrays[k].version += 1
            step = call_hooks.current_body()
            if step is not None and step is self._home:
                step = None  # the tape lives inside this step: its backward is captured with it
            call = TapeEntry(bound, values, step, aliases or None, names)
            if loop is not None:  # the arrays the loop carries: working arrays of the adjoint's own
                call.loop = tape_loops.run(self, kernel, args, values, loop)
            reads = plan.reads
            for k, a in arrays.items():
                found = keys[k]
                self._followed.add(src, k, a, found, k in info.written)
                when = reads.get(src.params[k].name)
                if when == "before" and k in info.written:
                    values[k] = self._snapshot(a)
                elif when is not None:  # read live: copied if a later call overwrites it
                    self._readers.setdefault(found, []).append((call, k))
                    if type(a) is Ndarray:
                        call.seen += ((k, a.version),)
                        self._watch()
            self._calls.append(call)
            self.stats.calls += 1
        finally:
            self._busy = False
        return loop is not None

    def _watch(self) -> None:
        if self._unwatch is None:
            call_hooks.watch(True)
            self._unwatch = weakref.finalize(self, call_hooks.watch, False)

    def _copy_for_readers(self, found: tuple) -> None:
        readers = self._readers.pop(found, None)
        if readers:
            copy = self._snapshot(self._followed.arrays[found])
            for call, k in readers:
                call.values[k] = copy

    def _snapshot(self, a) -> Ndarray:
        copy = like(a)
        COPY[index_rank(a)](copy, a)
        self.stats.snapshots += 1
        self.stats.snapshot_bytes += a.nbytes
        return copy

    # -- the backward pass -------------------------------------------------------------------

    def gradient(self, a) -> Ndarray | None:
        """The gradient array of `a` in this tape: its `.grad`, else the tape's temporary one."""
        own = getattr(a, "grad", None) if isinstance(a, Ndarray) else None
        return own if own is not None else self._temporary.get(identity(a)) if is_array(a) else None

    @entry_point  # an error for a misused tape ends at the user's backward call
    def backward(self, loss=None, grads: dict | None = None) -> None:
        """Run the recorded calls' adjoints in reverse. `loss`: its gradient is set to ones first;
        `grads={array: seed}`: each array's gradient is set to its seed (an array or a number).
        The gradients of this pass are added to the arrays' (a second backward adds again)."""
        if loss is None and not grads:
            raise QgraphError("Tape.backward: give the loss array (backward(loss)) or seeds "
                              "(backward(grads={array: seed}))")
        if not self._calls:
            raise QgraphError("Tape.backward: the tape holds no recorded kernel calls (none ran inside `with tape:`, "
                              "or tape.reset() forgot them); record the calls first")
        seeds = [(loss, 1.0)] if loss is not None else []
        seeds += list((grads or {}).items())
        for a, seed in seeds:
            self._followed.check_seed(a, seed)
        self._check_versions()
        self._busy = True
        try:
            self._pass_gradients(seeds)
            if call_hooks.current_body() is not None:  # inside a step: the adjoints are captured with it
                self._give_back.detach()  # its graph keeps using this pass's gradients
                for call in reversed(self._calls):
                    self._adjoint(call)
            else:
                for group in _step_groups(reversed(self._calls)):
                    if group[0].step is None:
                        self._adjoint(group[0])
                    else:  # the calls of one @qgraph.graph call: their adjoints as one captured step
                        _backward_step(group[0].step.fn)(self, group)
            self._accumulate()
        finally:
            self._busy = False

    def _check_versions(self) -> None:
        """Arrays the adjoints read as the recorded calls left them must still hold those values."""
        for number, call in enumerate(self._calls):
            for k, version in call.seen:
                a = call.arrays[k]
                if call.values[k] is a and a.version != version:
                    src = call.kernel.source
                    raise QgraphError(f"Tape.backward: the gradient of recorded call {number + 1} (kernel {src.name}, "
                                      f"line {src.lineno}) needs '{src.params[k].name}' as that call left it, and "
                                      "it was changed since (by a kernel call this tape did not record, another "
                                      "tape's call, from_numpy or fill); call backward before changing it, or "
                                      "record the calls again")

    def _pass_gradients(self, seeds: list) -> None:
        """This pass's gradient of every array the calls wrote or the user seeded: zero, then the seeds."""
        wanted = {identity(a): a for a, _ in seeds}
        for found, a in wanted.items():  # a seeded array no call passed: its gradient is the seed itself
            self._followed.arrays.setdefault(found, a)
        wanted.update((k, self._followed.arrays[k]) for k in self._followed.written)
        for found, a in wanted.items():
            if not is_float_array(a):
                continue
            buffer = self._working.get(found)
            if buffer is None:
                buffer = self._working[found] = self._new_gradient(a)
            fill(buffer, 0.0)
        for a, seed in seeds:
            buffer = self._working[identity(a)]
            if isinstance(seed, (int, float)):
                fill(buffer, float(seed))
            else:
                buffer.from_numpy(np.broadcast_to(np.asarray(seed, dtype=buffer.dtype), buffer.shape))

    def _new_gradient(self, a) -> Ndarray:
        g = scratch_like(a)
        self.stats.temporary_grads += 1
        self.stats.temporary_grad_bytes += g.nbytes
        return g

    def _accumulate(self) -> None:
        """This pass's gradients added to the arrays' `.grad` (or the tape's own, adopted the first time)."""
        for found, buffer in list(self._working.items()):
            a = self._followed.arrays.get(found)
            own = a.grad if isinstance(a, Ndarray) else None
            if own is not None:
                ADD[index_rank(own)](own, buffer)
            elif found not in self._temporary:
                self._temporary[found] = self._working.pop(found)
            else:
                ADD[index_rank(buffer)](self._temporary[found], buffer)

    def _adjoint(self, call: TapeEntry) -> None:
        found, added = {}, []
        working, temporary = self._working, self._temporary
        for k, name, key in call.keys:  # this pass's gradient, else the array's .grad, else the tape's own
            g = working.get(key)
            if g is None:
                a = call.arrays[k]
                g = a.grad if type(a) is Ndarray else temporary.get(key)
                if g is None:
                    continue
            if call.aliases and k in call.aliases:  # the same array again, read only: a gradient of its own
                if call.scratch is None:
                    call.scratch = {}
                scratch = call.scratch.get(k)
                if scratch is None:
                    scratch = call.scratch[k] = like(g)
                fill(scratch, 0.0)
                added.append((g, scratch))
                g = scratch
            found[name] = g
        if found:
            states, hidden = call.loop[:2] if call.loop else (None, ())
            if call.loop and call_hooks.current_body() is None:
                tape_loops.check(call.kernel, call.loop)
            launch_adjoint(call.kernel, tuple(call.values), found, states=states, hidden=hidden)
        for g, scratch in added:
            ADD[index_rank(g)](g, scratch)

    def zero(self) -> None:
        """Zero the gradients of every array the recorded calls passed (their .grad and the tape's)."""
        self._busy = True
        try:
            for a in self._followed.arrays.values():
                g = self.gradient(a)
                if g is not None:
                    fill(g, 0.0)
        finally:
            self._busy = False

    def reset(self) -> None:
        """Forget the recorded calls, copies and temporary gradients (the arrays' .grad stay)."""
        self._calls.clear()
        self._readers.clear()
        self._followed.clear()
        self._memo.clear()
        self._temporary.clear()
        self._working.clear()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        self.stats = TapeStats()


def _step_groups(calls):
    """Consecutive calls made in one @qgraph.graph call, together; other calls alone."""
    group: list[TapeEntry] = []
    for call in calls:
        if group and (call.step is None or group[0].step is None or call.step is not group[0].step):
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
        from ..capture.step import GraphFunction

        def backward(tape: Tape, calls: list) -> None:
            for call in calls:
                tape._adjoint(call)

        backward.__name__ = backward.__qualname__ = f"{getattr(fn, '__name__', 'step')}.backward"
        found = _BACKWARD[fn] = GraphFunction(backward, None)
    return found
