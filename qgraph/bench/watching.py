"""What watching a device loop costs, side by side in one process: the README's `relax` with and
without a `qgraph.report` per pass and without the cancel-word check; how soon `kernel.cancel()`
stops a long loop (device WHILE node and host fallback). Run by benchmarks/watching.py."""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time

import numpy as np

import qgraph


@qgraph.kernel(graph_while="flag")
def relax(u, un, change, flag, tol: float):
    change[0] = 0.0
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        un[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        qgraph.atomic_max(change, 0, abs(un[i, j] - u[i, j]))
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        u[i, j] = un[i, j]
    flag[0] = 1 if change[0] > tol else 0


@qgraph.kernel(graph_while="flag")
def relax_reporting(u, un, change, flag, tol: float):
    change[0] = 0.0
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        un[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        qgraph.atomic_max(change, 0, abs(un[i, j] - u[i, j]))
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        u[i, j] = un[i, j]
    qgraph.report("change", change[0])
    flag[0] = 1 if change[0] > tol else 0


@qgraph.kernel(graph_while="flag", max_iterations=None)
def spin(count, flag):
    count[0] += 1
    flag[0] = 1


def _without_cancel_check(kernel):
    """A copy of `kernel` whose device loops get no cancel word (the check's baseline)."""
    copy = kernel._variant()
    copy._attach()
    for launcher in copy._launchers.values():
        if hasattr(launcher, "_shared"):  # CUDA
            launcher._shared = dataclasses.replace(launcher._shared, cancel_word=0)
    return copy


def report_cost(n: int = 128, tol: float = 1e-5, repeat: int = 7) -> dict:
    """us per pass of relax at n^2: plain, with one report per pass, without the cancel-word check."""
    u0 = np.random.default_rng(0).random((n, n))
    variants = {
        "relax": relax,
        "relax + report": relax_reporting,
        "relax, no cancel check": _without_cancel_check(relax),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    results, passes = {}, {}
    order = list(variants.items())
    for rep in range(repeat + 1):  # the first round compiles and builds
        for name, kernel in order[rep % len(order):] + order[:rep % len(order)]:  # each goes first in turn
            u, un = qgraph.from_numpy(u0), qgraph.ndarray(qgraph.f64, (n, n))
            change, flag = qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
            qgraph.sync()
            started = time.perf_counter()
            kernel(u, un, change, flag, tol)
            qgraph.sync()
            elapsed = time.perf_counter() - started
            passes[name] = kernel.stats.iterations[0]
            if rep:
                times[name].append(elapsed / passes[name] * 1e6)
            results[name] = u.to_numpy()
    identical = all(np.array_equal(results["relax"], r) for r in results.values())
    history = relax_reporting.history["change"]
    return {
        "n": n,
        "passes": passes,
        "us_per_pass": {k: statistics.median(v) for k, v in times.items()},
        "spread": {k: (min(v), max(v)) for k, v in times.items()},
        "bit_identical": identical,
        "history_rows": len(history),
        "history_last_pass": int(history[-1, 0]) if len(history) else 0,
    }


def cancel_latency(repeat: int = 5, run_seconds: float = 0.3) -> dict:
    """Seconds from kernel.cancel() to the loop's end: the device loop (polling the stream) and the host
    fallback (the call raising)."""
    count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    device = qgraph.runtime.STATE.target.device
    out: dict[str, list[float]] = {"device loop": [], "host fallback": []}
    host = spin._variant(graph_while_host=True)
    qgraph.compile(host, count, flag)  # the timer below starts with the call: no compile inside it
    for _ in range(repeat):
        spin(count, flag)
        time.sleep(run_seconds)
        started = time.perf_counter()
        spin.cancel()
        while not device.stream_idle():
            pass
        out["device loop"].append(time.perf_counter() - started)
        try:
            qgraph.sync()
        except qgraph.LoopCancelled:
            pass
        marks: list[float] = []

        def stop(marks=marks):
            marks.append(time.perf_counter())
            host.cancel()

        timer = threading.Timer(run_seconds, stop)
        timer.start()
        try:
            host(count, flag)
        except qgraph.LoopCancelled:
            out["host fallback"].append(time.perf_counter() - marks[0])
        timer.join()
    return {
        k: {"median_ms": statistics.median(v) * 1e3, "max_ms": max(v) * 1e3, "runs": len(v)}
        for k, v in out.items()
        if v
    }
