"""Atomic read-modify-writes on array elements for the CPU backend.

numba has no atomics on array elements, so these are numba intrinsics that emit LLVM
`atomicrmw` on the element's address: real atomics under parallel loops, returning the old
value like the CUDA ones. Imported only when a CPU kernel is compiled.

Kernels call them through small jitted wrappers: numba's parallel-loop analysis cannot see
a write made inside an intrinsic and would forward an earlier store across the loop, but
it treats a call to another jitted function as one that may write its array arguments.
"""

from __future__ import annotations

import numba
from numba.core import cgutils, types
from numba.extending import intrinsic

# LLVM atomicrmw operation per (qgraph op, element kind).
_OPS = {
    "add": {"int": "add", "uint": "add", "float": "fadd"},
    "sub": {"int": "sub", "uint": "sub", "float": "fsub"},
    "min": {"int": "min", "uint": "umin", "float": "fmin"},
    "max": {"int": "max", "uint": "umax", "float": "fmax"},
}


def _element_kind(dtype: types.Type) -> str | None:
    if isinstance(dtype, types.Float):
        return "float"
    if isinstance(dtype, types.Integer):
        return "int" if dtype.signed else "uint"
    return None


def _make_atomic(op: str):
    @intrinsic
    def atomic(typingctx, arr, index, value):
        if not isinstance(arr, types.Array) or _element_kind(arr.dtype) is None:
            return None
        if isinstance(index, types.BaseTuple):
            if len(index) != arr.ndim or not all(isinstance(t, types.Integer) for t in index):
                return None
        elif not isinstance(index, types.Integer) or arr.ndim != 1:
            return None
        if not isinstance(value, (types.Number, types.Boolean)):
            return None
        sig = arr.dtype(arr, index, value)

        def codegen(context, builder, signature, args):
            aryty, idxty, valty = signature.args
            ary_value, idx_value, value_value = args
            ary = context.make_array(aryty)(context, builder, ary_value)
            if isinstance(idxty, types.BaseTuple):
                raw = cgutils.unpack_tuple(builder, idx_value, len(idxty))
                idx_types = list(idxty)
            else:
                raw, idx_types = [idx_value], [idxty]
            indices = [context.cast(builder, i, t, types.intp) for i, t in zip(raw, idx_types)]
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, indices, wraparound=True)
            operand = context.cast(builder, value_value, valty, aryty.dtype)
            llvm_op = _OPS[op][_element_kind(aryty.dtype)]
            return builder.atomic_rmw(llvm_op, ptr, operand, "monotonic")

        return sig, codegen

    atomic.__name__ = f"atomic_{op}"
    return atomic


def _jitted(op: str):
    rmw = _make_atomic(op)

    def atomic(arr, index, value):
        return rmw(arr, index, value)

    atomic.__name__ = atomic.__qualname__ = f"atomic_{op}"
    return numba.njit(atomic)


atomic_add = _jitted("add")
atomic_sub = _jitted("sub")
atomic_min = _jitted("min")
atomic_max = _jitted("max")

BY_NAME = {"atomic_add": atomic_add, "atomic_sub": atomic_sub,
           "atomic_min": atomic_min, "atomic_max": atomic_max}


@intrinsic
def _cmpxchg(typingctx, arr, index, expected, value):
    if not isinstance(arr, types.Array) or not isinstance(arr.dtype, types.Integer) or arr.ndim != 1:
        return None
    if not all(isinstance(t, types.Integer) for t in (index, expected, value)):
        return None

    def codegen(context, builder, signature, args):
        aryty, idxty, expty, valty = signature.args
        ary_value, idx_value, exp_value, val_value = args
        ary = context.make_array(aryty)(context, builder, ary_value)
        index = context.cast(builder, idx_value, idxty, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [index], wraparound=False)
        old = builder.cmpxchg(ptr, context.cast(builder, exp_value, expty, aryty.dtype),
                              context.cast(builder, val_value, valty, aryty.dtype), "monotonic", "monotonic")
        return builder.extract_value(old, 0)

    return arr.dtype(arr, index, expected, value), codegen


@numba.njit
def compare_and_swap(arr, index, expected, value):
    """arr[index] = value if it equals `expected`, atomically; returns the old value (as CUDA's cas)."""
    return _cmpxchg(arr, index, expected, value)
