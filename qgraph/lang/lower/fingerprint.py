"""Fingerprints: what generated code depends on, for the disk caches."""

from __future__ import annotations

import ast
import hashlib

from ..front.parse import KernelSource, collect_names
from ..roles import role_of


def fingerprint_of(src: KernelSource, defs: list[ast.stmt], func_sources: list[KernelSource],
                   options: str = "") -> str:
    """A hash of the generated code, the compile options and the global values it reads
    (numba freezes globals); `func_sources` are the sources of the @qgraph.funcs it calls."""
    h = hashlib.sha256(options.encode())
    for d in defs:
        h.update(ast.dump(d).encode())
    sources = [src] + list(func_sources)
    for s in sources:
        for stmt in s.fn_def.body:
            for name in sorted(collect_names([stmt]).loaded):
                if name in s.globals or name in s.closure:
                    value = s.closure[name] if name in s.closure else s.globals[name]
                    h.update(name.encode() + b"=" + _value_digest(value))
    return h.hexdigest()


def _value_digest(value: object) -> bytes:
    import numpy as np

    if isinstance(value, (bool, int, float, complex, str, bytes, np.generic)) or value is None:
        return repr((type(value).__name__, value)).encode()
    if isinstance(value, tuple) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return repr(value).encode()
    if isinstance(value, np.ndarray):
        return hashlib.sha256(value.tobytes()).hexdigest().encode() + repr((value.dtype.str, value.shape)).encode()
    kind = role_of(value)
    if kind is not None:
        return f"{kind}:{value.__qualname__}".encode()
    mod = getattr(value, "__name__", None) if type(value).__name__ == "module" else None
    if mod is not None:
        return f"module:{mod}".encode()
    py_func = getattr(value, "py_func", value)
    code = getattr(py_func, "__code__", None)
    if code is not None:
        return hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest().encode()
    return f"{type(value).__module__}.{type(value).__qualname__}".encode()
