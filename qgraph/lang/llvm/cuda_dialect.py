"""The names generated CUDA task code uses, for the emitter: numba-cuda's `cuda` module (special
registers, shared arrays, shuffles, barriers, atomics), qgraph's addressing intrinsics and casts,
each written as the NVVM IR numba-cuda lowers it to (so the PTX is the same), without numba.

Anything else the generated code may name (random draws, debug checks, report fences) is not
here: the emitter raises NotEmittable for it and numba-cuda compiles that specialisation.
"""

from __future__ import annotations

import math
import types

import numpy as np
from llvmlite import ir

from .calls import Cast, Primitive, Special
from .kinds import FLOAT32, FLOAT64, INT64, Array, NotEmittable, Scalar, Tuple, convert, of_dtype
from .values import I8P, I64, ArrayValue, Value, scalar

I32 = ir.IntType(32)
INT32, UINT32, UINT64 = Scalar("i", 32), Scalar("u", 32), Scalar("u", 64)
SHFL_DOWN, SHFL_CLAMP = 2, 0x1F  # numba-cuda's shfl_down_sync: mode and clamp of llvm.nvvm.shfl.sync.i32
SHARED = 3  # NVVM's shared address space


def _declare(module: ir.Module, name: str, ret: ir.Type, params: list) -> ir.Function:
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(ret, params), name)


def sreg(builder: ir.IRBuilder, name: str) -> ir.Value:
    """A special register (tid.x, ctaid.y, ...) as i32, as numba-cuda's call_sreg reads it."""
    return builder.call(_declare(builder.module, f"llvm.nvvm.read.ptx.sreg.{name}", I32, []), [])


def _dim3(prefix: str) -> types.ModuleType:
    group = types.ModuleType(prefix)
    for axis in "xyz":
        setattr(group, axis, Special(f"{prefix}.{axis}",
                                     lambda fe, r=f"{prefix}.{axis}": Value(sreg(fe.builder, r), INT32)))
    return group


# ---------------------------------------------------------------------- addressing (compiler.numba_addressing)
def _c_array(array, ndim: int | None = None) -> ArrayValue:
    if not isinstance(array, ArrayValue) or not array.type.contiguous or \
            (ndim is not None and array.type.ndim != ndim):
        raise NotEmittable("32-bit addressing of other than a C-contiguous array")
    return array


def _typed(builder: ir.IRBuilder, array: ArrayValue) -> ir.Value:
    element = array.type.dtype
    return builder.bitcast(array.data, (ir.IntType(8) if element.kind == "b" else element.ir).as_pointer())


def _mad(builder: ir.IRBuilder, total, extent, index, shared: bool) -> ir.Value:
    """`total * extent + index` in one `mad.lo.s32` (readnone when rows may be shared)."""
    fnty = ir.FunctionType(I32, [I32, I32, I32])
    asm = ir.InlineAsm(fnty, "mad.lo.s32 $0, $1, $2, $3;", "=r,r,r,r", False)
    if shared:
        return builder.call(asm, [total, builder.trunc(extent, I32), index], attrs=("readnone", "nounwind"))
    return builder.call(asm, [total, builder.trunc(extent, I32), index])


def _int_args(values: list) -> list:
    out = []
    for v in values:
        kind = scalar(v)
        if not kind.is_int:
            raise NotEmittable("an array index that is not an integer")
        out.append((v.ir, kind))
    return out


def _offset_pointer(fe, array: ArrayValue, indices: list) -> ir.Value:
    """`_qg_ld2/3`: each index wrapped as numba wraps it, the offset in 32 bits."""
    b = fe.builder
    total = None
    for k, (v, kind) in enumerate(_int_args(indices)):
        v = convert(b, v, kind, INT64)
        v = b.select(b.icmp_signed("<", v, I64(0)), b.add(v, array.shape[k]), v)
        v = b.trunc(v, I32)
        total = v if total is None else _mad(b, total, array.shape[k], v, shared=False)
    return b.gep(_typed(b, array), [b.sext(total, I64)], inbounds=True)


