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

from .timing import median_call_seconds


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
    qgraph_first_call_s: float
    numba_first_call_s: float

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


def run_cpu_suite(sizes=(10**6, 10**7), repeat: int = 20, progress=None) -> list[CpuRow]:
    qgraph.init("cpu")
    rows = []
    for size in sizes:
        for name, (qk, qargs), (nk, nargs) in _workloads(size):
            q_first = _first_call(qk, qargs)
            n_first = _first_call(nk, nargs)
            # interleave the two sides so drift in machine load affects both equally
            q_times, n_times = [], []
            q_call = lambda k=qk, a=qargs: k(*a)
            n_call = lambda k=nk, a=nargs: k(*a)
            for _ in range(3):
                q_times.append(median_call_seconds(q_call, calls=1, repeat=repeat))
                n_times.append(median_call_seconds(n_call, calls=1, repeat=repeat))
            rows.append(CpuRow(name, size, min(q_times) * 1e6, min(n_times) * 1e6, q_first, n_first))
            if progress is not None:
                progress()
    return rows


def cpu_table(rows: list[CpuRow]) -> str:
    lines = [f"{'workload':<14}{'size':>10}{'qgraph us':>12}{'numba us':>12}{'ratio':>8}"
             f"{'qgraph 1st call s':>19}{'numba 1st call s':>18}"]
    for r in rows:
        lines.append(f"{r.workload:<14}{r.size:>10.0e}{r.qgraph_us:>12.1f}{r.numba_us:>12.1f}{r.ratio:>8.2f}"
                     f"{r.qgraph_first_call_s:>19.2f}{r.numba_first_call_s:>18.2f}")
    return "\n".join(lines)
