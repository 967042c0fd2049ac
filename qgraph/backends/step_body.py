"""Which threads are running the body of a @qgraph.graph step, and the kernel calls each made.

On CUDA a kernel call in a body is recorded instead of launched (step_capture.intercept adds
its StepCall); on the CPU it runs and is counted (the CPU launch adds its launcher). Either
way the step's stats report the calls of the body's last run. Kernel launches read ACTIVE
first, so outside a step this costs them one list read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..runtime.arrays import Ndarray

ACTIVE = [0]  # threads running a step's body or recording a qgraph.Tape now
WATCHING = [0]  # live tapes whose adjoints read arrays as recorded calls left them (see watch)
_BODIES: dict[int, tuple[list, Callable]] = {}  # thread ident -> (the calls its body made so far, the step function)
_TAPES: dict[int, object] = {}  # thread ident -> the qgraph.Tape recording its kernel calls
_LOCK = threading.Lock()


def push_tape(tape) -> object | None:
    """Make `tape` record this thread's kernel calls: the tape it replaces (None), for pop_tape."""
    ident = threading.get_ident()
    with _LOCK:
        previous = _TAPES.get(ident)
        _TAPES[ident] = tape
        ACTIVE[0] += 1
    return previous


def pop_tape(previous) -> None:
    ident = threading.get_ident()
    with _LOCK:
        if previous is None:
            _TAPES.pop(ident, None)
        else:
            _TAPES[ident] = previous
        ACTIVE[0] -= 1


def tape_recording() -> bool:
    """Whether a qgraph.Tape records this thread's kernel calls."""
    return threading.get_ident() in _TAPES


def watch(on: bool) -> None:
    """A tape starts (on) or stops needing arrays as its recorded calls left them: while any does,
    kernel launches and step replays count their writes in Ndarray.version (note_writes); a test
    of one list item on each launch otherwise."""
    with _LOCK:
        WATCHING[0] += 1 if on else -1


def tape_call(launcher, args: tuple, key: tuple) -> bool:
    """Both launchers' hook, before a call runs: the thread's tape (if any) records it; True
    when the tape ran the call itself (a repeat loop that keeps checkpoints): skip the launch."""
    tape = _TAPES.get(threading.get_ident())
    return tape is not None and tape.record(launcher.kernel, args, key)


def note_writes(written: tuple[int, ...], args: tuple) -> None:
    """Count a call's writes in the versions of the qgraph arrays it writes (`written`: their
    positions, backends.checks.written_params)."""
    for k in written:
        a = args[k]
        if type(a) is Ndarray:
            a.version += 1


def run_body(fn: Callable, args: tuple, kwargs: dict) -> tuple[list, object]:
    """Run `fn` with this thread's kernel calls collected: (the calls, in order, what `fn` returned)."""
    ident = threading.get_ident()
    calls: list = []
    with _LOCK:
        _BODIES[ident] = (calls, fn)
        ACTIVE[0] += 1
    try:
        result = fn(*args, **kwargs)
    finally:
        with _LOCK:
            del _BODIES[ident]
            ACTIVE[0] -= 1
    return calls, result


def current_body() -> tuple[list, Callable] | None:
    """(the calls list, the step function) of the body this thread is running, or None: a tape
    groups the calls of one step call, to run their adjoints as one captured step too."""
    return _BODIES.get(threading.get_ident())


def body_calls() -> list | None:
    """The calls collected so far by the body this thread is running, or None outside a body."""
    body = _BODIES.get(threading.get_ident())
    return None if body is None else body[0]


def in_body() -> bool:
    """Whether this thread is running a step's body (a step called there joins the outer one)."""
    return threading.get_ident() in _BODIES


def count_call(launcher, args: tuple, key: tuple) -> bool:
    """The CPU launch's hook: a kernel call made in a step's body (run as it is made), or under a
    tape; True when the tape ran it (the launch returns)."""
    if tape_call(launcher, args, key):
        return True
    body = _BODIES.get(threading.get_ident())
    if body is not None:
        body[0].append(launcher)
    return False
