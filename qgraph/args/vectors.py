"""Vectors and matrices in arguments: a vector or matrix passed by value (`g: qgraph.vec2`,
or a `qgraph.vec2(...)` value), and an array read as an array of vectors (`x: qgraph.vec3[:]`).

A value is checked and converted here, once per call, into its components: NumPy scalars
of the vector's dtype on the CPU (what the numba runner takes), packed bytes on CUDA (one
by-value parameter each). The kernel takes one scalar parameter per component (see
args.kinds.VectorKind), so a new value never recompiles nor, on CUDA, rebuilds a graph.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import as_dtype
from .kinds import VectorKind, arg_type, array_sig, vector_kind


def vector_annotation(annotation: object) -> str | None:
    """The key text of the vector kind an annotation fixes (`g: qgraph.vec2`), or None."""
    if not getattr(type(annotation), "_qgraph_vector_type", False):
        return None
    return vector_kind(annotation.dtype, annotation.shape).sig


def type_name(kind: VectorKind) -> str:
    """The qgraph name of a vector kind's type: vec2, mat33, vec3_float64 (as lang.types.vector_types names it)."""
    suffix = "" if kind.dtype == np.float32 else f"_{kind.dtype.name}"
    return ("vec" if len(kind.shape) == 1 else "mat") + "".join(map(str, kind.shape)) + suffix


def value_sig(value: object, name: str) -> str:
    """The key text of an unannotated vector value: its own dtype and shape."""
    return vector_kind(as_dtype(value.dtype, f"argument '{name}'"), value.shape).sig


def components(kind: VectorKind, value: object, name: str) -> np.ndarray:
    """`value` as the 1-d array of `kind`'s components, or TypeError naming the argument."""
    if getattr(type(value), "_qgraph_vector", False) and value.dtype == kind.dtype and value.shape == kind.shape:
        return value.reshape(-1)
    if not isinstance(value, (np.ndarray, tuple, list)):
        raise TypeError(f"argument '{name}': expected {_wanted(kind)}, got {type(value).__name__}")
    try:
        a = np.asarray(value)
    except (TypeError, ValueError):  # ragged
        a = np.asarray(None)
    if a.shape != kind.shape:
        raise TypeError(f"argument '{name}': expected {_wanted(kind)}, got shape {a.shape}")
    target = a.dtype if a.dtype == kind.dtype else kind.dtype
    if a.dtype.kind not in "biuf":
        raise TypeError(f"argument '{name}': expected {_wanted(kind)} of numbers, got dtype {a.dtype}")
    if target.kind in "iub" and a.dtype.kind == "f" or target.kind == "b" and a.dtype.kind != "b":
        raise TypeError(f"argument '{name}': expected {_wanted(kind)} of {target.name} values, got {a.dtype} values")
    with np.errstate(over="ignore"):  # an overflow is reported below, naming the argument
        out = a.astype(target).reshape(-1)
    if target.kind in "iu" and (out != a.reshape(-1)).any():  # wrapped around
        raise TypeError(f"argument '{name}': {a.tolist()} does not fit in {target.name}")
    if target.kind == "f" and np.isinf(out).any() and (np.isinf(out) & np.isfinite(a.reshape(-1))).any():
        finite = float(np.finfo(target).max)
        raise TypeError(f"argument '{name}': {a.tolist()} does not fit in {target.name} (it would become inf); "
                        f"pass values within +-{finite:.4g}")
    return out


def _wanted(kind: VectorKind) -> str:
    t = type_name(kind)
    return f"a {t} (qgraph.{t}(...), or a tuple or NumPy array of shape {kind.shape})"


def _is_plain(kind: VectorKind, value: object) -> bool:
    """A tuple or list of Python numbers that converts to a float vector as it is (the common
    `g=(0.0, -9.8)`): the right count, each finite and within the dtype's range."""
    return kind.plain_limit is not None and (type(value) is tuple or type(value) is list) \
        and len(value) == kind.size and all(type(x) is float or type(x) is int for x in value) \
        and max(map(abs, value)) <= kind.plain_limit


def cpu_components(kind: VectorKind, value: object, name: str) -> tuple:
    """The numba runner's values of a vector argument: one NumPy scalar per component."""
    if _is_plain(kind, value):
        return tuple(map(kind.dtype.type, value))
    return tuple(components(kind, value, name))


def cuda_components(kind: VectorKind, value: object, name: str) -> tuple[bytes, ...]:
    """The by-value parameter bytes of a vector argument, one per component."""
    if _is_plain(kind, value):
        return tuple(map(kind.component.pack, value))
    data = components(kind, value, name).tobytes()
    n = kind.component.size
    return tuple(data[k * n:(k + 1) * n] for k in range(kind.size))


CONVERTERS = {"cpu": cpu_components, "cuda": cuda_components}


def as_elements(sig: str, value, name: str, element: tuple) -> str:
    """The key text of an array read as an array of vectors, after checking its dtype and shape."""
    extents, ndim, dtype = element
    kind = arg_type(sig)
    if kind.is_array and kind.element == extents and kind.ndim == ndim + len(extents) and kind.dtype == dtype:
        return sig
    if not kind.is_array or kind.element or kind.dtype != dtype or kind.ndim != ndim + len(extents):
        raise TypeError(f"argument '{name}': expected an array of {len(extents) and 'x'.join(map(str, extents))}-"
                        f"component {dtype.name} vectors with {ndim} index dimension(s) (a {dtype.name} array of "
                        f"shape (..., {', '.join(map(str, extents))})), got {sig}")
    if isinstance(value, (bytes, bytearray)):
        layout = kind.layout
        shape = tuple(int.from_bytes(value[layout.shape(k)], "little") for k in range(kind.ndim))
    else:
        shape = value.shape
    if tuple(shape[ndim:]) != tuple(extents):
        raise TypeError(f"argument '{name}': its last dimension(s) must be {tuple(extents)} for this vector "
                        f"type, got shape {tuple(shape)}")
    return kind.with_element(tuple(extents)).sig


def element_sig(element: tuple) -> str:
    """The key text of an array of vectors as annotated: (element extents, index ndim, dtype)."""
    extents, ndim, dtype = element
    return array_sig(dtype, ndim + len(extents), True, element=extents)
