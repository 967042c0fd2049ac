"""numba-cuda intrinsics for 32-bit element offsets (the code generation in lang.cuda.addressing).

Part of the numba adapter: numba-cuda internals (`intrinsic`, `make_array`, llvmlite IR)
stay in qgraph.compiler.
"""

from __future__ import annotations

_ADDRESSING: dict = {}


def addressing() -> dict:
    """`_qg_ld2/3(a, i, j[, k])` and `_qg_st2/3(a, i, j[, k], v)`: elements of C-contiguous
    arrays below 2**31 - 2**16 elements addressed with a 32-bit offset, as `int` index math in CUDA
    C++ would (lang.cuda.addressing rewrites subscripts into them). `_qg_thread_x(mask)`: the
    global x thread index (lang.cuda.loops). `_qg_ldd2/3(a, i, j[, k], di, dj[, dk])` and
    `_qg_std2/3(..., v)`: the element at non-negative `i + di, j + dj[, k + dk]` (literal deltas),
    for stencils: neighbours share the offset of `i, j[, k]` and differ by a stride or a constant.
    `_qg_ldx(a, program, leaves)` and `_qg_stx(a, program, leaves, v)` (1-D to 3-D): each index
    computed in 32 bits by its postfix program over the leaf values (lang.cuda.index_ranges:
    `min(i + 1, a.shape[0] - 1)` in two 32-bit instructions where 64 bits took eleven).

    numba computes every address in 64 bits, and LLVM widens a 32-bit multiply back to 64
    bits (with shift pairs for the sign extension); the row offset is therefore one
    `mad.lo.s32` in inline PTX, which LLVM leaves alone. Negative indices wrap around in
    64 bits first, where LLVM drops the check for indices it knows are non-negative."""
    if not _ADDRESSING:
        _ADDRESSING.update(_intrinsics())
    return _ADDRESSING


