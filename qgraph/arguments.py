"""Argument resolution: a call's arguments -> (specialisation key, backend values).

The key is a tuple of short type strings ("float32[1d]", "float64", ...): strings cache
their hash, so the key costs one tuple hash per call. Each launcher inlines the lines of
`resolver_lines` into its generated call path: straight-line fast paths for qgraph arrays,
NumPy arrays (cpu), Python and NumPy scalars; everything else (CuPy, PyTorch, numba and
DLPack arrays) goes through the slow path here.

Backend values: on CPU, what the numba runner takes (NumPy arrays, scalars); on CUDA, the
argument's by-value kernel parameter bytes in numba's flattened layout.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass

import numpy as np

from .dtypes import as_dtype

# --------------------------------------------------------------------------- type signatures


@dataclass(frozen=True)
class ArgType:
    """What a type string means: an array (dtype, ndim, contiguous) or a scalar (dtype)."""

    sig: str
    dtype: np.dtype
    ndim: int | None  # None for scalars
    contiguous: bool = True

    @property
    def is_array(self) -> bool:
        return self.ndim is not None


_TYPES: dict[str, ArgType] = {}


def scalar_sig(dtype: np.dtype) -> str:
    sig = "bool" if dtype.kind == "b" else dtype.name
    if sig not in _TYPES:
        _TYPES[sig] = ArgType(sig, dtype, None)
    return sig


def arg_type(sig: str) -> ArgType:
    return _TYPES[sig]


def array_sig(dtype: np.dtype, ndim: int, contiguous: bool) -> str:
    """The interned type string of an array argument."""
    name = "bool" if dtype.kind == "b" else dtype.name
    sig = f"{name}[{ndim}d]" if contiguous else f"{name}[{ndim}d,strided]"
    known = _TYPES.get(sig)
    if known is None:
        _TYPES[sig] = ArgType(sig, dtype, ndim, contiguous)
        return sig
    return known.sig

F64, I64, BOOL = scalar_sig(np.dtype(np.float64)), scalar_sig(np.dtype(np.int64)), scalar_sig(np.dtype(np.bool_))
for _dt in ("int8", "int16", "int32", "uint8", "uint16", "uint32", "uint64", "float32"):
    scalar_sig(np.dtype(_dt))

_STRUCT_CODES = {("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q", ("u", 1): "B", ("u", 2): "H",
                 ("u", 4): "I", ("u", 8): "Q", ("f", 4): "f", ("f", 8): "d", ("b", 1): "?"}
# struct's standard sizes ("<"): 'l' would be 4 bytes, so formats come from kind and itemsize.
_SCALAR_PACK = {sig: struct.Struct("<" + _STRUCT_CODES[t.dtype.kind, t.dtype.itemsize]).pack
                for sig, t in list(_TYPES.items()) if t.ndim is None}


def is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    expected = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def numba_abi(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bytes:
    """An array argument as numba's flattened kernel parameters: meminfo, parent, nitems,
    itemsize, data, shape..., strides... (all 64-bit)."""
    nitems = 1
    for n in shape:
        nitems *= n
    ndim = len(shape)
    return struct.pack(f"<5q{2 * ndim}q", 0, 0, nitems, itemsize, ptr, *shape, *strides)


# --------------------------------------------------------------------------- scalars


def scalar_annotation(annotation: object) -> str | None:
    """The scalar type an annotation fixes (float, int, bool, qgraph.f32, ...), or None."""
    if annotation is float:
        return F64
    if annotation is int:
        return I64
    if annotation is bool:
        return BOOL
    try:
        dt = np.dtype(annotation) if isinstance(annotation, type) and issubclass(annotation, np.generic) else None
    except TypeError:
        dt = None
    if dt is not None:
        return scalar_sig(as_dtype(dt))
    return None


def scalar_value(value: object, name: str, fixed: str | None) -> tuple[str, object]:
    """(type string, Python/NumPy value) of a scalar argument, or raise TypeError."""
    if fixed is not None:
        dtype = _TYPES[fixed].dtype
        if isinstance(value, (bool, int, float, np.generic)) and not isinstance(value, (complex, np.complexfloating)):
            if dtype.kind in "iu" and isinstance(value, (float, np.floating)):
                raise TypeError(f"argument '{name}': expected an integer ({fixed}), got {type(value).__name__}")
            if dtype.kind in "iu":
                lo, hi = _INT_RANGES[fixed]
                if not lo <= int(value) <= hi:
                    raise TypeError(f"argument '{name}': {value} does not fit in {fixed}")
            return fixed, dtype.type(value)
        kind = "an array" if _is_array_like(value) else type(value).__name__
        raise TypeError(f"argument '{name}': expected a {fixed} scalar, got {kind}")
    if isinstance(value, (bool, np.bool_)):
        return BOOL, bool(value)
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise TypeError(f"argument '{name}': {value} does not fit in int64")
        return I64, value
    if isinstance(value, float):
        return F64, value
    if isinstance(value, np.generic) and value.dtype.kind in "iuf":
        return scalar_sig(as_dtype(value.dtype, f"argument '{name}'")), value
    raise TypeError(f"argument '{name}': {type(value).__name__} is not a supported kernel argument; "
                    "pass a qgraph/NumPy/device array or an int, float or bool")


def _is_array_like(value: object) -> bool:
    from .arrays import Ndarray

    return isinstance(value, (Ndarray, np.ndarray)) or hasattr(value, "__cuda_array_interface__") \
        or hasattr(value, "__dlpack__")


# --------------------------------------------------------------------------- CPU

_NUMPY_SIGS: dict[tuple, str] = {}


def numpy_sig(value: np.ndarray, name: str) -> str:
    """The type string of a NumPy array argument (cached per dtype, ndim and layout)."""
    key = (value.dtype, value.ndim, value.flags.c_contiguous)
    sig = _NUMPY_SIGS.get(key)
    if sig is None:
        dtype = as_dtype(value.dtype, f"argument '{name}'")
        sig = _NUMPY_SIGS[key] = array_sig(dtype, value.ndim, value.flags.c_contiguous)
    return sig


def cpu_slow(value: object, name: str, fixed: str | None) -> tuple[str, object]:
    from .arrays import Ndarray

    if fixed is not None:
        return scalar_value(value, name, fixed)
    if isinstance(value, Ndarray):
        raise TypeError(f"argument '{name}' is a qgraph array in CUDA device memory but qgraph runs on "
                        "cpu; create arrays after qgraph.init(), or copy with qgraph.from_numpy(a.to_numpy())")
    if isinstance(value, np.ndarray):
        return numpy_sig(value, name), value
    if hasattr(value, "__cuda_array_interface__") or _is_device_dlpack(value):
        raise TypeError(f"argument '{name}' is a CUDA device array but qgraph runs on cpu; pass a NumPy "
                        "array or a qgraph.ndarray, or call qgraph.init('cuda')")
    return scalar_value(value, name, fixed)


def _is_device_dlpack(value: object) -> bool:
    dev = getattr(value, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return dev()[0] != 1  # kDLCPU == 1
    except Exception:
        return False


# --------------------------------------------------------------------------- CUDA


@dataclass(frozen=True)
class DeviceView:
    """A device array argument reduced to what a kernel needs; `owner` keeps it alive."""

    sig: str
    abi: bytes
    owner: object


_TYPESTR_CACHE: dict[str, np.dtype] = {}


def _view_from_parts(name: str, ptr: int, shape, strides_bytes, dtype: np.dtype, owner: object) -> DeviceView:
    dtype = as_dtype(dtype, f"argument '{name}'")
    shape = tuple(int(n) for n in shape)
    itemsize = dtype.itemsize
    if strides_bytes is None:
        strides, acc = [], itemsize
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides_t = tuple(reversed(strides))
    else:
        strides_t = tuple(int(s) for s in strides_bytes)
    contiguous = is_contiguous(shape, strides_t, itemsize)
    return DeviceView(array_sig(dtype, len(shape), contiguous), numba_abi(int(ptr), shape, strides_t, itemsize), owner)


def _from_torch(value, name: str) -> DeviceView:
    if not value.is_cuda:
        raise TypeError(f"argument '{name}' is a PyTorch tensor on {value.device}; move it to the GPU "
                        "with .cuda() (qgraph runs on cuda)")
    dtype = np.dtype(str(value.dtype).replace("torch.", ""))
    itemsize = dtype.itemsize
    strides = tuple(s * itemsize for s in value.stride())
    return _view_from_parts(name, value.data_ptr(), tuple(value.shape), strides, dtype, value)


def _from_cupy(value, name: str) -> DeviceView:
    return _view_from_parts(name, value.data.ptr, value.shape, value.strides, value.dtype, value)


def _from_cai(value, name: str) -> DeviceView:
    cai = value.__cuda_array_interface__
    typestr = cai["typestr"]
    dtype = _TYPESTR_CACHE.get(typestr)
    if dtype is None:
        dtype = _TYPESTR_CACHE.setdefault(typestr, np.dtype(typestr))
    if cai.get("mask") is not None:
        raise TypeError(f"argument '{name}': masked device arrays are not supported")
    return _view_from_parts(name, cai["data"][0], cai["shape"], cai.get("strides"), dtype, value)


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DL_KINDS = {0: "i", 1: "u", 2: "f", 6: "b"}
_DL_CUDA_DEVICES = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged


def _from_dlpack(value, name: str) -> DeviceView:
    get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
    get_ptr.restype = ctypes.c_void_p
    get_ptr.argtypes = [ctypes.py_object, ctypes.c_char_p]
    capsule = value.__dlpack__()
    tensor = _DLTensor.from_address(get_ptr(capsule, b"dltensor"))
    if tensor.device_type not in _DL_CUDA_DEVICES:
        raise TypeError(f"argument '{name}' is a DLPack tensor on device type {tensor.device_type}, not CUDA")
    if tensor.lanes != 1 or tensor.code not in _DL_KINDS:
        raise TypeError(f"argument '{name}': DLPack dtype code {tensor.code} is not supported")
    dtype = np.dtype(f"{_DL_KINDS[tensor.code]}{tensor.bits // 8}") if tensor.code != 6 else np.dtype(np.bool_)
    shape = tuple(tensor.shape[k] for k in range(tensor.ndim))
    strides = None if not tensor.strides else tuple(tensor.strides[k] * dtype.itemsize for k in range(tensor.ndim))
    ptr = (tensor.data or 0) + tensor.byte_offset
    # the capsule owns the producer's reference: keeping it alive keeps the memory alive
    return _view_from_parts(name, ptr, shape, strides, dtype, (value, capsule))


_DEVICE_READERS: dict[type, object] = {}


def _device_reader(tp: type):
    reader = _DEVICE_READERS.get(tp)
    if reader is not None:
        return reader
    module = tp.__module__.split(".")[0]
    if module == "torch" and tp.__name__ in ("Tensor", "Parameter"):
        reader = _from_torch
    elif module == "cupy" and tp.__name__ == "ndarray":
        reader = _from_cupy
    elif hasattr(tp, "__cuda_array_interface__"):
        reader = _from_cai
    elif hasattr(tp, "__dlpack__"):
        reader = _from_dlpack
    else:
        return None
    _DEVICE_READERS[tp] = reader
    return reader


def cuda_slow(value: object, name: str, fixed: str | None) -> tuple[str, bytes, object]:
    """(type string, parameter bytes, owner to keep alive) for anything but the fast paths."""
    from .arrays import Ndarray

    if fixed is not None:
        sig, scalar = scalar_value(value, name, fixed)
        return sig, _SCALAR_PACK[sig](scalar), None
    if isinstance(value, Ndarray):
        raise TypeError(f"argument '{name}' is a qgraph array in host memory (created on cpu) but qgraph "
                        "runs on cuda; create arrays after qgraph.init('cuda'), or copy it with "
                        "qgraph.from_numpy(a.to_numpy())")
    if isinstance(value, np.ndarray):
        raise TypeError(f"argument '{name}' is a host NumPy array but qgraph runs on cuda; copy it to the "
                        f"device first: {name} = qgraph.from_numpy({name})")
    reader = _device_reader(type(value))
    if reader is not None:
        view = reader(value, name)
        return view.sig, view.abi, view.owner
    sig, scalar = scalar_value(value, name, fixed)
    return sig, _SCALAR_PACK[sig](scalar), None


# --------------------------------------------------------------------------- resolvers


def resolver_lines(names: tuple[str, ...], fixed: tuple[str | None, ...], arch: str, ns: dict,
                   indent: str = "    ") -> list[str]:
    """Straight-line code assigning s<k> (type string) and v<k> (value) from argument a<k>.

    Fast paths (two attribute loads) for qgraph arrays and Python scalars; the rest goes
    through the slow path. cpu values are what the numba runner takes; cuda values are
    by-value parameter bytes. `ns` receives the constants the lines use.
    """
    from .arrays import Ndarray

    ns.update({"_Ndarray": Ndarray, "_F64": F64, "_I64": I64, "_fixed": fixed, "_names": names,
               "_np_ndarray": np.ndarray, "_numpy_sig": numpy_sig,
               "_slow": cpu_slow if arch == "cpu" else _cuda_slow_value})
    field = "_host" if arch == "cpu" else "_abi"
    lines = []
    for k, fix in enumerate(fixed):
        a = f"a{k}"
        lines.append(f"t = type({a})")
        fast = _scalar_fast_path(a, fix, arch, ns, k)
        if fix is None:  # an annotated parameter is a scalar: no array fast path
            lines.append(f"if t is _Ndarray and {a}.{field} is not None:")
            lines.append(f"    s{k} = {a}._sig; v{k} = {a}.{field}")
            if arch == "cpu":
                lines.append("elif t is _np_ndarray:")
                lines.append(f"    s{k} = _numpy_sig({a}, _names[{k}]); v{k} = {a}")
        else:
            fast[0] = fast[0][2:]  # "elif ..." -> "if ..."
        lines += fast
        lines.append("else:")
        lines.append(f"    s{k}, v{k} = _slow({a}, _names[{k}], _fixed[{k}])")
    return [indent + line for line in lines]


_INT_RANGES = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
               "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
               "uint8": (0, (1 << 8) - 1), "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1),
               "uint64": (0, (1 << 64) - 1)}


def _scalar_fast_path(a: str, fix: str | None, arch: str, ns: dict, k: int) -> list[str]:
    """Lines handling Python and NumPy scalars without the slow path."""
    if fix is None:
        lo, hi = _INT_RANGES[I64]
        ns["_np_scalars"] = _NUMPY_SCALARS[arch]
        if arch == "cpu":
            return [f"elif t is float: s{k} = _F64; v{k} = {a}",
                    f"elif t is int and {lo} <= {a} <= {hi}: s{k} = _I64; v{k} = {a}",
                    f"elif t in _np_scalars: s{k} = _np_scalars[t]; v{k} = {a}"]
        ns["_pack_d"] = _SCALAR_PACK[F64]
        ns["_pack_q"] = _SCALAR_PACK[I64]
        return [f"elif t is float: s{k} = _F64; v{k} = _pack_d({a})",
                f"elif t is int and {lo} <= {a} <= {hi}: s{k} = _I64; v{k} = _pack_q({a})",
                f"elif t in _np_scalars: s{k}, v{k} = _np_scalars[t]({a})"]
    # an annotated scalar: Python numbers convert to the fixed type
    ns[f"_fix{k}"] = fix
    dtype = _TYPES[fix].dtype
    if arch == "cpu":
        ns[f"_conv{k}"] = dtype.type
        value = f"_conv{k}({a})"
    else:
        ns[f"_conv{k}"] = _SCALAR_PACK[fix]
        value = f"_conv{k}({a})"
    if dtype.kind == "f":
        return [f"elif t is float or t is int: s{k} = _fix{k}; v{k} = {value}"]
    if dtype.kind == "b":
        return [f"elif t is bool: s{k} = _fix{k}; v{k} = {value}"]
    lo, hi = _INT_RANGES[fix]
    return [f"elif t is int and {lo} <= {a} <= {hi}: s{k} = _fix{k}; v{k} = {value}"]


def _numpy_scalar_table(arch: str) -> dict:
    """NumPy scalar type -> type string (cpu) or -> function giving (type string, bytes) (cuda)."""
    table: dict = {}
    for sig, t in list(_TYPES.items()):
        if t.ndim is not None:
            continue
        if arch == "cpu":
            table[t.dtype.type] = sig
        else:
            pack = _SCALAR_PACK[sig]
            table[t.dtype.type] = (lambda sig_, pack_: lambda v: (sig_, pack_(v)))(sig, pack)
    return table


_NUMPY_SCALARS = {"cpu": _numpy_scalar_table("cpu"), "cuda": _numpy_scalar_table("cuda")}


def _cuda_slow_value(value: object, name: str, fixed: str | None) -> tuple[str, bytes]:
    sig, abi, _owner = cuda_slow(value, name, fixed)
    return sig, abi
