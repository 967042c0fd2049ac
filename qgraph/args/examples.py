"""Example arguments for a signature written as key texts (`float32[2d]`, `float`, `int32`), so
that `python -m qgraph precompile` can compile a kernel from the shell without data: arrays of
one element per axis (only their types and layouts matter to a compile) and zeros."""

from __future__ import annotations

import re

import numpy as np

_ARRAY = re.compile(r"^(?P<dtype>[a-z]+\d*)(?P<element>(?:x\d+)*)\[(?P<ndim>\d)d(?P<strided>,strided)?"
                    r"(?P<large>,large)?\]$")
_WEAK = {"float": 0.0, "int": 0, "bool": False}


def _dtype(text: str, whole: str) -> np.dtype:
    try:
        dtype = np.dtype(text)
    except TypeError:
        raise ValueError(f"{whole!r}: {text!r} is not a dtype (write e.g. float32[1d], int64[2d], float)") from None
    if dtype.kind not in "biuf":
        raise ValueError(f"{whole!r}: kernels take bool, integer and float arrays and numbers")
    return dtype


def example_argument(text: str, arch: str):
    """A value whose key text is `text` on `arch` ("cpu" or "cuda")."""
    text = text.strip()
    if text in _WEAK:
        return _WEAK[text]
    found = _ARRAY.match(text)
    if found is None:
        return _dtype(text, text).type(0)  # a NumPy scalar: its own type, not a weak Python number
    if found["large"]:
        raise ValueError(f"{text!r}: an array of 2**31 elements or more cannot be made up for a warm-up; "
                         "call qgraph.compile with a real array in a warm-up function instead")
    dtype = _dtype(found["dtype"], text)
    element = tuple(int(n) for n in found["element"].split("x")[1:])
    shape = (1,) * int(found["ndim"]) + element
    if element:  # an array of vectors or matrices
        from ..lang.vector_types import matrix, vector
        from ..runtime.arrays import ndarray

        if len(element) > 2 or found["strided"]:
            raise ValueError(f"{text!r}: call qgraph.compile with a real array in a warm-up function instead")
        kind = vector(element[0], dtype) if len(element) == 1 else matrix(element[0], element[1], dtype)
        return ndarray(kind, shape[:len(shape) - len(element)])
    if found["strided"]:
        if arch != "cpu" or not shape:
            raise ValueError(f"{text!r}: strided example arrays are made only on the cpu; call qgraph.compile "
                             "with a real array in a warm-up function instead")
        return np.zeros(shape[:-1] + (4,), dtype)[..., ::2]  # two elements a stride apart: not contiguous
    if arch == "cpu":
        return np.zeros(shape, dtype)
    from ..runtime.arrays import ndarray

    return ndarray(dtype, shape)


def example_arguments(texts: list[str], arch: str) -> list:
    """Example values for each key text, in order (ValueError naming a text that is not one)."""
    return [example_argument(t, arch) for t in texts]
