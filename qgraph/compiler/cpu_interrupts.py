"""Ctrl-C inside compiled CPU loops: `interrupted()` for a kernel's device loops.

A numba function holds the GIL and never returns to the interpreter, so a SIGINT only sets
Python's "signal pending" flag and a runaway device loop would ignore Ctrl-C for ever. The
runner's loops call `interrupted()` once per pass: it runs the pending signal handlers
(PyErr_CheckSignals, in the main thread) and, when one raised (KeyboardInterrupt), clears
that exception and returns 1, so the runner returns a status the launcher turns back into
KeyboardInterrupt with the kernel's name and loop. The C API functions are named symbols,
so the code stays cacheable.
"""

from __future__ import annotations

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
