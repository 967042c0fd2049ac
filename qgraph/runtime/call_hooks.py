"""A kernel call as one value (BoundCall), and the hook both launchers pass it to before it runs.

The launchers resolve a call's arguments (its signature `key`, its values and, on CUDA, their
packed parameter bytes) and, while anything listens (`HOOKED`), hand the BoundCall to `on_call`.
Two kinds of listener subscribe per thread: a `qgraph.Tape` (which records the call, and may run
it itself) and a `@qgraph.graph` step's body (on CUDA it records the call instead of launching
it; on the CPU it counts it). Steps, tapes and another library's capture keep BoundCalls; no
other call record exists. Outside both a launch costs one list read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from .arrays import Ndarray

HOOKED = [0]  # threads with a listener (a tape recording, a step's body running) now
WATCHING = [0]  # live tapes whose adjoints read arrays as recorded calls left them (see watch)


class BoundCall(NamedTuple):
    """One kernel call, resolved: the launcher that runs it, its signature, its values (implicit
    parameters included), their parameter bytes (CUDA; None on the CPU) and the stream given."""

    launcher: Any
    key: tuple
    args: tuple
    packs: tuple | None = None
    stream: Any = None

    @property
    def kernel(self):
        """The Kernel called (the launcher's)."""
        return self.launcher.kernel


class StepBody:
    """A @qgraph.graph step's body running on this thread: the calls it made so far, the step
    function, and what it does with a kernel call (`take`: True when the call is not to run now)."""

    __slots__ = ("calls", "fn", "take", "trace")

    def __init__(self, fn: Callable, take: Callable[[StepBody, BoundCall], bool], trace=None) -> None:
        self.calls: list = []
        self.fn = fn
        self.take = take
        self.trace = trace  # a traced run's capture.tracing.Trace, or None


def counted(body: StepBody, call: BoundCall) -> bool:
    """A body's `take` that runs each call as it is made and counts it (the CPU's, a tape's passes)."""
    body.calls.append(call)
    return False


_BODIES: dict[int, StepBody] = {}  # thread ident -> the step body it runs
_TAPES: dict[int, object] = {}  # thread ident -> the qgraph.Tape recording its kernel calls
_LOCK = threading.Lock()


def on_call(call: BoundCall) -> bool:
    """Both launchers' hook, before a call runs: the thread's tape (if any) records it, then the
    step body it runs in (if any) takes it. True: the call was run by the tape (a repeat loop that
    keeps checkpoints) or recorded for the step's graph, so the launch returns."""
    ident = threading.get_ident()
    tape = _TAPES.get(ident)
    if tape is not None and tape.record(call):
        return True
    body = _BODIES.get(ident)
    return body is not None and body.take(body, call)


def push_tape(tape) -> object | None:
    """Make `tape` record this thread's kernel calls: the tape it replaces (None), for pop_tape."""
    ident = threading.get_ident()
    with _LOCK:
        previous = _TAPES.get(ident)
        _TAPES[ident] = tape
        HOOKED[0] += 1
    return previous


def pop_tape(previous) -> None:
    ident = threading.get_ident()
    with _LOCK:
        if previous is None:
            _TAPES.pop(ident, None)
        else:
            _TAPES[ident] = previous
        HOOKED[0] -= 1


def tape_recording() -> bool:
    """Whether a qgraph.Tape records this thread's kernel calls."""
    return HOOKED[0] > 0 and threading.get_ident() in _TAPES


def watch(on: bool) -> None:
    """A tape starts (on) or stops needing arrays as its recorded calls left them: while any does,
    kernel launches and step replays count their writes in Ndarray.version (note_writes); a test
    of one list item on each launch otherwise."""
    with _LOCK:
        WATCHING[0] += 1 if on else -1


def note_writes(written: tuple[int, ...], args: tuple) -> None:
    """Count a call's writes in the versions of the qgraph arrays it writes (`written`: their
    positions, lang.front.writes.written_params)."""
    for k in written:
        a = args[k]
        if type(a) is Ndarray:
            a.version += 1


def run_body(fn: Callable, args: tuple, kwargs: dict, take=counted, trace=None) -> tuple[list, object]:
    """Run `fn` with this thread's kernel calls given to `take` (see StepBody): (the calls, in
    order, what `fn` returned)."""
    ident = threading.get_ident()
    body = StepBody(fn, take, trace)
    with _LOCK:
        _BODIES[ident] = body
        HOOKED[0] += 1
    try:
        result = fn(*args, **kwargs)
    finally:
        with _LOCK:
            del _BODIES[ident]
            HOOKED[0] -= 1
    return body.calls, result


def current_body() -> StepBody | None:
    """The step body this thread is running, or None: a tape groups the calls of one step call, to
    run their adjoints as one captured step too; a step called by a step joins the outer one."""
    return _BODIES.get(threading.get_ident())