def _intrinsics() -> dict:
    from llvmlite import ir
    from numba.core import cgutils, errors, types
    from numba.cuda.extending import intrinsic

    i32, i64 = ir.IntType(32), ir.IntType(64)
    mad = ir.FunctionType(i32, [i32, i32, i32])
    # the same, readnone: LLVM computes the row offset that several shifted subscripts share once
    shared_mad = ir.InlineAsm(mad, "mad.lo.s32 $0, $1, $2, $3;", "=r,r,r,r", False)
    mul = ir.InlineAsm(ir.FunctionType(i32, [i32, i32]), "mul.lo.s32 $0, $1, $2;", "=r,r,r", False)
    # the operators of a 32-bit index program; nsw: lang.cuda.index_ranges proved no step leaves int32
    binary = {"+": lambda b, x, y: b.add(x, y, flags=["nsw"]), "-": lambda b, x, y: b.sub(x, y, flags=["nsw"]),
              "*": lambda b, x, y: b.call(mul, [x, y], attrs=("readnone", "nounwind")),
              "min": lambda b, x, y: b.select(b.icmp_signed("<", y, x), y, x),
              "max": lambda b, x, y: b.select(b.icmp_signed(">", y, x), y, x)}

    def offset(context, builder, arrty, arr, indices):
        ary = context.make_array(arrty)(context, builder, arr)
        shape = cgutils.unpack_tuple(builder, ary.shape)
        total = None
        for k, v in enumerate(indices):
            v = builder.sext(v, i64) if v.type.width < 64 else v
            v = builder.select(builder.icmp_signed("<", v, ir.Constant(i64, 0)), builder.add(v, shape[k]), v)
            v = builder.trunc(v, i32)
            total = v if total is None else builder.asm(mad, "mad.lo.s32 $0, $1, $2, $3;", "=r,r,r,r",
                                                        [total, builder.trunc(shape[k], i32), v], False)
        return builder.gep(ary.data, [builder.sext(total, i64)], inbounds=True)

    def shifted(context, builder, arrty, arr, bases, deltas):
        """The element at `bases` (non-negative: no wraparound) plus `deltas` per dimension: one
        32-bit offset of the bases, which neighbouring subscripts share, and the deltas times
        the strides as a 64-bit element step (a constant along the last dimension)."""
        ary = context.make_array(arrty)(context, builder, arr)
        shape = cgutils.unpack_tuple(builder, ary.shape)
        total = None
        for k, v in enumerate(bases):
            v = builder.trunc(v, i32) if v.type.width > 32 else v
            total = v if total is None else builder.call(shared_mad, [total, builder.trunc(shape[k], i32), v],
                                                         attrs=("readnone", "nounwind"))
        step, stride = ir.Constant(i64, 0), ir.Constant(i64, context.get_abi_sizeof(ary.data.type.pointee))
        for k in reversed(range(len(bases))):
            if deltas[k]:
                step = builder.add(step, builder.mul(ir.Constant(i64, deltas[k]), stride))
            stride = builder.mul(stride, shape[k])
        ptr = builder.gep(ary.data, [builder.sext(total, i64)], inbounds=True)
        if not isinstance(step, ir.Constant) or step.constant:  # in bytes: a loop-invariant add per neighbour
            byte = ir.IntType(8).as_pointer(ptr.type.addrspace)
            ptr = builder.bitcast(builder.gep(builder.bitcast(ptr, byte), [step], inbounds=True), ptr.type)
        return ptr

    def extended(builder, v, ty, width):
        """An integer of numba type `ty` as `width` bits (truncated, or extended as its sign says)."""
        target = ir.IntType(width)
        if v.type.width > width:
            return builder.trunc(v, target)
        if v.type.width < width:
            return builder.sext(v, target) if ty.signed else builder.zext(v, target)
        return v

    def index32(builder, program, leaves, leaf_types, extent):
        """One dimension's index in 32 bits from its postfix program (lang.cuda.index_ranges.Program32)."""
        stack = []
        for token in program.split():
            if token[0] in "ao":
                k = int(token[1:])
                v = leaves[k]
                if token[0] == "o":  # an index of unknown range: wrapped in 64 bits, as numba does
                    v = extended(builder, v, leaf_types[k], 64)
                    v = builder.select(builder.icmp_signed("<", v, ir.Constant(i64, 0)), builder.add(v, extent), v)
                stack.append(extended(builder, v, leaf_types[k], 32))
            elif token == "w":  # may be negative: wraps by the extent, as Python indexes
                v = stack.pop()
                fixed = builder.add(v, builder.trunc(extent, i32), flags=["nsw"])
                stack.append(builder.select(builder.icmp_signed("<", v, ir.Constant(i32, 0)), fixed, v))
            elif token == "neg":
                stack.append(builder.sub(ir.Constant(i32, 0), stack.pop(), flags=["nsw"]))
            elif token in binary:
                b, a = stack.pop(), stack.pop()
                stack.append(binary[token](builder, a, b))
            else:
                stack.append(ir.Constant(i32, int(token)))
        (v,) = stack
        return v

    def narrowed(context, builder, sig, args):
        """The element of `_qg_ldx/_qg_stx(a, program, leaves)`: each dimension's index from its
        program, the row offset by `mad.lo.s32` (readnone, so equal rows are computed once)."""
        arrty, programs = sig.args[0], sig.args[1].literal_value.split(";")
        ary = context.make_array(arrty)(context, builder, args[0])
        shape = cgutils.unpack_tuple(builder, ary.shape)
        leaves, leaf_types = cgutils.unpack_tuple(builder, args[2]), list(sig.args[2])
        total = None
        for k, program in enumerate(programs):
            v = index32(builder, program, leaves, leaf_types, shape[k])
            total = v if total is None else builder.call(shared_mad, [total, builder.trunc(shape[k], i32), v],
                                                         attrs=("readnone", "nounwind"))
        return builder.gep(ary.data, [builder.sext(total, i64)], inbounds=True)

    def literal_deltas(deltas):
        if not all(isinstance(d, types.IntegerLiteral) for d in deltas):
            raise errors.TypingError("internal: shifted subscripts take literal deltas")
        return [d.literal_value for d in deltas]

    def shifted_load(arr, bases, deltas):
        check(arr, bases)
        values = literal_deltas(deltas)

        def codegen(context, builder, sig, args):
            return builder.load(shifted(context, builder, sig.args[0], args[0], args[1:1 + len(bases)], values))
        return arr.dtype(arr, *bases, *deltas), codegen

    def shifted_store(arr, bases, deltas, value):
        check(arr, bases)
        values = literal_deltas(deltas)

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[-1], sig.args[-1], sig.args[0].dtype)
            builder.store(v, shifted(context, builder, sig.args[0], args[0], args[1:1 + len(bases)], values))
            return context.get_dummy_value()
        return types.void(arr, *bases, *deltas, value), codegen

    def check_narrowed(arr, program, leaves):
        if not isinstance(program, types.StringLiteral) or not isinstance(leaves, types.BaseTuple):
            raise errors.TypingError("internal: _qg_ldx/_qg_stx take a literal program and a tuple of leaves")
        check(arr, leaves, len(program.literal_value.split(";")))

    def narrowed_load(arr, program, leaves):
        check_narrowed(arr, program, leaves)

        def codegen(context, builder, sig, args):
            return builder.load(narrowed(context, builder, sig, args))
        return arr.dtype(arr, program, leaves), codegen

    def narrowed_store(arr, program, leaves, value):
        check_narrowed(arr, program, leaves)

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[-1], sig.args[-1], sig.args[0].dtype)
            builder.store(v, narrowed(context, builder, sig, args))
            return context.get_dummy_value()
        return types.void(arr, program, leaves, value), codegen

    def check(arr, indices, ndim=None):
        ndim = len(indices) if ndim is None else ndim
        if not isinstance(arr, types.Array) or arr.layout != "C" or arr.ndim != ndim:
            raise errors.TypingError(f"internal: 32-bit addressing of {arr} with {ndim} indices")
        for t in indices:
            if not isinstance(t, types.Integer):
                raise errors.TypingError(f"array index must be an integer, got {t}")

    def load(arr, *indices):
        check(arr, indices)

        def codegen(context, builder, sig, args):
            return builder.load(offset(context, builder, sig.args[0], args[0], args[1:]))
        return arr.dtype(arr, *indices), codegen

    def store(arr, *rest):
        check(arr, rest[:-1])

        def codegen(context, builder, sig, args):
            v = context.cast(builder, args[-1], sig.args[-1], sig.args[0].dtype)
            builder.store(v, offset(context, builder, sig.args[0], args[0], args[1:-1]))
            return context.get_dummy_value()
        return types.void(arr, *rest), codegen

    # numba's intrinsics take no *args: one fixed arity each
    def ld2(typingctx, a, i, j):
        return load(a, i, j)

    def ld3(typingctx, a, i, j, k):
        return load(a, i, j, k)

    def st2(typingctx, a, i, j, v):
        return store(a, i, j, v)

    def st3(typingctx, a, i, j, k, v):
        return store(a, i, j, k, v)

    def ldd2(typingctx, a, i, j, di, dj):
        return shifted_load(a, (i, j), (di, dj))

    def ldd3(typingctx, a, i, j, k, di, dj, dk):
        return shifted_load(a, (i, j, k), (di, dj, dk))

    def std2(typingctx, a, i, j, di, dj, v):
        return shifted_store(a, (i, j), (di, dj), v)

    def std3(typingctx, a, i, j, k, di, dj, dk, v):
        return shifted_store(a, (i, j, k), (di, dj, dk), v)

    def ldx(typingctx, a, program, leaves):
        return narrowed_load(a, program, leaves)

    def stx(typingctx, a, program, leaves, v):
        return narrowed_store(a, program, leaves, v)

    def thread_x(typingctx, mask):
        """`blockIdx.x * blockDim.x + threadIdx.x`, each widened unsigned to 64 bits, `& mask`:
        the IR numba lowers that expression to, in one call numba types and lowers once (the
        expression was 12 typed operations, about half of a simple task's typing and lowering)."""
        if not isinstance(mask, types.IntegerLiteral):
            raise errors.TypingError("internal: _qg_thread_x takes a literal mask")
        value = mask.literal_value

        def codegen(context, builder, sig, args):
            from numba.cuda.nvvmutils import call_sreg

            def sreg(name):
                return builder.zext(call_sreg(builder, name), i64)

            block, size = sreg("ctaid.x"), sreg("ntid.x")
            index = builder.add(builder.mul(block, size), sreg("tid.x"))
            return builder.and_(index, ir.Constant(i64, value))
        return types.int64(mask), codegen

    return {"_qg_ld2": intrinsic(ld2), "_qg_ld3": intrinsic(ld3), "_qg_st2": intrinsic(st2),
            "_qg_st3": intrinsic(st3), "_qg_ldd2": intrinsic(ldd2), "_qg_ldd3": intrinsic(ldd3),
            "_qg_std2": intrinsic(std2), "_qg_std3": intrinsic(std3), "_qg_thread_x": intrinsic(thread_x),
            "_qg_ldx": intrinsic(ldx), "_qg_stx": intrinsic(stx)}
