"""`math` functions numba compiles for CUDA but not for the CPU, as CPU functions.

numba's CPU target has no `math.fmod` or `math.remainder`; kernels calling them get these
instead (lang.lower.lowering maps the calls per backend), with CPython's results: fmod through
NumPy's, remainder by CPython's algorithm (a NaN where CPython raises)."""

from __future__ import annotations

import math

import numpy as np

from . import numba_adapter as adapter


def fmod(x, y):
    return np.fmod(x, y)


def remainder(x, y):
    """CPython's algorithm with no Python float in it, so float32 arguments give a float32."""
    if math.isnan(y) or math.isinf(x) or math.isnan(x) or y == 0:
        return np.fmod(x, y)  # a NaN (where CPython raises), in the arguments' precision
    if math.isinf(y):
        return x
    ax, ay = abs(x), abs(y)
    m = np.fmod(ax, ay)
    c = ay - m
    if m < c:
        r = m
    elif m > c:
        r = -c
    else:  # half way: the even multiple of y ((ax - m) / ay even; ay + ay may overflow to inf, still right)
        r = m if np.fmod(ax - m, ay + ay) == 0 else -m
    return -r if np.signbit(x) else r


def report_fence():
    """qgraph.report's fence (lang.front.reports): nothing to order on the CPU, whose runner
    returns before the host reads the ring."""
    return None


_COMPILED: dict = {}


def cpu_math() -> dict:
    """Generated name -> compiled function (lang.lower.lowering.CPU_MATH names them)."""
    if not _COMPILED:
        _COMPILED.update({"_qg_fmod": adapter.njit(fmod, parallel=False, cache=None),
                          "_qg_remainder": adapter.njit(remainder, parallel=False, cache=None),
                          "_qg_report_fence": adapter.njit(report_fence, parallel=False, cache=None)})
    return _COMPILED
