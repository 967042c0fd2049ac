"""The dtypes qgraph kernels and arrays accept, as NumPy scalar types."""

from __future__ import annotations

import numpy as np

i8, i16, i32, i64 = np.int8, np.int16, np.int32, np.int64
u8, u16, u32, u64 = np.uint8, np.uint16, np.uint32, np.uint64
f32, f64 = np.float32, np.float64

#: Array element types qgraph kernels support (bool arrays are stored as one byte).
SUPPORTED = tuple(np.dtype(t) for t in (i8, i16, i32, i64, u8, u16, u32, u64, f32, f64, np.bool_))
_SUPPORTED_CHARS = frozenset(d.char for d in SUPPORTED)


def as_dtype(dtype: object, what: str = "dtype") -> np.dtype:
    """Normalise a dtype spelling (qgraph.f32, np.float32, 'float32', np.dtype) or raise TypeError."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{what}: {dtype!r} is not a dtype; use one of qgraph.i8 ... qgraph.f64") from None
    if dt.char not in _SUPPORTED_CHARS:
        names = ", ".join(d.name for d in SUPPORTED)
        raise TypeError(f"{what}: dtype {dt.name} is not supported; use one of {names}")
    return dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt


def float_precision(value: object, what: str) -> str:
    """"f32" or "f64" from a float type spelling (qgraph.f32, np.float64, float, "float32")."""
    if value is float:
        return "f64"
    if isinstance(value, str) and value.strip().lower() in ("f32", "f64"):
        return value.strip().lower()
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt is None or dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"{what} must be a float type (qgraph.f32 or qgraph.f64), got {value!r}")
    return "f32" if dt == np.float32 else "f64"
