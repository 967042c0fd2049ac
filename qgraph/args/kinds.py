"""Argument kinds: what a kernel parameter is, as one object per kind.

A kind owns everything that depends on it: its specialisation-key text (an interned short
string: the key is a tuple of them and costs one tuple hash per call), its numba type, its
by-value parameter layout (numba's flattened ABI, with named field offsets computed once),
and how to pack a value into it; its fast paths in the generated resolver are pieces in
args.fast_paths. A new kind (a struct, a vector array) is one more class here.

Layout rule shared by all kinds: every field is 8 bytes, except a scalar, which is its own
size. The CUDA backend orders parameters arrays first, then scalars by decreasing size, so
a task's parameter block is a plain concatenation with no padding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..lang.types.extents import LARGE

KINDS: dict[str, ArgKind] = {}


class ArgKind:
    """Base of all argument kinds; `sig` is the specialisation-key text."""

    sig: str
    dtype: np.dtype
    ndim: int | None = None  # None for scalars
    contiguous: bool = True

    @property
    def is_array(self) -> bool:
        return self.ndim is not None

    @property
    def param_sizes(self) -> list[int]:
        """Byte size of each flattened kernel parameter (what numba's ABI expects)."""
        raise NotImplementedError

    @property
    def param_size(self) -> int:
        return sum(self.param_sizes)

    def numba_type(self):
        raise NotImplementedError


# --------------------------------------------------------------------------- scalars

_STRUCT_CODES = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B", ("u", 2): "H",
                 ("u", 4): "I", ("u", 8): "Q", ("f", 4): "f", ("f", 8): "d", ("b", 1): "?"}

INT_RANGES = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
              "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
              "uint8": (0, (1 << 8) - 1), "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1),
              "uint64": (0, (1 << 64) - 1)}


class ScalarKind(ArgKind):
    """A by-value number: one parameter of the dtype's size.

    A weak kind ("float", "int": a plain Python number) is passed as float64/int64 but takes
    the precision of what it combines with in the kernel (lang.types.precision, NEP 50)."""

    def __init__(self, dtype: np.dtype, weak: bool = False) -> None:
        self.dtype = dtype
        self.weak = weak
        if weak:
            self.sig = "float" if dtype.kind == "f" else "int"
        else:
            self.sig = "bool" if dtype.kind == "b" else dtype.name
        # struct's standard sizes ("<"): 'l' would be 4 bytes, so formats come from kind and itemsize
        self.pack = struct.Struct("<" + _STRUCT_CODES[dtype.kind, dtype.itemsize]).pack
        self.size = 1 if dtype.kind == "b" else dtype.itemsize
        self.int_range = INT_RANGES.get("bool" if dtype.kind == "b" else dtype.name)

    @property
    def param_sizes(self) -> list[int]:
        return [self.size]

    def numba_type(self):
        from numba import types
        from numba.np.numpy_support import from_dtype

        return types.boolean if self.dtype.kind == "b" else from_dtype(self.dtype)

    def __repr__(self) -> str:
        return f"ScalarKind({self.sig})"


ScalarKind.in_memory = False  # read from device memory (MemoryScalarKind), not passed by value


