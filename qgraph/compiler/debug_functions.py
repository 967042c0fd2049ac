"""The functions debug-mode task code calls (lang.debug_checks), for each backend.

Written once in Python and compiled by numba for the CPU and by numba-cuda for the GPU; they
differ only in the compare-and-swap that lets the first failure win the record. Never
compiled with fast math: LLVM could then assume that no value is NaN or infinite.
"""

from __future__ import annotations

import math

from ..lang.debug_checks import BAD_VALUE, CHECK_INDEX


def _check_functions(cas):
    def checked_index(a, axis, i, site, record):
        n = a.shape[axis]
        j = int(i)  # a signed comparison (an unsigned loop counter against -n would compare as floats)
        if j < n and j >= -n:
            return i
        if cas(record, 0, 0, site + 1) == 0:
            record[1] = i
            record[2] = a.ndim
            for k in range(a.ndim):
                record[3 + k] = a.shape[k]
        return i - i  # 0 of the index's own type: the access stays in the array

    def bad_value(value, site, record):
        if not (math.isnan(value) or math.isinf(value)):
            return False
        if cas(record, 0, 0, site + 1) != 0:
            return False  # an earlier failure is the one reported
        record[1] = 0 if math.isnan(value) else (1 if value > 0 else 2)
        return True

    return checked_index, bad_value


def cpu_functions() -> dict:
    """{generated name: numba dispatcher} for CPU task code."""
    import numba

    from .cpu_atomics import compare_and_swap

    checked_index, bad_value = _check_functions(compare_and_swap)
    return {CHECK_INDEX: numba.njit(checked_index), BAD_VALUE: numba.njit(bad_value)}


def cuda_functions() -> dict:
    """{generated name: numba-cuda device function} for CUDA task code."""
    from numba import cuda

    from . import numba_adapter as adapter

    checked_index, bad_value = _check_functions(cuda.atomic.cas)
    device = adapter.cuda_device_function
    return {CHECK_INDEX: device(checked_index), BAD_VALUE: device(bad_value)}
