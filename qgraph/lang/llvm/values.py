"""What an emitted expression is: an LLVM value with its type, or an array's parts."""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .kinds import Array, NotEmittable, Scalar, int_tuple_type

I8P, I64 = ir.IntType(8).as_pointer(), ir.IntType(64)


@dataclass
class Value:
    ir: ir.Value | list | str
    type: object  # Scalar, Tuple (ir: a list of its items' values), Text (ir: the string), Module (ir: the module)


@dataclass
class ArrayValue:
    """An array as numba's code sees one: the data pointer, and shape and strides (bytes) as i64."""

    data: ir.Value
    shape: list
    strides: list
    type: Array

    def address(self, builder: ir.IRBuilder, indices: list) -> ir.Value:
        """The element's address; negative indices count from the end, as numba's (no bounds check)."""
        if len(indices) != self.type.ndim:
            raise NotEmittable(f"{len(indices)} indices into a {self.type.ndim}-d array")
        offset = I64(0)
        for index, extent, stride in zip(indices, self.shape, self.strides):
            if getattr(index, "known_nonnegative", False):
                pass  # an unsigned index, used as it is (numba's getitem wraps signed indices only)
            elif not isinstance(index, ir.Constant) or index.constant < 0:
                index = builder.select(builder.icmp_signed("<", index, I64(0)), builder.add(index, extent), index)
            offset = builder.add(offset, builder.mul(index, stride))
        element = self.type.dtype
        pointee = ir.IntType(8) if element.kind == "b" else element.ir
        return builder.bitcast(builder.gep(self.data, [offset]), pointee.as_pointer())

    def load(self, builder: ir.IRBuilder, indices: list) -> Value:
        raw = builder.load(self.address(builder, indices))
        if self.type.dtype.kind == "b":
            raw = builder.icmp_unsigned("!=", raw, ir.IntType(8)(0))
        return Value(raw, self.type.dtype)

    def store(self, builder: ir.IRBuilder, indices: list, value: ir.Value) -> None:
        if self.type.dtype.kind == "b":
            value = builder.zext(value, ir.IntType(8))
        builder.store(value, self.address(builder, indices))

    def reshaped(self, builder: ir.IRBuilder, extents: list) -> ArrayValue:
        """A C-ordered view with `extents` (constant ints): `x.reshape(1)` of a 0-d array."""
        shape = [I64(e) for e in extents]
        return ArrayValue(self.data, shape, c_strides(builder, shape, self.type.dtype), Array(self.type.dtype,
                                                                                             len(extents), True))

    def size(self, builder: ir.IRBuilder) -> ir.Value:
        total = I64(1)
        for extent in self.shape:
            total = builder.mul(total, extent)
        return total


def c_strides(builder: ir.IRBuilder, shape: list, element: Scalar) -> list:
    """The byte strides of a C-contiguous array of `shape` (i64 values), as numba's C layout computes
    them: from the shape, so LLVM sees unit steps along the last dimension."""
    strides, step = [], I64(max(element.bits // 8, 1))
    for extent in reversed(shape):
        strides.insert(0, step)
        step = builder.mul(step, extent)
    return strides


def scalar(value) -> Scalar:
    if not isinstance(value, Value) or not isinstance(value.type, Scalar):
        raise NotEmittable("a number was expected")
    return value.type


def int_tuple(values: list) -> Value:
    return Value(list(values), int_tuple_type(len(values)))


def known_nonnegative(index: ir.Value) -> ir.Value:
    """`index` marked as an unsigned integer's (ArrayValue.address does not wrap it around)."""
    index.known_nonnegative = True
    return index
