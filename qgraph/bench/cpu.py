"""CPU benchmark: qgraph kernels vs the same loops hand-written with numba.njit(parallel=True).

Both sides run in one process on the same arrays; the table gives the per-call median of
each and their ratio, plus each side's first-call (compile) time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numba
import numpy as np

import qgraph

from .timing import busy_warning, is_busy, median_call_seconds


@qgraph.kernel
def q_saxpy(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@qgraph.kernel
def q_stencil(u, out):
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


@qgraph.kernel
def q_step(x, v, f, dt: float):
    for i in range(x.shape[0]):
        f[i] = -x[i] - 0.1 * v[i]
    for i in range(x.shape[0]):
        v[i] += dt * f[i]
        x[i] += dt * v[i]


@numba.njit(parallel=True)
def n_saxpy(x, y, a):
    for i in numba.prange(x.shape[0]):
        y[i] = a * x[i] + y[i]


@numba.njit(parallel=True)
def n_stencil(u, out):
    for i in numba.prange(1, u.shape[0] - 1):
        for j in range(1, u.shape[1] - 1):
            out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


@numba.njit(parallel=True)
def n_step(x, v, f, dt):
    for i in numba.prange(x.shape[0]):
        f[i] = -x[i] - 0.1 * v[i]
    for i in numba.prange(x.shape[0]):
        v[i] += dt * f[i]
        x[i] += dt * v[i]


@dataclass
class CpuRow:
    workload: str
    size: int
    qgraph_us: float
    numba_us: float
    qgraph_cold_s: float  # first call with an empty compile cache (a compile)
    qgraph_warm_s: float  # first call of a fresh init with the cache filled (a load)
    numba_cold_s: float  # numba.njit's first call: it compiles in every process (no cache=True)
    qgraph_us_max: float = 0.0  # the slowest of the rounds (qgraph_us is the fastest)
    numba_us_max: float = 0.0

    @property
    def ratio(self) -> float:
        return self.qgraph_us / self.numba_us


def _workloads(size: int):
    rng = np.random.default_rng(0)
    side = int(round(size ** 0.5))
    x, y = rng.random(size), rng.random(size)
    u, out = rng.random((side, side)), np.zeros((side, side))
    px, pv, pf = rng.random(size), rng.random(size), np.zeros(size)
    return [
        ("saxpy", (q_saxpy, (x, y, 1.0001)), (n_saxpy, (x, y, 1.0001))),
        ("2d stencil", (q_stencil, (u, out)), (n_stencil, (u, out))),
        ("2-task step", (q_step, (px, pv, pf, 1e-3)), (n_step, (px, pv, pf, 1e-3))),
    ]


def _first_call(fn, args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def _cold_and_warm(workloads) -> dict[str, tuple[float, float]]:
    """qgraph's first call of each workload with an empty compile cache, then with it filled
    (a fresh init loads from it), in a temporary cache directory."""
    import os
    import tempfile

    found = {}
    saved = os.environ.get("QGRAPH_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="qgraph-bench-cache-") as cache:
        os.environ["QGRAPH_CACHE_DIR"] = cache
        try:
            for name, (qk, qargs), _ in workloads:
                qgraph.init("cpu")
                cold = _first_call(qk, qargs)
                qgraph.init("cpu")
                found[name] = (cold, _first_call(qk, qargs))
        finally:
            if saved is None:
                os.environ.pop("QGRAPH_CACHE_DIR", None)
            else:
                os.environ["QGRAPH_CACHE_DIR"] = saved
    qgraph.init("cpu")
    return found


def run_cpu_suite(sizes=(10**6, 10**7), repeat: int = 20, progress=None) -> list[CpuRow]:
    first_calls = _cold_and_warm(_workloads(1000))
    qgraph.init("cpu")
    rows = []
    for size in sizes:
        for name, (qk, qargs), (nk, nargs) in _workloads(size):
            _first_call(qk, qargs)
            n_first = _first_call(nk, nargs) if size == sizes[0] else 0.0
            # interleave the two sides so drift in machine load affects both equally
            q_times, n_times = [], []
            q_call = lambda k=qk, a=qargs: k(*a)
            n_call = lambda k=nk, a=nargs: k(*a)
            for _ in range(3):
                q_times.append(median_call_seconds(q_call, calls=1, repeat=repeat))
                n_times.append(median_call_seconds(n_call, calls=1, repeat=repeat))
            cold, warm = first_calls[name]
            rows.append(CpuRow(name, size, min(q_times) * 1e6, min(n_times) * 1e6, cold, warm, n_first,
                               max(q_times) * 1e6, max(n_times) * 1e6))
            if progress is not None:
                progress()
    return rows


def cpu_table(rows: list[CpuRow]) -> str:
    """Per-call times, and first calls: qgraph cold (empty cache) and warm (cache filled), numba
    cold (it has no cache here, so it compiles in every process)."""
    lines = [f"{'workload':<14}{'size':>10}{'qgraph us':>12}{'numba us':>12}{'ratio':>8}"
             f"{'1st call, s: qgraph cold':>26}{'qgraph warm':>13}{'numba cold':>12}"]
    for r in rows:
        numba_first = f"{r.numba_cold_s:>12.2f}" if r.numba_cold_s else f"{'-':>12}"
        lines.append(f"{r.workload:<14}{r.size:>10.0e}{r.qgraph_us:>12.1f}{r.numba_us:>12.1f}{r.ratio:>8.2f}"
                     f"{r.qgraph_cold_s:>26.2f}{r.qgraph_warm_s:>13.2f}{numba_first}")
    busy = [f"{r.workload} ({r.size:.0e})" for r in rows
            if is_busy((r.qgraph_us, r.qgraph_us, r.qgraph_us_max)) or is_busy((r.numba_us, r.numba_us,
                                                                                 r.numba_us_max))]
    if busy:
        lines.append(f"warning: {busy_warning(busy)}")
    return "\n".join(lines)
