"""Ctrl-C inside compiled CPU loops: `interrupted()` for a kernel's device loops and between
the chunks of its lone parallel loops (`chunk_functions()`); other threads let run from a
device loop (`thread_functions()`), so one of them can call kernel.cancel().

A numba function holds the GIL and never returns to the interpreter, so a SIGINT only sets
Python's "signal pending" flag and a runaway device loop would ignore Ctrl-C for ever. The
runner's loops call `interrupted(record)` once per pass: it runs the pending signal handlers
(PyErr_CheckSignals, in the main thread) and, when one raised, moves that exception into the
record and returns 1, so the runner returns a status and the launcher raises the exception: a
KeyboardInterrupt with the kernel's name and loop, any other (a SIGALRM handler's) unchanged.
The C API functions are named symbols, so the code stays cacheable.
"""

from __future__ import annotations

import ctypes
import sys

from ..lang.cpu.loops import FIRST_CHUNK_WORK, PASS_END, SERIAL_TICK_CHECK, RunnerStatus
from ..lang.lower.debug_checks import CANCEL_WORD, SIGNAL_ERROR, YIELD_CLOCK, YIELD_COUNT, YIELD_STEP
from .process_settings import SharedOverride

_INTERRUPTED = []


def interrupted():
    """The njit-callable check `_qg_interrupted(record)` (built on first use: it needs numba)."""
    if not _INTERRUPTED:
        from llvmlite import ir
        from numba.core import cgutils, types
        from numba.extending import intrinsic

        from ..lang.llvm.runtime import signal_check

        @intrinsic
        def _qg_interrupted(typingctx, record):
            def codegen(context, builder, signature, args):
                array = context.make_array(signature.args[0])(context, builder, args[0])
                return signal_check(builder, lambda: builder.gep(array.data, [ir.IntType(64)(SIGNAL_ERROR)]),
                                    lambda kind: cgutils.alloca_once(builder, kind))

            return types.int64(record), codegen

        _INTERRUPTED.append(_qg_interrupted)
    return _INTERRUPTED[0]


def taken_signal_error(record) -> BaseException | None:
    """The exception a signal handler raised in the runner's last check (see `interrupted`), taken
    out of the record (which owned a reference to it), or None."""

    address = int(record[SIGNAL_ERROR])
    if not address:
        return None
    record[SIGNAL_ERROR] = 0
    error = ctypes.cast(address, ctypes.py_object).value  # a reference of our own
    _DECREF(ctypes.py_object(error))  # the record's
    return error


def handler_error(record) -> BaseException | None:
    """The exception of the signal handler that stopped the runner, unless a KeyboardInterrupt (which
    the launcher raises naming the kernel and loop): a user's SIGALRM Timeout comes through as is."""
    error = taken_signal_error(record)
    return None if error is None or type(error) is KeyboardInterrupt else error


class SerialTaskInterrupted(Exception):
    """Raised by a serial task's loop that found a signal handler raised (lang.cpu.loops.with_ticks);
    the launcher raises the handler's exception, or a KeyboardInterrupt of this message, in its place
    (numba raises only Exceptions)."""


_DECREF = ctypes.pythonapi.Py_DecRef
_DECREF.argtypes, _DECREF.restype = [ctypes.py_object], None


# Plain parallel loops run their outer range in chunks, each a parallel loop of its own, and
# check for Ctrl-C between chunks (lang.cpu.codegen). A chunk is sized to take about
# CHUNK_TARGET_NS: the first one FIRST_CHUNK_WORK iterations (outer times inner, so a small
# kernel stays one chunk), each next one from the time the last one took.
CHUNK_TARGET_NS = 200_000_000
CHUNK_GROWTH = 64  # at most this factor from one chunk to the next


# An interchanged repeat loop runs its passes in blocks (lang.cpu.loops.passes_in_blocks), each
# sized to take about BLOCK_TARGET_NS, so a cancel or Ctrl-C stops it within a block (YIELD_EVERY_NS
# while other threads exist: a block its serial form runs holds the GIL).
BLOCK_TARGET_NS = 20_000_000
BLOCK_GROWTH = 8  # at most this factor from one block to the next: a busy machine's passes vary


