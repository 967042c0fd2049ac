"""Calls in generated code: a table from the called object to how its result is typed and emitted.

Builtins (min, max, abs, int, float), casts (NumPy scalar types, the generated `_qg_i64` and
friends), `math` functions as numba lowers them (the same LLVM intrinsics and C library calls, so
results match numba's to the bit; in a module for NVVM libdevice's, as numba-cuda's), and the
primitives the runtime's own helpers and the CUDA dialect (cuda_dialect.py) need.
"""

from __future__ import annotations

import ast
import math

import numpy as np
from llvmlite import ir

from .kinds import BOOL, FLOAT64, INT64, NotEmittable, Scalar, arithmetic, convert, for_nvvm, of_dtype, unified
from .values import ArrayValue, Value, scalar

I32 = ir.IntType(32)


class Primitive:
    """A function the emitter writes itself (`emit(fe, args) -> Value`), named for error messages."""

    def __init__(self, name: str, emit) -> None:
        self.name, self.emit = name, emit

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


class Special:
    """A name whose value is emitted where it is read (a special register: threadIdx.x)."""

    def __init__(self, name: str, emit) -> None:
        self.name, self.emit = name, emit


class Cast:
    """A call that converts its one argument to `kind` (numba.float32(x), np.int32(x), _qg_i64(x))."""

    def __init__(self, kind: Scalar) -> None:
        self.kind = kind


class Unavailable:
    """A name the generated code may call that the emitter does not cover (numba compiles such code)."""

    def __init__(self, name: str) -> None:
        self.name = name


# numba's math lowering: intrinsics, else the C library (float32: the `f` function)
_INTRINSIC = {math.fabs: "llvm.fabs", math.exp: "llvm.exp", math.log: "llvm.log", math.log10: "llvm.log10",
              math.sin: "llvm.sin", math.cos: "llvm.cos"}
_EXTERN = {math.tan: "tan", math.asin: "asin", math.acos: "acos", math.atan: "atan", math.asinh: "asinh",
           math.acosh: "acosh", math.atanh: "atanh", math.sinh: "sinh", math.cosh: "cosh", math.tanh: "tanh",
           math.log1p: "log1p", math.expm1: "expm1", math.erf: "erf", math.erfc: "erfc", math.sqrt: "sqrt"}
_ROUND_TO_INT = {math.floor: "floor", math.ceil: "ceil", math.trunc: "trunc"}  # numba: an int64
_ROUND_TO_FLOAT = {np.floor: "llvm.floor", np.ceil: "llvm.ceil", np.trunc: "llvm.trunc"}
_NUMPY_SCALARS = {np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                  np.uint64, np.bool_}


def call(fe, node: ast.Call):
    func = node.func
    if isinstance(func, ast.Attribute) and not fe.is_module(func.value):
        base = fe.expr(func.value)
        if not (isinstance(base, Value) and base.type == "module"):
            return _method(fe, func, node.args, base)
        target = getattr(base.ir, func.attr, None)
        if target is None:
            raise NotEmittable(f"a call of {ast.unparse(func)}")
    else:
        target = fe.expr(func).ir if isinstance(func, ast.Attribute) else _callee(fe, func)
    if isinstance(target, Unavailable):
        raise NotEmittable(f"a call of {target.name}")
    if isinstance(target, ast.FunctionDef):
        return fe.owner.call_helper(fe, target, [fe.expr(a) for a in node.args])
    args = [fe.expr(a) for a in node.args]
    if isinstance(target, Primitive):
        return target.emit(fe, args)
    if isinstance(target, Cast):
        return _cast(fe, args, target.kind)
    if target in _NUMPY_SCALARS:
        return _cast(fe, args, of_dtype(np.dtype(target)))
    if target is float:
        return _cast(fe, args, FLOAT64)
    if target is int:
        return _cast(fe, args, INT64)
    if target is bool:
        return _cast(fe, args, BOOL)
    if target in (min, max):
        return min_max(fe, args, "<" if target is min else ">")
    if target is abs:
        return _abs(fe, args)
    if target in _INTRINSIC or target in _EXTERN or target in _ROUND_TO_FLOAT:
        return _unary_math(fe, target, args)
    if target in _ROUND_TO_INT:
        return _round_to_int(fe, target, args)
    if target in (math.isnan, math.isinf, math.isfinite):
        return _float_test(fe, target, args)
    if target in (math.atan2, math.copysign, math.hypot):
        return _binary_math(fe, target, args)
    raise NotEmittable(f"a call of {ast.unparse(func)}")


