"""qgraph.Ndarray: a typed array in device memory on cuda, host memory on cpu.

An Ndarray's shape, dtype and address never change, so its specialisation key (`_sig`)
and its by-value kernel parameter bytes (`_abi`) are computed once, here, and a kernel
call reads them with two attribute loads.
"""

from __future__ import annotations

import ctypes
import operator

import numpy as np

from ..args import resolve
from ..args.kinds import array_sig, numba_abi
from ..driver.device import check, device_count, driver, free_host, owned, pointer_device
from ..dtypes import as_dtype
from ..lang.types.vector_types import element_of
from ..tracebacks import entry_point
from . import state as runtime


def _normalise_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(n < 0 for n in shape):
        raise ValueError(f"shape {shape} has a negative dimension")
    return shape


class Ndarray:
    """A zero-filled array for qgraph kernels; see `qgraph.ndarray`."""

    _qgraph_array = True  # how the argument layer (below the runtime) recognises it

    __slots__ = ("_shape", "_dtype", "_size", "_host", "_free", "_ptr", "_device", "_sig", "_abi",
                 "_element", "grad", "version", "address", "__weakref__")

    def __init__(self, dtype, shape, requires_grad: bool = False, _wait: bool = True) -> None:
        state = runtime.ensure_init()
        self.grad: Ndarray | None = None  # the gradient array, with requires_grad (kernel.grad, qgraph.Tape)
        # +1 on each write a tape may have to know of (from_numpy, fill; kernel calls while a tape needs the
        # array's value): Tape.backward compares it with the version its recorded calls saw
        self.version = 0
        element = element_of(dtype)
        self._element = dtype if element is not None else None
        self._dtype = as_dtype(element.dtype if element is not None else dtype)
        self._shape = _normalise_shape(shape) + (element.shape if element is not None else ())
        self._size = int(np.prod(self._shape, dtype=np.int64)) if self._shape else 1
        itemsize = self._dtype.itemsize
        self._sig = array_sig(self._dtype, len(self._shape), True, self._size,
                              element.shape if element is not None else (), max(self._shape, default=0))
        if state.arch == "cpu":
            self._host = np.zeros(self._shape, self._dtype)
            self._free = self._device = None
            self._ptr = 0
            self.address = self._host.__array_interface__["data"][0]  # of its first element, for identity
            self._abi = None
            if requires_grad:
                self.requires_grad = True
            return
        device = state.current().device
        self._host = None
        self._device = device
        self._ptr = self.address = device.alloc(self._size * itemsize)
        self._free = owned(self, device.free, self._ptr)  # stream-ordered, when the array is collected
        strides, acc = [], itemsize
        for n in reversed(self._shape):
            strides.append(acc)
            acc *= n
        self._abi = numba_abi(self._ptr, self._shape, tuple(reversed(strides)), itemsize)
        device.memset(self._ptr, b"\0", self._size * itemsize)
        if _wait:  # usable from any stream once this returns (without: on qgraph's own stream, a tape's scratch)
            device.sync_stream()
        if requires_grad:
            self.requires_grad = True

    # ------------------------------------------------------------------ properties

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return self._size * self._dtype.itemsize

    @property
    def device(self) -> str:
        return "cpu" if self._host is not None else "cuda"

    @property
    def device_id(self) -> int | None:
        """The CUDA device ordinal of the memory (None on cpu)."""
        return None if self._device is None else self._device.info.ordinal

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d array")
        return self._shape[0]

    def __repr__(self) -> str:
        where = self.device if self._device is None else f"cuda:{self._device.info.ordinal}"
        return f"qgraph.Ndarray({self._dtype.name}, shape={self._shape}, device={where})"

    @property
    def cuda_device(self):
        """The driver.device.CudaDevice holding it, or None for a CPU array."""
        return self._device

    @property
    def host(self) -> np.ndarray | None:
        """On the CPU the NumPy array holding its elements (shared, not a copy); None on CUDA."""
        return self._host

    @property
    def element(self):
        """The vector or matrix type of the elements (`qgraph.vec3`, ...), or None for scalars."""
        return self._element

    @property
    def index_shape(self) -> tuple[int, ...]:
        """The shape kernels index: `shape` without a vector type's trailing axes."""
        if self._element is None:
            return self._shape
        return self._shape[:len(self._shape) - len(element_of(self._element).shape)]

    def zeros_like(self, wait: bool = True) -> Ndarray:
        """A zero-filled array of this one's element type and index shape, on its device
        (`wait=False`: ordered on qgraph's stream only, for scratch used there, as a tape's)."""
        if self._device is not None:
            with runtime.device(self._device.info.ordinal):
                return Ndarray(self._element or self._dtype, self.index_shape, _wait=wait)
        return Ndarray(self._element or self._dtype, self.index_shape)

    @property
    def requires_grad(self) -> bool:
        """Whether the array has a gradient (`.grad`, zero-filled, the same shape and dtype), which
        kernel.grad and qgraph.Tape.backward accumulate into. Setting it False drops the gradient."""
        return self.grad is not None

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if not value:
            self.grad = None
        elif self.grad is None:
            if self._dtype.kind != "f":
                raise TypeError(f"requires_grad: a {self._dtype.name} array has no gradient; only float32 and "
                                "float64 arrays do")
            self.grad = self.zeros_like()

    # ------------------------------------------------------------------ data movement

    def from_numpy(self, a) -> Ndarray:
        """Copy `a` (same shape; cast to this dtype) into the array; returns self."""
        a = np.asarray(a)
        if a.shape != self._shape:
            raise ValueError(f"from_numpy: shape {a.shape} does not match the array's shape {self._shape}")
        self.version += 1
        if self._host is not None:
            self._host[...] = a
            return self
        a = np.ascontiguousarray(a, dtype=self._dtype)
        runtime.sync_device(self._device)  # queued kernels may still read the old contents
        self._device.copy_to_device(self._ptr, a.ctypes.data, a.nbytes)
        return self

    def to_numpy(self) -> np.ndarray:
        """A NumPy copy of the contents, after the qgraph work queued on its device has finished."""
        if self._host is not None:
            return self._host.copy()
        out = np.empty(self._shape, self._dtype)
        runtime.sync_device(self._device)
        self._device.copy_to_host(out.ctypes.data, self._ptr, out.nbytes)
        return out

    def fill(self, value) -> Ndarray:
        """Set every element to `value`; on cuda, ordered after earlier work on qgraph's stream."""
        self.version += 1
        if self._host is not None:
            self._host.fill(value)
            return self
        pattern = np.array(value, dtype=self._dtype).tobytes()
        self._device.memset(self._ptr, pattern, self._size)
        return self

    def __array__(self, dtype=None, copy=None):
        data = self._host if (self._host is not None and copy is not True) else self.to_numpy()
        return data if dtype is None else data.astype(dtype, copy=False)

    def __reduce__(self):
        """copy, deepcopy and pickle give a new array (own memory) with these contents."""
        element = self._element
        index_shape = self._shape[:len(self._shape) - len(element_of(element).shape)] if element else self._shape
        return _rebuilt, (element or self._dtype.str, index_shape, self.to_numpy(), self.device_id)

    @property
    def __cuda_array_interface__(self) -> dict:
        if self._host is not None:
            raise AttributeError("a cpu qgraph array has no __cuda_array_interface__")
        return {"shape": self._shape, "typestr": self._dtype.str, "data": (self._ptr, False),
                "strides": None, "version": 3, "stream": self._device.stream_handle}


