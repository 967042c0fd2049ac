"""The emitter's types (scalars, arrays, tuples of ints) and numba's rules for combining them.

The rules are numba's, not NumPy's, so that an emitted function computes what numba's compile of
the same source computes: small integers widen to 64 bits in arithmetic, an integer meeting a
float32 keeps float32 only when it has at most 16 bits, and true division of integers is float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir


class NotEmittable(Exception):
    """The code uses something the emitter does not cover: numba compiles it instead."""


NVPTX = "nvptx64-nvidia-cuda"  # the target triple of a module for NVVM (lang.llvm.kernels)


def for_nvvm(module: ir.Module) -> bool:
    """Whether `module` is for NVVM: math through libdevice and LLVM 7's dialect, as numba-cuda's."""
    return module.triple == NVPTX


@dataclass(frozen=True)
class Scalar:
    kind: str  # "b" bool, "i" signed, "u" unsigned, "f" float
    bits: int

    @property
    def ir(self) -> ir.Type:
        if self.kind == "b":
            return ir.IntType(1)
        if self.kind == "f":
            return ir.FloatType() if self.bits == 32 else ir.DoubleType()
        return ir.IntType(self.bits)

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    def __repr__(self) -> str:
        return {"b": "bool", "i": "int", "u": "uint", "f": "float"}[self.kind] + ("" if self.kind == "b" else
                                                                                str(self.bits))


@dataclass(frozen=True)
class Array:
    dtype: Scalar
    ndim: int
    contiguous: bool = False  # C order: strides follow from the shape (qgraph keys a call by it)


@dataclass(frozen=True)
class Tuple:
    """A tuple of numbers (an array's shape, a status the function returns, a helper's results)."""

    items: tuple

    @property
    def size(self) -> int:
        return len(self.items)

    @property
    def ir(self) -> ir.Type:
        return ir.LiteralStructType([k.ir for k in self.items])


def int_tuple_type(size: int) -> Tuple:
    return Tuple((INT64,) * size)


@dataclass(frozen=True)
class Text:
    """A string constant (an exception's message)."""


BOOL, INT64, UINT64 = Scalar("b", 8), Scalar("i", 64), Scalar("u", 64)
FLOAT32, FLOAT64 = Scalar("f", 32), Scalar("f", 64)
_NUMPY_KINDS = {"b": "b", "i": "i", "u": "u", "f": "f"}


def of_dtype(dtype: np.dtype) -> Scalar:
    kind = _NUMPY_KINDS.get(dtype.kind)
    if kind is None or dtype.itemsize * 8 not in ((8,) if kind == "b" else (8, 16, 32, 64)) or \
            (kind == "f" and dtype.itemsize not in (4, 8)) or not dtype.isnative:
        raise NotEmittable(f"dtype {dtype}")
    return Scalar(kind, 8 if kind == "b" else dtype.itemsize * 8)


def of_value(value) -> Scalar | Array:
    """The type numba gives `value` as an argument (numba.typeof), for the values the emitter takes."""
    if isinstance(value, np.ndarray):
        if not value.flags.aligned or not value.flags.writeable or value.dtype.hasobject:
            raise NotEmittable("an unaligned, read-only or object array")
        return Array(of_dtype(value.dtype), value.ndim, bool(value.flags.c_contiguous))
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            return INT64
        raise NotEmittable("an integer beyond int64")
    if isinstance(value, float):
        return FLOAT64
    if isinstance(value, np.generic):
        return of_dtype(value.dtype)
    raise NotEmittable(f"an argument of type {type(value).__name__}")


def arithmetic(a: Scalar, b: Scalar) -> Scalar:
    """The type numba computes `a op b` in for + - * // % and the bit operations."""
    if a.is_float or b.is_float:
        if a == FLOAT64 or b == FLOAT64:
            return FLOAT64
        other = b if a.is_float else a
        return FLOAT32 if other.is_float or other.kind == "b" or other.bits <= 16 else FLOAT64
    if a.kind == "u" and b.kind == "u":
        return UINT64
    return INT64


def true_division(a: Scalar, b: Scalar) -> Scalar:
    result = arithmetic(a, b)
    return result if result.is_float else FLOAT64


def unified(a, b):
    """The one type numba gives a variable assigned values of types `a` and `b`."""
    if a == b:
        return a
    if isinstance(a, Tuple) and isinstance(b, Tuple) and a.size == b.size:
        return Tuple(tuple(unified(x, y) for x, y in zip(a.items, b.items)))
    if isinstance(a, Scalar) and isinstance(b, Scalar):
        if a.kind == "b" or b.kind == "b":  # numba: the number's type (True is 1)
            return b if a.kind == "b" else a
        if a.is_float or b.is_float:
            return FLOAT64 if a.bits == 64 or b.bits == 64 or a.is_int or b.is_int else FLOAT32
        if a.kind == b.kind:
            return Scalar(a.kind, max(a.bits, b.bits))
        if max(a.bits, b.bits) == 64:
            return FLOAT64
        return Scalar("i", 64)
    raise NotEmittable(f"a variable holding both {a} and {b}")


def convert(builder: ir.IRBuilder, value: ir.Value, source: Scalar, target: Scalar) -> ir.Value:
    """`value` of type `source` as `target`, as numba casts (floats to integers truncate)."""
    if source == target:
        return value
    if target.kind == "b":
        if source.is_float:
            return builder.fcmp_unordered("!=", value, source.ir(0.0))
        return builder.icmp_unsigned("!=", value, source.ir(0))
    if source.kind == "b":
        if target.is_float:
            return builder.uitofp(value, target.ir)
        return builder.zext(value, target.ir)
    if source.is_float and target.is_float:
        return builder.fpext(value, target.ir) if target.bits > source.bits else builder.fptrunc(value, target.ir)
    if source.is_float:
        return builder.fptosi(value, target.ir) if target.kind == "i" else builder.fptoui(value, target.ir)
    if target.is_float:
        return builder.sitofp(value, target.ir) if source.kind == "i" else builder.uitofp(value, target.ir)
    if target.bits > source.bits:
        return builder.sext(value, target.ir) if source.kind == "i" else builder.zext(value, target.ir)
    if target.bits < source.bits:
        return builder.trunc(value, target.ir)
    return value