def _callee(fe, func):
    if not isinstance(func, ast.Name):
        raise NotEmittable(f"a call of {ast.unparse(func)}")
    if func.id in fe.bound or func.id in fe.assigned:
        raise NotEmittable(f"a call of the local {func.id!r}")
    helper = fe.owner.helper_sources.get(func.id)
    return helper[0] if helper is not None else fe.lookup(func.id)


def _method(fe, func: ast.Attribute, args: list, base):
    if isinstance(base, ArrayValue) and func.attr == "view" and len(args) == 1 and fe.owner.views:
        dtype = fe.expr(args[0]).ir
        if not (isinstance(dtype, type) and dtype in _NUMPY_SCALARS):
            raise NotEmittable("a view as other than a NumPy scalar type")
        return fe.owner.views(fe, base, dtype)
    if isinstance(base, ArrayValue) and func.attr == "reshape" and base.type.ndim == 0:
        extents = []
        for a in args:
            if not isinstance(a, ast.Constant) or not isinstance(a.value, int) or a.value != 1:
                raise NotEmittable("a reshape other than of a 0-d array to ones")
            extents.append(1)
        return base.reshaped(fe.builder, extents)
    raise NotEmittable(f"the method .{func.attr}")


def _one(args: list, what: str):
    if len(args) != 1:
        raise NotEmittable(f"{what} of {len(args)} arguments")
    return args[0], scalar(args[0])


def _cast(fe, args, kind: Scalar) -> Value:
    value, source = _one(args, "a cast")
    return Value(convert(fe.builder, value.ir, source, kind), kind)


def min_max(fe, args, sign: str) -> Value:
    """numba's min/max of numbers: the first argument, replaced by each later one that compares `sign`."""
    if len(args) < 2:
        raise NotEmittable("min/max of fewer than two numbers")
    kinds = [scalar(a) for a in args]
    b = fe.builder
    if for_nvvm(b.module) and len(args) == 2 and all(k.is_float for k in kinds):
        kind = unified(*kinds)  # numba-cuda: libdevice's fmin/fmax (a NaN argument is dropped)
        x, y = (convert(b, a.ir, k, kind) for a, k in zip(args, kinds))
        return Value(_extern(b, "fmin" if sign == "<" else "fmax", kind, [x, y]), kind)
    kind = kinds[0]
    for k in kinds[1:]:
        kind = unified(kind, k) if not (kind.kind == k.kind == "b") else kind
    result = convert(b, args[0].ir, kinds[0], kind)
    for value, k in zip(args[1:], kinds[1:]):
        v = convert(b, value.ir, k, kind)
        if kind.is_float:
            better = b.fcmp_ordered(sign, v, result)
        elif kind.kind == "u" or kind.kind == "b":
            better = b.icmp_unsigned(sign, v, result)
        else:
            better = b.icmp_signed(sign, v, result)
        result = b.select(better, v, result)
    return Value(result, kind)


def _abs(fe, args) -> Value:
    value, kind = _one(args, "abs")
    b = fe.builder
    if kind.is_float:
        return Value(_intrinsic(b, "llvm.fabs", kind, [value.ir]), kind)
    target = arithmetic(kind, kind) if kind.kind == "b" else kind
    x = convert(b, value.ir, kind, target)
    if target.kind == "u":
        return Value(x, target)
    return Value(b.select(b.icmp_signed("<", x, target.ir(0)), b.neg(x), x), target)


def _intrinsic(builder: ir.IRBuilder, name: str, kind: Scalar, args: list) -> ir.Value:
    module = builder.module
    if for_nvvm(module) and name != "llvm.fabs":  # NVVM: libdevice, as numba-cuda lowers math
        return _extern(builder, name.removeprefix("llvm."), kind, args)
    full = f"{name}.f{kind.bits}"
    fn = module.globals.get(full) or ir.Function(module, ir.FunctionType(kind.ir, [kind.ir] * len(args)), full)
    return builder.call(fn, args)