def _shifted_pointer(fe, array: ArrayValue, bases: list, deltas: list) -> ir.Value:
    """`_qg_ldd2/3`: the bases' 32-bit offset (shared by neighbours) plus the deltas' byte step."""
    b = fe.builder
    total = None
    for k, (v, _) in enumerate(_int_args(bases)):
        v = b.trunc(v, I32) if v.type.width > 32 else v
        total = v if total is None else _mad(b, total, array.shape[k], v, shared=True)
    step, stride = I64(0), I64(max(array.type.dtype.bits // 8, 1))
    for k in reversed(range(len(bases))):
        if deltas[k]:
            step = b.add(step, b.mul(I64(deltas[k]), stride))
        stride = b.mul(stride, array.shape[k])
    pointer = b.gep(_typed(b, array), [b.sext(total, I64)], inbounds=True)
    if not isinstance(step, ir.Constant) or step.constant:
        pointer = b.bitcast(b.gep(b.bitcast(pointer, I8P), [step], inbounds=True), pointer.type)
    return pointer


def _extended(b: ir.IRBuilder, v, kind: Scalar, width: int) -> ir.Value:
    target = ir.IntType(width)
    if v.type.width > width:
        return b.trunc(v, target)
    if v.type.width < width:
        return b.sext(v, target) if kind.kind == "i" else b.zext(v, target)
    return v


_BINARY = {"+": lambda b, x, y: b.add(x, y, flags=["nsw"]), "-": lambda b, x, y: b.sub(x, y, flags=["nsw"]),
           "min": lambda b, x, y: b.select(b.icmp_signed("<", y, x), y, x),
           "max": lambda b, x, y: b.select(b.icmp_signed(">", y, x), y, x)}


def _index32(b: ir.IRBuilder, program: str, leaves: list, extent) -> ir.Value:
    """One dimension's index in 32 bits from its postfix program (lang.cuda.index_ranges.Program32)."""
    stack = []
    for token in program.split():
        if token[0] in "ao":
            v, kind = leaves[int(token[1:])]
            if token[0] == "o":  # of unknown range: wrapped in 64 bits, as numba does
                v = _extended(b, v, kind, 64)
                v = b.select(b.icmp_signed("<", v, I64(0)), b.add(v, extent), v)
            stack.append(_extended(b, v, kind, 32))
        elif token == "w":
            v = stack.pop()
            fixed = b.add(v, b.trunc(extent, I32), flags=["nsw"])
            stack.append(b.select(b.icmp_signed("<", v, I32(0)), fixed, v))
        elif token == "neg":
            stack.append(b.sub(I32(0), stack.pop(), flags=["nsw"]))
        elif token == "*":
            y, x = stack.pop(), stack.pop()
            mul = ir.InlineAsm(ir.FunctionType(I32, [I32, I32]), "mul.lo.s32 $0, $1, $2;", "=r,r,r", False)
            stack.append(b.call(mul, [x, y], attrs=("readnone", "nounwind")))
        elif token in _BINARY:
            y, x = stack.pop(), stack.pop()
            stack.append(_BINARY[token](b, x, y))
        else:
            stack.append(I32(int(token)))
    (v,) = stack
    return v


def _narrowed_pointer(fe, array: ArrayValue, program, leaves) -> ir.Value:
    b = fe.builder
    if not isinstance(program.ir, str) or not isinstance(leaves.type, Tuple):
        raise NotEmittable("_qg_ldx without a literal program")
    programs = program.ir.split(";")
    _c_array(array, len(programs))
    parts = _int_args([Value(v, k) for v, k in zip(leaves.ir, leaves.type.items)])
    total = None
    for k, text in enumerate(programs):
        v = _index32(b, text, parts, array.shape[k])
        total = v if total is None else _mad(b, total, array.shape[k], v, shared=True)
    return b.gep(_typed(b, array), [b.sext(total, I64)], inbounds=True)


def _load(pointer_of):
    def emit(fe, args):
        array = _c_array(args[0])
        pointer = pointer_of(fe, array, args[1:])
        raw = fe.builder.load(pointer)
        if array.type.dtype.kind == "b":
            raw = fe.builder.icmp_unsigned("!=", raw, ir.IntType(8)(0))
        return Value(raw, array.type.dtype)
    return emit


def _store(pointer_of):
    def emit(fe, args):
        array, value = _c_array(args[0]), args[-1]
        pointer = pointer_of(fe, array, args[1:-1])
        v = convert(fe.builder, value.ir, scalar(value), array.type.dtype)
        if array.type.dtype.kind == "b":
            v = fe.builder.zext(v, ir.IntType(8))
        fe.builder.store(v, pointer)
        return Value(I64(0), INT64)
    return emit


def _literals(values: list) -> list:
    if not all(isinstance(v.ir, ir.Constant) for v in values):
        raise NotEmittable("shifted subscripts without literal deltas")
    return [v.ir.constant for v in values]


def _plain(fe, array, rest):
    _c_array(array, len(rest))
    return _offset_pointer(fe, array, rest)


def _shifted(fe, array, rest):
    n = len(rest) // 2
    _c_array(array, n)
    return _shifted_pointer(fe, array, rest[:n], _literals(rest[n:]))


def _narrowed(fe, array, rest):
    return _narrowed_pointer(fe, array, rest[0], rest[1])


def _thread_x(fe, args) -> Value:
    """`blockIdx.x * blockDim.x + threadIdx.x`, each widened unsigned to 64 bits, `& mask`."""
    (mask,) = _literals(args)
    b = fe.builder
    block, size, thread = (b.zext(sreg(b, r), I64) for r in ("ctaid.x", "ntid.x", "tid.x"))
    return Value(b.and_(b.add(b.mul(block, size), thread), I64(mask)), INT64)


# ---------------------------------------------------------------------- the cuda module's functions
def _element_pointer(fe, array, index) -> tuple:
    if not isinstance(array, ArrayValue):
        raise NotEmittable("an atomic on other than an array")
    if isinstance(index.type, Tuple):
        indices = [convert(fe.builder, v, k, INT64) for v, k in zip(index.ir, index.type.items)]
    else:
        indices = [convert(fe.builder, index.ir, scalar(index), INT64)]
    element = array.type.dtype
    if element.kind == "b":
        raise NotEmittable("an atomic on a bool array")
    return array.address(fe.builder, indices), element


def _atomic(op: str):
    def emit(fe, args) -> Value:
        if len(args) != 3:
            raise NotEmittable("an atomic of other than (array, index, value)")
        pointer, element = _element_pointer(fe, args[0], args[1])
        b = fe.builder
        value = convert(b, args[2].ir, scalar(args[2]), element)
        if element.is_float:
            if op != "add":
                raise NotEmittable(f"a float atomic {op}")
            name = f"llvm.nvvm.atomic.load.add.f{element.bits}.p0f{element.bits}"
            return Value(b.call(_declare(b.module, name, element.ir, [element.ir.as_pointer(), element.ir]),
                                [pointer, value]), element)
        name = op
        if op in ("max", "min"):
            if element.bits not in (32, 64):
                raise NotEmittable(f"an atomic {op} of {element}")
            name = op if element.kind == "i" else "u" + op
        return Value(b.atomic_rmw(name, pointer, value, "monotonic"), element)
    return emit


def _shared_array(fe, args) -> ArrayValue:
    if len(args) != 2 or not isinstance(args[0].ir, ir.Constant) or not isinstance(args[1].ir, Cast):
        raise NotEmittable("a shared array of other than a literal length and a scalar type")
    length, kind = args[0].ir.constant, args[1].ir.kind
    module = fe.builder.module
    storage = ir.GlobalVariable(module, ir.ArrayType(kind.ir, length), fe.owner.unique("_qg_shared"),
                                addrspace=SHARED)
    storage.linkage = "internal"
    storage.align = max(kind.bits // 8, 1)
    generic = fe.builder.addrspacecast(fe.builder.bitcast(storage, kind.ir.as_pointer(SHARED)), kind.ir.as_pointer())
    data = fe.builder.bitcast(generic, I8P)
    return ArrayValue(data, [I64(length)], [I64(max(kind.bits // 8, 1))], Array(kind, 1, True))


def _shfl_down(fe, args) -> Value:
    mask, value, delta = args
    kind = scalar(value)
    if kind not in (INT32, INT64, FLOAT32, FLOAT64):
        raise NotEmittable(f"a shuffle of {kind}")
    b = fe.builder
    i1 = ir.IntType(1)
    shfl = _declare(b.module, "llvm.nvvm.shfl.sync.i32", ir.LiteralStructType([I32, i1]), [I32] * 5)
    member = b.trunc(convert(b, mask.ir, scalar(mask), INT64), I32)
    by = convert(b, delta.ir, scalar(delta), INT64)
    by = b.trunc(by, I32)
    bits = b.bitcast(value.ir, ir.IntType(kind.bits)) if kind.is_float else value.ir
    if kind.bits == 32:
        out = b.extract_value(b.call(shfl, [member, I32(SHFL_DOWN), bits, by, I32(SHFL_CLAMP)]), 0)
    else:
        lo, hi = b.trunc(bits, I32), b.trunc(b.lshr(bits, I64(32)), I32)
        lo = b.extract_value(b.call(shfl, [member, I32(SHFL_DOWN), lo, by, I32(SHFL_CLAMP)]), 0)
        hi = b.extract_value(b.call(shfl, [member, I32(SHFL_DOWN), hi, by, I32(SHFL_CLAMP)]), 0)
        out = b.or_(b.shl(b.zext(hi, I64), I64(32)), b.zext(lo, I64))
    return Value(b.bitcast(out, kind.ir) if kind.is_float else out, kind)


def _syncthreads(fe, args) -> Value:
    if args:
        raise NotEmittable("syncthreads with arguments")
    fe.builder.call(_declare(fe.builder.module, "llvm.nvvm.barrier0", ir.VoidType(), []), [])
    return Value(I64(0), INT64)


def _float_as_int(fe, args) -> Value:
    (value,) = args
    if scalar(value) != FLOAT32:
        raise NotEmittable("float_as_int of other than a float32")
    return Value(fe.builder.bitcast(value.ir, I32), INT32)


def view(fe, array: ArrayValue, dtype) -> ArrayValue:
    """`a.view(np.int32)`: the same memory as another type of the same size."""
    target = of_dtype(np.dtype(dtype))
    if target.bits != array.type.dtype.bits:
        raise NotEmittable("a view as a type of another size")
    return ArrayValue(array.data, array.shape, array.strides, Array(target, array.type.ndim, array.type.contiguous))



def cuda_module() -> types.ModuleType:
    """The stand-in for numba-cuda's `cuda` module that generated code calls `_qg_cuda`."""
    cuda = types.ModuleType("_qg_cuda")
    for name, prefix in (("threadIdx", "tid"), ("blockIdx", "ctaid"), ("blockDim", "ntid"), ("gridDim", "nctaid")):
        setattr(cuda, name, _dim3(prefix))
    cuda.shared = types.ModuleType("shared")
    cuda.shared.array = Primitive("cuda.shared.array", _shared_array)
    cuda.atomic = types.ModuleType("atomic")
    for op in ("add", "sub", "max", "min"):
        setattr(cuda.atomic, op, Primitive(f"cuda.atomic.{op}", _atomic(op)))
    cuda.shfl_down_sync = Primitive("cuda.shfl_down_sync", _shfl_down)
    cuda.syncthreads = Primitive("cuda.syncthreads", _syncthreads)
    return cuda


def _libdevice_module() -> types.ModuleType:
    libdevice = types.ModuleType("_qg_libdevice")
    libdevice.float_as_int = Primitive("libdevice.float_as_int", _float_as_int)
    return libdevice


def names() -> dict:
    """The names generated CUDA code binds (compiler.numba_adapter.cuda_namespace's, without numba)."""
    found = {"_qg_cuda": cuda_module(), "_qg_libdevice": _libdevice_module(), "_qg_math": math,
             "_qg_f32": Cast(FLOAT32), "_qg_i32": Cast(INT32), "_qg_i64": Cast(INT64), "_qg_u32": Cast(UINT32),
             "_qg_u64": Cast(UINT64), "_qg_np_i32": np.int32, "_qg_np_i64": np.int64, "_qg_np_u32": np.uint32,
             "_qg_np_u64": np.uint64, "_qg_thread_x": Primitive("_qg_thread_x", _thread_x), **FLOAT_ROUNDING}
    for n in (2, 3):
        found[f"_qg_ld{n}"] = Primitive(f"_qg_ld{n}", _load(_plain))
        found[f"_qg_st{n}"] = Primitive(f"_qg_st{n}", _store(_plain))
        found[f"_qg_ldd{n}"] = Primitive(f"_qg_ldd{n}", _load(_shifted))
        found[f"_qg_std{n}"] = Primitive(f"_qg_std{n}", _store(_shifted))
    found["_qg_ldx"] = Primitive("_qg_ldx", _load(_narrowed))
    found["_qg_stx"] = Primitive("_qg_stx", _store(_narrowed))
    return found


INT_ROUNDING = ("_qg_floor", "_qg_ceil", "_qg_trunc")  # helpers (kernels.helper_functions): to an int
# the rounding to floats: NumPy's functions, whose results keep the argument's float type (numba-cuda's
# math.floor gives a float too, where the emitter's, as numba's on the CPU, gives an int)
FLOAT_ROUNDING = {"_qg_ffloor": np.floor, "_qg_fceil": np.ceil, "_qg_ftrunc": np.trunc}

__all__ = ["FLOAT_ROUNDING", "INT_ROUNDING", "Special", "cuda_module", "names", "sreg", "view"]
