"""Ctrl-C inside compiled CPU loops: `interrupted()` for a kernel's device loops and between
the chunks of its lone parallel loops (`chunk_functions()`); other threads let run from a
device loop (`thread_functions()`), so one of them can call kernel.cancel().

A numba function holds the GIL and never returns to the interpreter, so a SIGINT only sets
Python's "signal pending" flag and a runaway device loop would ignore Ctrl-C for ever. The
runner's loops call `interrupted()` once per pass: it runs the pending signal handlers
(PyErr_CheckSignals, in the main thread) and, when one raised (KeyboardInterrupt), clears
that exception and returns 1, so the runner returns a status the launcher turns back into
KeyboardInterrupt with the kernel's name and loop. The C API functions are named symbols,
so the code stays cacheable.
"""

from __future__ import annotations

import sys

from ..lang.cpu.loops import FIRST_CHUNK_WORK

_INTERRUPTED = []


def interrupted():
    """The njit-callable check (built on first use: it needs numba)."""
    if not _INTERRUPTED:
        from llvmlite import ir
        from numba.core import cgutils, types
        from numba.extending import intrinsic

        @intrinsic
        def _qg_interrupted(typingctx):
            def codegen(context, builder, signature, args):
                i32 = ir.IntType(32)
                check = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, []),
                                                       "PyErr_CheckSignals")
                clear = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                       "PyErr_Clear")
                raised = builder.icmp_signed("!=", builder.call(check, []), i32(0))
                with builder.if_then(raised, likely=False):
                    builder.call(clear, [])
                return builder.zext(raised, ir.IntType(64))

            return types.int64(), codegen

        _INTERRUPTED.append(_qg_interrupted)
    return _INTERRUPTED[0]


# Plain parallel loops run their outer range in chunks, each a parallel loop of its own, and
# check for Ctrl-C between chunks (lang.cpu.codegen). A chunk is sized to take about
# CHUNK_TARGET_NS: the first one FIRST_CHUNK_WORK iterations (outer times inner, so a small
# kernel stays one chunk), each next one from the time the last one took.
CHUNK_TARGET_NS = 200_000_000
CHUNK_GROWTH = 64  # at most this factor from one chunk to the next


def first_chunk(inner_work):
    return max(1, FIRST_CHUNK_WORK // max(inner_work, 1))


def next_chunk(size, elapsed_ns):
    wanted = size * CHUNK_TARGET_NS // max(elapsed_ns, 1)
    return max(1, min(wanted, size * CHUNK_GROWTH))


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
                          "_qg_next_chunk": numba.njit(next_chunk, cache=False)})
    return _CHUNKING[0]


# A device loop's runner holds the GIL, so no other Python thread runs (to call kernel.cancel(), or
# a progress callback) until it returns. While other threads exist (the launcher checks at each
# call), it releases the GIL for a moment about every YIELD_EVERY_NS. A thread waiting for the GIL
# asks for it once it has waited a whole switch interval (sys.getswitchinterval(), 5 ms) without a
# handover, and the next release then waits until that thread has it (CPython's forced switching).
# So the releases must come less often than the switch interval: each release wakes the waiter,
# which finds the GIL taken again and starts its wait afresh, and at 1 ms a waiter never asked
# (a watcher ran only after the loop ended; issue 46). At 1.25 switch intervals a waiter runs within
# about two. The clock is read only at a release, after a number of passes measured to take about
# that long (a clock read every pass cost 70 ns on the development machine). Only the thread
# holding the GIL runs compiled code, so no two runners' parallel loops ever overlap.
YIELD_EVERY_NS = max(1_000_000, int(1.25e9 * sys.getswitchinterval()))
YIELD_GROWTH = 64  # at most this factor from one number of passes to the next

_THREADS = []


def thread_functions() -> dict:
    """{generated name: njit function}: `_qg_let_threads_run(record)`, the runner's call when the
    record's YIELD_COUNT of passes runs out (lang.lower.debug_checks: the YIELD_ words), and
    PASS_END, what every pass of a device loop checks (lang.cpu.loops.counted_loop)."""
    if not _THREADS:
        import numba
        from llvmlite import ir
        from numba.core import cgutils, types
        from numba.extending import intrinsic

        from ..lang.cpu.loops import PASS_END, RunnerStatus
        from ..lang.lower.debug_checks import CANCEL_WORD, YIELD_CLOCK, YIELD_COUNT, YIELD_STEP

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

        clock = chunk_functions()["_qg_clock_ns"]

        def let_threads_run(record):
            step = record[YIELD_STEP]
            if step != 0:  # passes sized to take YIELD_EVERY_NS from the last ones' time
                elapsed = max(clock() - record[YIELD_CLOCK], 1)
                step = max(1, min(step * YIELD_EVERY_NS // elapsed, step * YIELD_GROWTH))
                _qg_release_gil()
            else:  # the call's first: start measuring
                step = 1
            record[YIELD_STEP] = step
            record[YIELD_COUNT] = step
            record[YIELD_CLOCK] = clock()

        threads_run = numba.njit(let_threads_run, cache=False)
        check = interrupted()
        interrupted_status, cancelled_status = int(RunnerStatus.INTERRUPTED), int(RunnerStatus.CANCELLED)

        def pass_end(record):
            if check():
                return interrupted_status
            if record[YIELD_COUNT] != 0:
                record[YIELD_COUNT] -= 1
                if record[YIELD_COUNT] == 0:
                    threads_run(record)
            if record[CANCEL_WORD] != 0:
                return cancelled_status
            return 0

        _THREADS.append({"_qg_let_threads_run": threads_run, PASS_END: numba.njit(pass_end, cache=False)})
    return _THREADS[0]