def _extern(builder: ir.IRBuilder, name: str, kind: Scalar, args: list) -> ir.Value:
    """The C library's `name` (float32: `namef`); in a module for NVVM, libdevice's `__nv_name[f]`."""
    module = builder.module
    full = ("__nv_" if for_nvvm(module) else "") + name + ("f" if kind.bits == 32 else "")
    fn = module.globals.get(full) or ir.Function(module, ir.FunctionType(kind.ir, [kind.ir] * len(args)), full)
    return builder.call(fn, args)


def _float_argument(fe, value, kind: Scalar) -> tuple:
    """Integers go to float64, as numba's math functions take them."""
    if kind.is_float:
        return value.ir, kind
    return convert(fe.builder, value.ir, kind, FLOAT64), FLOAT64


def _unary_math(fe, target, args) -> Value:
    value, kind = _one(args, "a math function")
    x, kind = _float_argument(fe, value, kind)
    if target in _INTRINSIC:
        return Value(_intrinsic(fe.builder, _INTRINSIC[target], kind, [x]), kind)
    if target in _ROUND_TO_FLOAT:
        return Value(_intrinsic(fe.builder, _ROUND_TO_FLOAT[target], kind, [x]), kind)
    return Value(_extern(fe.builder, _EXTERN[target], kind, [x]), kind)


def _round_to_int(fe, target, args) -> Value:
    value, kind = _one(args, "a rounding function")
    if kind.is_int:
        return Value(convert(fe.builder, value.ir, kind, INT64), INT64)
    if not kind.is_float:
        raise NotEmittable("rounding a bool")
    # LLVM's intrinsic (exact, as the C library's: the same bits) vectorises where a call of floorf does
    # not; for NVVM _intrinsic gives libdevice's __nv_floor[f] as before
    rounded = _intrinsic(fe.builder, "llvm." + _ROUND_TO_INT[target], kind, [value.ir])
    return Value(fe.builder.fptosi(rounded, INT64.ir), INT64)


def _float_test(fe, target, args) -> Value:
    value, kind = _one(args, "a float test")
    b = fe.builder
    if not kind.is_float:
        return Value(ir.IntType(1)(int(target is math.isfinite)), BOOL)
    if target is math.isnan:
        return Value(b.fcmp_unordered("uno", value.ir, value.ir), BOOL)
    magnitude = _intrinsic(b, "llvm.fabs", kind, [value.ir])
    infinity = ir.Constant(kind.ir, float("inf"))
    if target is math.isinf:
        return Value(b.fcmp_ordered("==", magnitude, infinity), BOOL)
    return Value(b.fcmp_ordered("<", magnitude, infinity), BOOL)


def _binary_math(fe, target, args) -> Value:
    if len(args) != 2:
        raise NotEmittable("a two-argument math function")
    kinds = [scalar(a) for a in args]
    if any(k.kind == "b" for k in kinds) or (target is math.copysign and not all(k.is_float for k in kinds)):
        raise NotEmittable("a two-argument math function of bools (or copysign of integers)")
    kind = FLOAT64 if any(k.is_int for k in kinds) else unified(*kinds)  # numba: integers as float64
    x, y = (convert(fe.builder, a.ir, k, kind) for a, k in zip(args, kinds))
    if target is math.copysign:
        return Value(_intrinsic(fe.builder, "llvm.copysign", kind, [x, y]), kind)
    return Value(_extern(fe.builder, "atan2" if target is math.atan2 else "hypot", kind, [x, y]), kind)