class MemoryScalarKind(ScalarKind):
    """A number a kernel reads from device memory instead of taking it by value (a traced step's
    parameter block, capture/number_block.py): typed in the kernel as the number it stands for
    (weak as that is), passed as numba's 1-D array struct pointing at its 8-byte slot."""

    in_memory = True

    def __init__(self, scalar: ScalarKind) -> None:
        super().__init__(scalar.dtype, scalar.weak)
        self.scalar = scalar
        self.sig = f"{scalar.sig}@memory"

    @property
    def param_sizes(self) -> list[int]:
        return [8] * (ArrayLayout(1).size // 8)

    def numba_type(self):
        from numba import types

        return types.Array(self.scalar.numba_type(), 1, "C")

    def slot(self, address: int) -> bytes:
        """The parameter bytes of this number read from `address`."""
        size = self.dtype.itemsize
        return numba_abi(address, (1,), (size,), size)

    def __repr__(self) -> str:
        return f"MemoryScalarKind({self.scalar.sig})"


def memory_kind(scalar: ScalarKind) -> MemoryScalarKind:
    """The kind of `scalar` read from device memory (registered, so arg_type finds its key text)."""
    sig = f"{scalar.sig}@memory"
    kind = KINDS.get(sig)
    if kind is None:
        kind = KINDS[sig] = MemoryScalarKind(scalar)
    return kind


def scalar_kind(dtype: np.dtype) -> ScalarKind:
    sig = "bool" if dtype.kind == "b" else dtype.name
    kind = KINDS.get(sig)
    if kind is None:
        kind = KINDS[sig] = ScalarKind(dtype)
    return kind


# --------------------------------------------------------------------------- arrays


@dataclass(frozen=True)
class ArrayLayout:
    """numba's flattened array parameters: meminfo, parent, nitems, itemsize, data, shape..., strides..."""

    ndim: int
    MEMINFO = 0
    PARENT = 8
    NITEMS = 16
    ITEMSIZE = 24
    DATA = 32  # the element pointer
    SHAPE = 40  # shape[0]; shape[k] at SHAPE + 8k

    @property
    def size(self) -> int:
        return 8 * (5 + 2 * self.ndim)

    def shape(self, k: int) -> slice:
        return slice(self.SHAPE + 8 * k, self.SHAPE + 8 * k + 8)

    def stride(self, k: int) -> slice:
        start = self.SHAPE + 8 * (self.ndim + k)
        return slice(start, start + 8)

    data = slice(DATA, DATA + 8)




class ArrayKind(ArgKind):
    """An array passed by value as numba's flattened array struct.

    `large`: LARGE (2**31 - 2**16) elements or more, or an extent that long (an empty array's
    other extents are otherwise unbounded). Smaller C-contiguous 2-D/3-D arrays are addressed
    with 32-bit offsets on CUDA (lang.cuda.addressing), and index expressions of their shapes
    computed in 32 bits (lang.cuda.index_ranges, whose literals the 2**16 below 2**31 leaves
    room for); a large one is a key text of its own (",large"), so its kernels keep numba's
    64-bit indexing."""

    def __init__(self, dtype: np.dtype, ndim: int, contiguous: bool, large: bool = False,
                 element: tuple[int, ...] = ()) -> None:
        self.dtype = dtype
        self.ndim = ndim  # as stored: a vector element's extents are trailing dimensions
        self.contiguous = contiguous
        self.large = large
        self.element = element  # (3,) for vec3 elements, (3, 3) for mat33, () for numbers
        self.sig = _array_text(dtype, ndim, contiguous, large, element)
        self.layout = ArrayLayout(ndim)

    @property
    def param_sizes(self) -> list[int]:
        return [8] * (5 + 2 * self.ndim)

    def numba_type(self):
        from numba import types

        return types.Array(scalar_kind(self.dtype).numba_type(), self.ndim, "C" if self.contiguous else "A")

    def one_element(self) -> tuple[ArrayKind, bytes]:
        """A 0-d array passed as shape (1,): the 1-d kind and the bytes appended to its parameters."""
        assert self.ndim == 0
        suffix = (1).to_bytes(8, "little") + self.dtype.itemsize.to_bytes(8, "little")
        return array_kind(self.dtype, 1, True), suffix

    def with_element(self, element: tuple[int, ...]) -> ArrayKind:
        """This array read as an array of vectors (its trailing extents are `element`)."""
        return array_kind(self.dtype, self.ndim, self.contiguous, self.large, element)

    def __repr__(self) -> str:
        return f"ArrayKind({self.sig})"


def _array_text(dtype: np.dtype, ndim: int, contiguous: bool, large: bool, element: tuple[int, ...] = ()) -> str:
    """`float32[2d]`, `float32[2d,strided]`, `float32[2d,large]`, `float32x3[1d]` (vec3
    elements, stored with a trailing dimension of 3): an array kind's key text."""
    name = ("bool" if dtype.kind == "b" else dtype.name) + "".join(f"x{n}" for n in element)
    flags = ("" if contiguous else ",strided") + (",large" if large else "")
    return f"{name}[{ndim - len(element)}d{flags}]"


def array_kind(dtype: np.dtype, ndim: int, contiguous: bool, large: bool = False,
               element: tuple[int, ...] = ()) -> ArrayKind:
    sig = _array_text(dtype, ndim, contiguous, large, element)
    kind = KINDS.get(sig)
    if kind is None:
        kind = KINDS[sig] = ArrayKind(dtype, ndim, contiguous, large, element)
    return kind


def array_sig(dtype: np.dtype, ndim: int, contiguous: bool, size: int = 0, element: tuple[int, ...] = (),
              longest: int = 0) -> str:
    """The interned key text of an array argument of `size` elements whose longest extent is
    `longest` (`ndim` as stored)."""
    return array_kind(dtype, ndim, contiguous, size >= LARGE or longest >= LARGE, element).sig


def scalar_sig(dtype: np.dtype) -> str:
    return scalar_kind(dtype).sig


def arg_type(sig: str) -> ArgKind:
    """The kind a key text stands for."""
    return KINDS[sig]


def is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def numba_abi(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bytes:
    """An array argument as numba's flattened kernel parameters (ArrayLayout): all 64-bit."""
    nitems = 1
    for n in shape:
        nitems *= n
    ndim = len(shape)
    return struct.pack(f"<5q{2 * ndim}q", 0, 0, nitems, itemsize, ptr, *shape, *strides)


# --------------------------------------------------------------------------- vectors and matrices by value


class VectorKind(ArgKind):
    """A small vector or matrix passed by value (`g: qgraph.vec2`, or a `qgraph.vec2(...)`
    value): the kernel takes one scalar parameter per component (lang.flat.view), as it
    takes a struct's leaves, so a new value changes parameter bytes, never the code.
    Its value is the tuple of its components (cpu: NumPy scalars; cuda: packed bytes)."""

    is_vector = True

    def __init__(self, dtype: np.dtype, shape: tuple[int, ...]) -> None:
        self.dtype = dtype
        self.shape = shape
        self.size = int(np.prod(shape))
        self.component = scalar_kind(dtype)
        self.sig = vector_text(dtype, shape)
        # a tuple of this many finite Python numbers within this converts without a check (args.vectors)
        self.plain_limit = float(np.finfo(dtype).max) if dtype.kind == "f" and len(shape) == 1 else None

    @property
    def param_sizes(self) -> list[int]:
        return [self.component.size] * self.size

    def __repr__(self) -> str:
        return f"VectorKind({self.sig})"


def vector_text(dtype: np.dtype, shape: tuple[int, ...]) -> str:
    """`float32x2` (a vec2 value), `float32x3x3` (a mat33 value): a vector kind's key text."""
    return ("bool" if dtype.kind == "b" else dtype.name) + "".join(f"x{n}" for n in shape)


def vector_kind(dtype: np.dtype, shape: tuple[int, ...]) -> VectorKind:
    sig = vector_text(dtype, shape)
    kind = KINDS.get(sig)
    if kind is None:
        kind = KINDS[sig] = VectorKind(dtype, tuple(shape))
    return kind


# --------------------------------------------------------------------------- the graph_while flag

FLAG_SIGS = ("int32[0d]", "int32[1d]", "int32[1d,strided]")


class FlagKind:
    """The graph_while flag: an int32 array of shape () or (1,), read through its data pointer.

    `address` is where the element pointer sits in the flag's parameter bytes and
    `shape_field` the bytes of shape[0], which must read 1 (a 1-d flag) or be empty (0-d).
    """

    address = ArrayLayout.data
    shape_field = ArrayLayout(1).shape(0)
    SHAPE_OK = ((1).to_bytes(8, "little"), b"")

    @staticmethod
    def accepts(sig: str) -> bool:
        return sig in FLAG_SIGS

    @classmethod
    def shape_of(cls, params: bytes) -> tuple[int, ...]:
        """The flag's shape from its parameter bytes (for the error message)."""
        field = params[cls.shape_field]
        return (int.from_bytes(field, "little"),) if field else ()


F64 = scalar_sig(np.dtype(np.float64))
I64 = scalar_sig(np.dtype(np.int64))
KINDS["float"] = ScalarKind(np.dtype(np.float64), weak=True)
KINDS["int"] = ScalarKind(np.dtype(np.int64), weak=True)
WEAK_FLOAT, WEAK_INT = "float", "int"  # key texts of plain Python numbers
BOOL = scalar_sig(np.dtype(np.bool_))
for _dt in ("int8", "int16", "int32", "uint8", "uint16", "uint32", "uint64", "float32"):
    scalar_sig(np.dtype(_dt))
SCALAR_KINDS = tuple(k for k in KINDS.values() if isinstance(k, ScalarKind) and not k.weak)
