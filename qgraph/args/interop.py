"""Reading foreign device arrays: PyTorch, CuPy, __cuda_array_interface__ and DLPack.

Each reader reduces an array to its key text, its by-value parameter bytes and an owner
to keep alive while queued work uses it. Readers are chosen once per Python type.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..dtypes import as_dtype
from .kinds import array_sig, is_contiguous, numba_abi


@dataclass(frozen=True)
class DeviceView:
    """A device array argument reduced to what a kernel needs; `owner` keeps it alive."""

    sig: str
    abi: bytes
    owner: object
    device: int | None = None  # the CUDA device ordinal, where the producer says (None: unknown)


_TYPESTR_CACHE: dict[str, np.dtype] = {}


def _view_from_parts(name: str, ptr: int, shape, strides_bytes, dtype: np.dtype, owner: object,
                     device: int | None = None) -> DeviceView:
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
    size = 1
    for n in shape:
        size *= n
    abi = numba_abi(int(ptr), shape, strides_t, itemsize)
    longest = 0 if size else max(shape, default=0)  # a non-empty array's extents are at most its size
    return DeviceView(array_sig(dtype, len(shape), contiguous, size, longest=longest), abi, owner, device)


def _from_torch(value, name: str) -> DeviceView:
    if not value.is_cuda:
        raise TypeError(f"argument '{name}' is a PyTorch tensor on {value.device}; move it to the GPU "
                        "with .cuda() (qgraph runs on cuda)")
    dtype = np.dtype(str(value.dtype).replace("torch.", ""))
    itemsize = dtype.itemsize
    strides = tuple(s * itemsize for s in value.stride())
    return _view_from_parts(name, value.data_ptr(), tuple(value.shape), strides, dtype, value, value.get_device())


def _from_cupy(value, name: str) -> DeviceView:
    return _view_from_parts(name, value.data.ptr, value.shape, value.strides, value.dtype, value, value.device.id)


def _from_cai(value, name: str) -> DeviceView:
    cai = value.__cuda_array_interface__
    typestr = cai["typestr"]
    dtype = _TYPESTR_CACHE.get(typestr)
    if dtype is None:
        dtype = _TYPESTR_CACHE.setdefault(typestr, np.dtype(typestr))
    if cai.get("mask") is not None:
        raise TypeError(f"argument '{name}': masked device arrays are not supported")
    ptr = cai["data"][0]
    return _view_from_parts(name, ptr, cai["shape"], cai.get("strides"), dtype, value, _cai_device(ptr))


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
    device = tensor.device_id if tensor.device_type == 2 else None  # kDLCUDA
    return _view_from_parts(name, ptr, shape, strides, dtype, (value, capsule), device)


_DEVICE_READERS: dict[type, object] = {}
_MULTI_DEVICE: list = []  # [whether the machine has more than one CUDA device], once known


def _cai_device(ptr: int) -> int | None:
    """The device owning a __cuda_array_interface__ pointer, which the interface does not say:
    asked of the driver on machines with more than one device (one device: it is that one)."""
    from ..driver import device

    if not _MULTI_DEVICE:
        _MULTI_DEVICE.append(device.device_count() > 1)
    return device.pointer_device(ptr) if ptr and _MULTI_DEVICE[0] else None


def device_reader(tp: type):
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


def is_device_dlpack(value: object) -> bool:
    dev = getattr(value, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return dev()[0] != 1  # kDLCPU == 1
    except Exception:
        return False
