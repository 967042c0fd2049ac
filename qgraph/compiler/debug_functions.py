"""The functions debug-mode task code calls (lang.lower.debug_checks), for each backend.

Written once in Python and compiled by numba for the CPU and by numba-cuda for the GPU. They
differ only in the compare-and-swap that lets the first failure win the record, reached as
`_backend.atomic.cas`: numba-cuda types its atomics only as attributes of the cuda module, so
each backend's copy of the functions sees `_backend` as a module that has one. Never compiled
with fast math: LLVM could then assume that no value is NaN or infinite.
"""

from __future__ import annotations

import math
import types

from ..lang.lower.debug_checks import BAD_VALUE, CHECK_DIVISOR, CHECK_INDEX

_backend = None  # each backend's copy of the functions below sees its own module here


def checked_index(a, axis, i, site, record):
    n = a.shape[axis]
    j = int(i)  # a signed comparison (an unsigned loop counter against -n would compare as floats)
    if j < n and j >= -n:
        return i
    if _backend.atomic.cas(record, 0, 0, site + 1) == 0:
        record[1] = i
        record[2] = a.ndim
        for k in range(a.ndim):
            record[3 + k] = a.shape[k]
    return i - i  # 0 of the index's own type: the access stays in the array


def bad_value(value, site, record):
    if not (math.isnan(value) or math.isinf(value)):
        return False
    if _backend.atomic.cas(record, 0, 0, site + 1) != 0:
        return False  # an earlier failure is the one reported
    record[1] = 0 if math.isnan(value) else (1 if value > 0 else 2)
    return True


def checked_divisor(b, site, record):
    """`b`, after recording a failure when it is an integer zero (a float zero is no error:
    it gives inf or NaN, which QGRAPH_DEBUG=nan reports where it is stored). Compiled per
    type: -(b - b) is +0.0 when converted from an integer zero, -0.0 for a float one."""
    if b == 0 and math.copysign(1.0, -(b - b)) > 0:
        _backend.atomic.cas(record, 0, 0, site + 1)  # the first failure wins
    return b


def _for_backend(fn, backend):
    """A copy of `fn` whose global `_backend` is `backend`."""
    ns = dict(fn.__globals__)
    ns["_backend"] = backend
    return types.FunctionType(fn.__code__, ns, fn.__name__)


def cpu_functions() -> dict:
    """{generated name: numba dispatcher} for CPU task code."""
    import numba

    from .cpu_atomics import compare_and_swap

    backend = types.ModuleType("qgraph_cpu_atomics")
    backend.atomic = types.ModuleType("qgraph_cpu_atomics.atomic")
    backend.atomic.cas = compare_and_swap
    return {CHECK_INDEX: numba.njit(_for_backend(checked_index, backend)),
            BAD_VALUE: numba.njit(_for_backend(bad_value, backend)),
            CHECK_DIVISOR: numba.njit(_for_backend(checked_divisor, backend))}


def cuda_functions() -> dict:
    """{generated name: numba-cuda device function} for CUDA task code."""
    from numba import cuda

    from . import numba_adapter as adapter

    device = adapter.cuda_device_function
    return {CHECK_INDEX: device(_for_backend(checked_index, cuda)), BAD_VALUE: device(_for_backend(bad_value, cuda)),
            CHECK_DIVISOR: device(_for_backend(checked_divisor, cuda))}
