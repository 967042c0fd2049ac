"""A numba-cuda intrinsic for a multiply that is never fused into an FMA.

Part of the numba adapter (numba-cuda's `intrinsic` and llvmlite IR stay in qgraph.compiler).
NVVM contracts `a * b + c` into one fused multiply-add by default, the CPU backend does
not: code that must give the same bits on both (lang.lower.random_bits) multiplies through
`mul.rn` in inline PTX, which neither LLVM nor ptxas fuses.
"""

from __future__ import annotations

_MUL: list = []


def mul_rn():
    """`mul_rounded(a, b)`: a * b rounded on its own, for float32 and float64 operands of one type."""
    if not _MUL:
        _MUL.append(_intrinsic())
    return _MUL[0]


def _intrinsic():
    from llvmlite import ir
    from numba.core import errors, types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def mul(typingctx, a, b):
        if a != b or a not in (types.float32, types.float64):
            raise errors.TypingError(f"internal: mul_rounded of {a} and {b}")
        width, constraint = (32, "f") if a == types.float32 else (64, "d")
        llty = ir.FloatType() if width == 32 else ir.DoubleType()

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(llty, [llty, llty])
            return builder.asm(fnty, f"mul.rn.f{width} $0, $1, $2;", f"={constraint},{constraint},{constraint}",
                               list(args), False)
        return a(a, b), codegen

    return mul