def power(fe, left: Value, right: Value, literal: int | None) -> Value:
    """numba's `**`: a literal integer exponent unrolled into multiplications (a negative one then
    inverted, raising ZeroDivisionError for a zero as numba's inversion does), floats through llvm.pow;
    an integer exponent held in a variable is numba's own loop."""
    builder = fe.builder
    a, b = scalar(left), scalar(right)
    if literal is not None and abs(literal) <= 0x10000 and (a.is_float or (a.is_int and literal >= 0)):
        kind = a if a.is_float else INT64
        value = convert(builder, left.ir, a, kind)
        result, exp = kind.ir(1.0 if kind.is_float else 1), abs(literal)
        multiply = builder.fmul if kind.is_float else builder.mul
        while exp:
            if exp & 1:
                result = multiply(result, value)
            exp >>= 1
            if exp:
                value = multiply(value, value)
        if literal < 0:
            with builder.if_then(builder.fcmp_ordered("==", result, kind.ir(0.0)), likely=False):
                fe.owner.raised(fe, ZeroDivisionError, "division by zero")
            result = fe.builder.fdiv(kind.ir(1.0), result)
        return Value(result, kind)
    if b.is_float and (a.is_float or a.is_int):
        kind = arithmetic(a, b)
        x, y = convert(builder, left.ir, a, kind), convert(builder, right.ir, b, kind)
        return Value(_intrinsic(builder, "llvm.pow", kind, [x, y]), kind)
    raise NotEmittable("** with an integer exponent that is not a literal")


def int_divmod(builder: ir.IRBuilder, x, y, kind: Scalar) -> tuple:
    """numba's integer floor division and remainder (numpy error model: 0 and 0 for a zero divisor;
    the most negative number by -1 also gives 0 and 0)."""
    zero = kind.ir(0)
    if kind.kind == "u":
        nonzero = builder.icmp_unsigned("!=", y, zero)
        safe = builder.select(nonzero, y, kind.ir(1))
        return (builder.select(nonzero, builder.udiv(x, safe), zero),
                builder.select(nonzero, builder.urem(x, safe), zero))
    bad = builder.or_(builder.icmp_signed("==", y, zero),
                      builder.and_(builder.icmp_signed("==", x, kind.ir(-(1 << (kind.bits - 1)))),
                                   builder.icmp_signed("==", y, kind.ir(-1))))
    safe = builder.select(bad, kind.ir(1), y)
    quotient, remainder = builder.sdiv(x, safe), builder.srem(x, safe)
    adjust = builder.and_(builder.icmp_signed("!=", remainder, zero),
                          builder.icmp_signed("<", builder.xor(safe, remainder), zero))
    quotient = builder.select(adjust, builder.sub(quotient, kind.ir(1)), quotient)
    remainder = builder.select(adjust, builder.add(remainder, safe), remainder)
    return builder.select(bad, zero, quotient), builder.select(bad, zero, remainder)


def float_divmod(builder: ir.IRBuilder, x, y, kind: Scalar) -> tuple:
    """numba's float floor division and remainder: CPython's float_divmod (the remainder takes the
    divisor's sign, the quotient rounded from (x - mod) / y); a zero divisor gives x / y and fmod's NaN."""
    zero, one = kind.ir(0.0), kind.ir(1.0)
    mod = builder.frem(x, y)
    div = builder.fdiv(builder.fsub(x, mod), y)
    mod_nonzero = builder.fcmp_unordered("!=", mod, zero)
    y_negative = builder.fcmp_ordered("<", y, zero)
    adjust = builder.and_(mod_nonzero, builder.icmp_unsigned("!=", y_negative, builder.fcmp_ordered("<", mod, zero)))
    div = builder.select(adjust, builder.fsub(div, one), div)
    mod = builder.select(mod_nonzero, builder.select(adjust, builder.fadd(mod, y), mod),
                         builder.select(y_negative, kind.ir(-0.0), zero))
    floor = _extern(builder, "floor", kind, [div])
    floor = builder.select(builder.fcmp_ordered(">", builder.fsub(div, floor), kind.ir(0.5)),
                           builder.fadd(floor, one), floor)
    quotient = builder.select(builder.fcmp_ordered("!=", div, zero), floor,
                              builder.fdiv(builder.fmul(builder.fmul(div, div), x), y))  # a signed zero
    by_zero = builder.fcmp_ordered("==", y, zero)
    return (builder.select(by_zero, builder.fdiv(x, y), quotient),
            builder.select(by_zero, builder.frem(x, y), mod))