def _rebuilt(dtype, shape: tuple, contents: np.ndarray, ordinal: int | None = None) -> Ndarray:
    """A copy on the original's device where this process runs on cuda and has it, else the current one."""
    state = runtime.ensure_init()
    if ordinal is None or state.arch != "cuda" or ordinal >= runtime.device_count():
        return Ndarray(dtype, shape).from_numpy(contents)
    with runtime.device(ordinal):
        return Ndarray(dtype, shape).from_numpy(contents)


resolve.ARRAY_TYPE[0] = Ndarray  # struct resolvers (args layer) test for it by identity


def host_mapped(dtype, size: int) -> tuple[Ndarray, np.ndarray]:
    """A 1-d array in pinned host memory that kernels read and write through its device mapping
    (cuMemHostAlloc DEVICEMAP), and a NumPy view of the same bytes, zero-filled: the host sees
    the device's stores while kernels run (qgraph.report's ring). On cpu, an array and its contents."""
    state = runtime.ensure_init()
    dtype = as_dtype(dtype)
    if state.arch == "cpu":
        array = Ndarray(dtype, (size,))
        return array, array._host
    d, nbytes = driver(), size * dtype.itemsize
    flags = d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE
    host = int(check(d.cuMemHostAlloc(nbytes, flags), "cuMemHostAlloc (mapped)"))
    array = Ndarray.__new__(Ndarray)
    array._free = owned(array, free_host, host)  # with the array, never before
    array.grad, array._element, array._dtype, array._shape, array._size = None, None, dtype, (size,), size
    array.version = 0
    array._sig = array_sig(dtype, 1, True, size, ())
    array._host, array._device = None, state.current().device
    array._ptr = array.address = int(check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
    array._abi = numba_abi(array._ptr, (size,), (dtype.itemsize,), dtype.itemsize)
    view = np.ctypeslib.as_array((ctypes.c_byte * nbytes).from_address(host)).view(dtype)
    view[:] = 0
    return array, view


def borrowed(dtype, shape: tuple, address: int) -> Ndarray:
    """A C-contiguous array over device memory another library owns (XLA's buffers for qgraph.jax_op),
    on the device owning it: qgraph never frees it, and the owner keeps it alive while kernels use it.
    An array argument, unlike a foreign one, takes the launch's fast path (its signature made here)."""
    state = runtime.ensure_init()
    ordinal = pointer_device(address) if device_count() > 1 else None
    dtype = as_dtype(dtype)
    array = Ndarray.__new__(Ndarray)
    array._free = None
    array.grad, array._element, array._dtype, array._shape = None, None, dtype, tuple(shape)
    array.version = 0
    array._size = int(np.prod(array._shape, dtype=np.int64)) if array._shape else 1
    array._sig = array_sig(dtype, len(array._shape), True, array._size, (), max(array._shape, default=0))
    array._host = None
    array._device = (state.current() if ordinal is None else state.target_for(ordinal)).device
    array._ptr = array.address = address
    strides, acc = [], dtype.itemsize
    for n in reversed(array._shape):
        strides.append(acc)
        acc *= n
    array._abi = numba_abi(address, array._shape, tuple(reversed(strides)), dtype.itemsize)
    return array


@entry_point
def ndarray(dtype, shape, requires_grad: bool = False) -> Ndarray:
    """A zero-filled array: device memory on cuda, host memory on cpu. `shape` may be ().

    `dtype` may be a vector or matrix type: `ndarray(qgraph.vec3, (n,))` has shape (n, 3)
    and its kernels read `x[i]` as a vec3. `requires_grad=True` gives it a zero-filled `.grad`."""
    return Ndarray(dtype, shape, requires_grad)


@entry_point
def from_numpy(a, requires_grad: bool = False) -> Ndarray:
    """A new Ndarray holding a copy of `a` (`requires_grad=True`: with a zero-filled `.grad`)."""
    a = np.asarray(a)
    arr = Ndarray(a.dtype, a.shape, requires_grad)
    return arr.from_numpy(a)
