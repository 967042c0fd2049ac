"""The random-number draws (lang.lower.random_bits) compiled for each backend, once per process.

The functions are plain Python calling each other; each backend gets its own copies whose
globals point at that backend's compiled callees (numba.njit on the CPU, device functions
on CUDA), so both run the same source and produce the same bits.
"""

from __future__ import annotations

import types

from . import numba_adapter as adapter

_COMPILED: dict[str, dict] = {}


def random_functions(target: str) -> dict:
    """Generated name -> compiled draw function for `target` ("cpu" or "cuda")."""
    found = _COMPILED.get(target)
    if found is None:
        from ..lang.lower import random_bits

        if target == "cpu":
            def jit(f):
                return adapter.njit(f, parallel=False, cache=None)
        else:
            jit = adapter.cuda_device_function
        namespace = dict(vars(random_bits))
        if target == "cpu":
            namespace["mul_rounded"] = jit(random_bits.mul_rounded)
        else:
            from .numba_rounding import mul_rn

            namespace["mul_rounded"] = mul_rn()
        for name in ("philox4x32_10", "block", "_log64", "_log32"):  # callees first: the draws' globals
            namespace[name] = jit(types.FunctionType(getattr(random_bits, name).__code__, namespace, name))
        found = _COMPILED[target] = {gen: jit(types.FunctionType(f.__code__, namespace, f.__name__))
                                     for gen, f in random_bits.FUNCTIONS.items()}
    return found
