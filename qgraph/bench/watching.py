"""What watching a device loop costs, side by side in one process: the README's `relax` with and
without a `qgraph.report` per pass and without the cancel-word check, and the same with the former
condition kernel (NEXT_PASS_BEFORE); how soon `kernel.cancel()` stops a long loop (device WHILE
node and host fallback). Run by benchmarks/watching.py."""

from __future__ import annotations

import ctypes
import statistics
import threading
import time

import numpy as np

import qgraph
from qgraph import conditional
from qgraph.driver.device import check, driver
from qgraph.driver.loop_state import helper_source

# The condition and gate kernels' decision until 2026-11-25, kept to measure beside the current one
# (driver/loop_state.NEXT_PASS): the block's words loaded behind the `live` test, the cancel word in
# host-mapped memory read across the bus at most once per QG_CANCEL_PERIOD_NS of device clock (the
# last read's time, in the state block then, in a global here), the flag loaded after that block.
NEXT_PASS_BEFORE = r"""
enum qg_before : unsigned long long { QG_CANCEL_PERIOD_NS = %(period)dull };
__device__ unsigned long long qg_cancel_checked;
__device__ unsigned int qgraph_next_pass(unsigned long long* state)
{
    const unsigned long long live = state[QG_LOOP_LIVE], passes = state[QG_LOOP_PASSES] + 1;
    const unsigned long long mode = state[QG_LOOP_MODE], limit = state[QG_LOOP_LIMIT];
    const unsigned long long flag = state[QG_LOOP_FLAG_ADDRESS], stop = state[QG_LOOP_STOP_RECORD];
    const unsigned long long cancel = state[QG_LOOP_CANCEL_WORD], checked = qg_cancel_checked;
    const unsigned long long clears = state[QG_LOOP_CLEARS_CANCEL];
    if (!live)
        return 0u;
    state[QG_LOOP_PASSES] = passes;
    unsigned int go = 1u;
    if (stop && *(volatile const long long*)stop != 0) {
        go = 0u;
    } else if (cancel) {
        unsigned long long now;
        asm volatile("mov.u64 %%0, %%%%globaltimer;" : "=l"(now));
        if (now - checked >= QG_CANCEL_PERIOD_NS) {
            qg_cancel_checked = now;
            if (clears)
                ((volatile unsigned long long*)cancel)[1] = passes;
            if (*(volatile const unsigned long long*)cancel != 0) {
                *(volatile unsigned long long*)state[QG_LOOP_TRIP_RECORD] = passes | QG_CANCELLED;
                go = 0u;
            }
        }
    }
    if (go) {
        if (mode == QG_LOOP_MODE_COUNT) {
            go = (long long)passes < (long long)limit ? 1u : 0u;
        } else {
            go = *(const int*)flag != 0 ? 1u : 0u;
            if (go && passes >= limit) {
                go = 0u;
                *(volatile unsigned long long*)state[QG_LOOP_TRIP_RECORD] = passes;
            }
        }
    }
    state[QG_LOOP_LIVE] = go;
    return go;
}
"""
BEFORE_PERIOD_NS = 200_000


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
    copy = kernel.variant()
    launcher, _ = copy.launcher_for(())
    launcher.use_cancel_word(0)
    return copy


def _host_mapped_words() -> int:
    """The former cancel words: 16 bytes of pinned, device-mapped host memory (kept for the process)."""
    d = driver()
    host = check(d.cuMemHostAlloc(16, d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc")
    ctypes.memset(int(host), 0, 16)
    _KEPT.append(host)
    return int(check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))


_KEPT: list = []


def _before(kernel, example: tuple, period_ns: int, cancel: bool = True):
    """A copy of `kernel` whose device loops run the former condition kernel (NEXT_PASS_BEFORE with
    `period_ns`) and, with `cancel`, a host-mapped cancel word: its graph is built here, by a call, with
    gate kernels between unrolled copies (graph_unroll.FOLD_GATES off: folded, a task would run the current
    decision)."""
    from qgraph.graphs import unroll as graph_unroll

    copy = kernel.variant()
    launcher, _ = copy.launcher_for(())
    launcher.use_cancel_word(_host_mapped_words() if cancel else 0)
    target = qgraph.runtime.STATE.target
    current = target.helpers.get("while")
    target.helpers["while"] = conditional.HelperKernels(target, helper_source(NEXT_PASS_BEFORE % {"period": period_ns}))
    graph_unroll.FOLD_GATES = False
    try:
        copy(*example)
        qgraph.sync()
    finally:
        graph_unroll.FOLD_GATES = True
        target.helpers.pop("while")
        if current is not None:
            target.helpers["while"] = current
    return copy


def report_cost(n: int = 128, tol: float = 1e-5, repeat: int = 7) -> dict:
    """us per pass of relax at n^2: plain, with one report per pass, without the cancel-word check;
    the former condition kernel with and without its check, and with its clock read but never the bus."""
    u0 = np.random.default_rng(0).random((n, n))

    def example():
        u, un = qgraph.from_numpy(u0), qgraph.ndarray(qgraph.f64, (n, n))
        return u, un, qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,)), tol

    variants = {
        "relax": relax,
        "relax + report": relax_reporting,
        "relax, no cancel check": _without_cancel_check(relax),
        "before: relax": _before(relax, example(), BEFORE_PERIOD_NS),
        "before: no cancel check": _before(relax, example(), BEFORE_PERIOD_NS, cancel=False),
        "before: clock, no bus read": _before(relax, example(), 1 << 62),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    results, passes = {}, {}
    order = list(variants.items())
    for rep in range(repeat + 1):  # the first round compiles and builds
        for name, kernel in order[rep % len(order) :] + order[: rep % len(order)]:  # each goes first in turn
            args = example()
            qgraph.sync()
            started = time.perf_counter()
            kernel(*args)
            qgraph.sync()
            elapsed = time.perf_counter() - started
            passes[name] = kernel.stats.iterations[0]
            if rep:
                times[name].append(elapsed / passes[name] * 1e6)
            results[name] = args[0].to_numpy()
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
    host = spin.variant(graph_while_host=True)
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