def first_chunk(inner_work):
    return max(1, FIRST_CHUNK_WORK // max(inner_work, 1))


def next_chunk(size, elapsed_ns):
    wanted = size * CHUNK_TARGET_NS // max(elapsed_ns, 1)
    return max(1, min(wanted, size * CHUNK_GROWTH))


def next_block(size, elapsed_ns, shared):
    wanted = size * (YIELD_EVERY_NS if shared else BLOCK_TARGET_NS) // max(elapsed_ns, 1)
    return max(1, min(wanted, size * BLOCK_GROWTH))


_CHUNKING = []


def chunk_functions() -> dict:
    """{generated name: njit function} of the chunked loops: the monotonic clock (ns, from
    clock_gettime by name, so the code stays cacheable), the chunk sizes and uint64."""
    if not _CHUNKING:
        import numba
        from llvmlite import ir
        from numba.core import cgutils, types
        from numba.extending import intrinsic

        @intrinsic
        def _qg_clock_ns(typingctx):
            def codegen(context, builder, signature, args):
                i32, i64 = ir.IntType(32), ir.IntType(64)
                spec = ir.LiteralStructType([i64, i64])
                clock = builder.module.globals.get("clock_gettime") or ir.Function(
                    builder.module, ir.FunctionType(i32, [i32, spec.as_pointer()]), "clock_gettime")
                ts = cgutils.alloca_once(builder, spec)  # in the entry block: one in a loop would grow the stack
                builder.call(clock, [i32(1), ts])  # CLOCK_MONOTONIC
                seconds = builder.load(builder.gep(ts, [i32(0), i32(0)]))
                nanos = builder.load(builder.gep(ts, [i32(0), i32(1)]))
                return builder.add(builder.mul(seconds, i64(1_000_000_000)), nanos)

            return types.int64(), codegen

        _CHUNKING.append({"_qg_clock_ns": _qg_clock_ns, "_qg_u64": numba.uint64,
                          "_qg_first_chunk": numba.njit(first_chunk, cache=False),
                          "_qg_next_chunk": numba.njit(next_chunk, cache=False),
                          "_qg_next_block": numba.njit(next_block, cache=False)})
    return _CHUNKING[0]


# A device loop's runner holds the GIL, so no other Python thread runs (to call kernel.cancel(), or
# a progress callback) until it returns. While other threads exist (the launcher checks at each
# call), it releases the GIL for a moment about every YIELD_EVERY_NS. A thread waiting for the GIL
# asks for it once it has waited a whole switch interval without a handover, and the next release
# then waits until that thread has it (CPython's forced switching). A release without that request
# only wakes the waiter, which finds the GIL taken again and starts its wait afresh (at 1 ms releases
# and the default 5 ms interval a waiter never asked; issue 46), so the releases come 1.25 switch
# intervals apart, and while such a runner runs the interval is HANDOVER_SECONDS at most (`HANDOVER`;
# the default 5 ms gave a watcher a turn only every 6 ms, at worst 14): a waiting thread runs within
# about 2.5 ms. The clock is read only at a release, after a number of passes measured to take about
# that long (a clock read every pass cost 70 ns on the development machine). Only the thread holding
# the GIL runs compiled code, so no two runners' parallel loops ever overlap (a parallel region
# releases the GIL while it runs, numba's gufunc, but its caller waits for it).
HANDOVER_SECONDS = 0.001
YIELD_EVERY_NS = int(1.25e9 * HANDOVER_SECONDS)
YIELD_GROWTH = 64  # at most this factor from one number of passes to the next

_THREADS = []
_INTERRUPTED_STATUS, _CANCELLED_STATUS = int(RunnerStatus.INTERRUPTED), int(RunnerStatus.CANCELLED)


# The runtime's checks, compiled by numba (thread_functions) and by the emitter (runtime_sources)
# from this one source; the names starting `_qg_` are bound by each to its own primitives.
def let_threads_run(record):
    step = record[YIELD_STEP]
    if step != 0:  # passes sized to take YIELD_EVERY_NS from the last ones' time
        elapsed = max(_qg_clock_ns() - record[YIELD_CLOCK], 1)  # noqa: F821
        step = max(1, min(step * YIELD_EVERY_NS // elapsed, step * YIELD_GROWTH))
        _qg_release_gil()  # noqa: F821
    else:  # the call's first: start measuring
        step = 1
    record[YIELD_STEP] = step
    record[YIELD_COUNT] = step
    record[YIELD_CLOCK] = _qg_clock_ns()  # noqa: F821


def serial_tick(record):  # Ctrl-C (1), else other threads let run when their turn comes (0)
    if _qg_interrupted(record):  # noqa: F821
        return 1
    if record[YIELD_COUNT] != 0:
        record[YIELD_COUNT] -= 1
        if record[YIELD_COUNT] == 0:
            _qg_let_threads_run(record)  # noqa: F821
    return 0


# a serial tick's steps written out again, then kernel.cancel(): called from pass_end, the tick
# (an njit call of its own) made a one-element repeat 4.5x slower (24 against 5 ns a pass)
def pass_end(record):
    if _qg_interrupted(record):  # noqa: F821
        return _INTERRUPTED_STATUS
    if record[YIELD_COUNT] != 0:
        record[YIELD_COUNT] -= 1
        if record[YIELD_COUNT] == 0:
            _qg_let_threads_run(record)  # noqa: F821
    if record[CANCEL_WORD] != 0:
        return _CANCELLED_STATUS
    return 0


def _rebound(function, names: dict):
    """`function` with its `_qg_` globals bound to `names` (numba reads globals when it compiles)."""
    import types

    return types.FunctionType(function.__code__, {**function.__globals__, **names}, function.__name__)


def thread_functions() -> dict:
    """{generated name: njit function}: `_qg_let_threads_run(record)`, the runner's call when the
    record's YIELD_COUNT of passes runs out (lang.lower.debug_checks: the YIELD_ words), PASS_END,
    what every pass of a device loop checks (lang.cpu.loops.counted_loop), and SERIAL_TICK_CHECK, a
    serial task loop's check every SERIAL_TICK iterations (lang.cpu.loops.with_ticks)."""
    if not _THREADS:
        import numba
        from llvmlite import ir
        from numba.core import cgutils, types
        from numba.extending import intrinsic

        @intrinsic
        def _qg_release_gil(typingctx):
            def codegen(context, builder, signature, args):
                state = ir.IntType(8).as_pointer()
                save = cgutils.get_or_insert_function(builder.module, ir.FunctionType(state, []),
                                                      "PyEval_SaveThread")
                restore = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [state]),
                                                         "PyEval_RestoreThread")
                builder.call(restore, [builder.call(save, [])])
                return context.get_dummy_value()

            return types.none(), codegen

        primitives = {"_qg_clock_ns": chunk_functions()["_qg_clock_ns"], "_qg_release_gil": _qg_release_gil,
                      "_qg_interrupted": interrupted()}
        threads_run = numba.njit(_rebound(let_threads_run, primitives), cache=False)
        primitives["_qg_let_threads_run"] = threads_run
        _THREADS.append({"_qg_let_threads_run": threads_run,
                         PASS_END: numba.njit(_rebound(pass_end, primitives), cache=False),
                         SERIAL_TICK_CHECK: numba.njit(_rebound(serial_tick, primitives), cache=False)})
    return _THREADS[0]


_SOURCES: list = []


def runtime_sources() -> dict:
    """{generated name: (FunctionDef, namespace)} of the same checks for the emitter (lang.llvm), their
    primitives the emitter's own; parsed once per process (every kernel's serial form shares them)."""
    if not _SOURCES:
        _SOURCES.append(_parsed_runtime_sources())
    return _SOURCES[0]


def _parsed_runtime_sources() -> dict:
    import ast
    import inspect
    import textwrap

    from ..lang.llvm import runtime

    names = {"_qg_clock_ns": runtime.CLOCK_NS, "_qg_release_gil": runtime.RELEASE_GIL,
             "_qg_interrupted": runtime.interrupted_primitive(SIGNAL_ERROR)}
    sources = {}
    for name, function in (("_qg_let_threads_run", let_threads_run), (PASS_END, pass_end),
                           (SERIAL_TICK_CHECK, serial_tick), ("_qg_first_chunk", first_chunk),
                           ("_qg_next_chunk", next_chunk), ("_qg_next_block", next_block)):
        fdef = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0]
        namespace = {**function.__globals__, **names}
        names[name] = fdef
        sources[name] = (fdef, namespace)
    return sources


# the switch interval while runners that let other threads run are running: HANDOVER_SECONDS at
# most (unless smaller already); the user's own back when the last of them returns
HANDOVER = SharedOverride(sys.getswitchinterval, sys.setswitchinterval,
                          lambda saved: HANDOVER_SECONDS if saved > HANDOVER_SECONDS else None)
