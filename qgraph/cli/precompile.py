"""`python -m qgraph precompile`: compile and cache kernels from the shell, for deployment images.

    python -m qgraph precompile mypkg.solver:step float32[2d] float32[2d] float
    python -m qgraph precompile mypkg/solver.py:warm_up

A kernel is compiled for the signature its type texts spell (as error messages print them);
anything else callable named so is a warm-up function, run as it is (it can call
qgraph.compile or the kernels themselves). Either way the compile cache is filled, so a
later process's first calls load from it. A kernel's example arguments are made from the type
texts: arrays of one element per axis (only their types and layouts matter to a compile) and zeros.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import time

import numpy as np


def resolve_target(target: str):
    """The object `module:name` (a module path, or a .py file) names."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{target!r}: expected module:name (e.g. mypkg.solver:step or path/to/solver.py:step)")
    if module_name.endswith(".py"):
        path = os.path.abspath(module_name)
        if not os.path.exists(path):
            raise ValueError(f"{target!r}: no file {module_name}")
        name = os.path.splitext(os.path.basename(path))[0]
        sys.path.insert(0, os.path.dirname(path))  # as `python path/to/solver.py` would see its siblings
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # importable by name: its compiled CPU code can be cached
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{target!r}: module {module.__name__} has no {attr!r}") from None


def precompile(target: str, types: list[str]) -> str:
    """Compile `target` (a kernel, for `types`) or run it (a warm-up function); a report line."""
    import qgraph

    found = resolve_target(target)
    arch = qgraph.current_arch()
    started = time.perf_counter()
    if isinstance(found, qgraph.Kernel):
        if not types:
            params = ", ".join(p.name for p in found.source.params if p.source is None)
            raise ValueError(f"{target} is a kernel: give the type of each argument ({params}) as signature texts, "
                             "e.g. float32[1d] float32[2d] float int32")
        loads = found.stats.cache_loads
        signature = qgraph.compile(found, *example_arguments(types, arch))
        how = "loaded from the compile cache" if found.stats.cache_loads > loads else "compiled"
        return (f"{found.__name__}({', '.join(signature)}) on {arch}: {how} in "
                f"{time.perf_counter() - started:.2f} s")
    if types:
        raise ValueError(f"{target} is not a kernel, so it takes no types: name a kernel, or a warm-up function "
                         "without them")
    if not callable(found):
        raise ValueError(f"{target} is neither a kernel nor a warm-up function")
    found()
    qgraph.sync()
    return f"ran {getattr(found, '__name__', target)}() on {arch} in {time.perf_counter() - started:.2f} s"


# --------------------------------------------------------------------------- example arguments

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
        raise ValueError(f"{text!r}: an array of 2**31 - 2**16 elements or more cannot be made up for a warm-up; "
                         "call qgraph.compile with a real array in a warm-up function instead")
    dtype = _dtype(found["dtype"], text)
    element = tuple(int(n) for n in found["element"].split("x")[1:])
    shape = (1,) * int(found["ndim"]) + element
    if element:  # an array of vectors or matrices
        from ..lang.types.vector_types import matrix, vector
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
