"""CPU benchmark: qgraph kernels vs the same loops hand-written with numba.njit(parallel=True).

Per call: both sides in one process on the same arrays, in interleaved rounds; the table gives
the median of each (with the spread of the rounds in the JSON) and their ratio. First call:
each side's first call of each workload in a fresh process, cold (empty cache directories, a
compile) and warm (the same directories again, a load), numba's twins with `cache=True`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

import qgraph

from ..tools.timing import interleaved_spreads, put_figure, spread_of
from .fresh_process import cold_and_warm


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
    """Per-call microseconds of one workload and size: medians of the rounds, with their spread."""

    workload: str
    size: int
    qgraph_us: float
    numba_us: float
    qgraph_us_min: float
    qgraph_us_max: float
    numba_us_min: float
    numba_us_max: float

    @property
    def ratio(self) -> float:
        return self.qgraph_us / self.numba_us


def workloads(size: int):
    """[(name, (qgraph kernel, its arguments), (numba twin, its arguments))] on arrays of `size`."""
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


def run_cpu_suite(sizes=(10**6, 10**7), repeat: int = 20, budget: float = 0.02, on_step=None) -> list[CpuRow]:
    """Per-call rows; `on_step(name)` (a progress bar's step) is called as each workload starts."""
    qgraph.init("cpu")
    rows = []
    for size in sizes:
        for name, (qk, qargs), (nk, nargs) in workloads(size):
            if on_step is not None:
                on_step(f"cpu: {name}, {size:.0e}")
            # interleaved rounds, so drift in machine load affects both sides equally
            calls = {"qgraph": lambda k=qk, a=qargs: k(*a), "numba": lambda k=nk, a=nargs: k(*a)}
            us = {side: s.scaled(1e6) for side, s in interleaved_spreads(calls, budget, repeat, lambda: None).items()}
            rows.append(CpuRow(name, size, us["qgraph"].median, us["numba"].median, us["qgraph"].min,
                               us["qgraph"].max, us["numba"].min, us["numba"].max))
    return rows


def first_call_rows(runs: int = 1) -> list[dict]:
    """First call of each workload in a fresh process, seconds, for qgraph and numba alike:
    `<side>_cold_s` with empty cache directories, `<side>_warm_s` with them filled (over `runs`
    pairs of processes). The first workload of a process also pays numba's one-time set-up."""
    measured = {side: cold_and_warm(["cpu-workloads", side], runs) for side in ("qgraph", "numba")}
    rows = []
    for name, _, _ in workloads(4):
        row = {"workload": name, "runs": runs}
        for side, (cold, warm) in measured.items():
            put_figure(row, f"{side}_cold_s", spread_of([r["seconds"][name] for r in cold]))
            put_figure(row, f"{side}_warm_s", spread_of([r["seconds"][name] for r in warm]))
        rows.append(row)
    return rows


def cpu_table(rows: list[CpuRow]) -> str:
    lines = [f"{'workload':<14}{'size':>10}{'qgraph us':>12}{'numba us':>12}{'ratio':>8}"]
    for r in rows:
        lines.append(f"{r.workload:<14}{r.size:>10.0e}{r.qgraph_us:>12.1f}{r.numba_us:>12.1f}{r.ratio:>8.2f}")
    return "\n".join(lines)


def first_call_table(rows: list[dict]) -> str:
    """Cold (empty cache directories: a compile) and warm (filled: a load) first calls, labelled."""
    if not rows:
        return ""
    lines = [f"\nfirst call in a fresh process, s (cold: empty cache directories, a compile; warm: the same "
             f"directories again, a load; median of {rows[0]['runs']})",
             f"{'workload':<14}{'qgraph cold':>13}{'qgraph warm':>13}{'numba cold':>12}{'numba warm':>12}"]
    for r in rows:
        lines.append(f"{r['workload']:<14}{r['qgraph_cold_s']:>13.2f}{r['qgraph_warm_s']:>13.2f}"
                     f"{r['numba_cold_s']:>12.2f}{r['numba_warm_s']:>12.2f}")
    return "\n".join(lines)
