"""kernel.cancel() and Ctrl-C: a running device loop (the CUDA WHILE node, the host fallback or
the CPU runner) stops after its current pass, the error names the kernel, loop line and pass, the arrays hold that
pass, and the next call works (runtime.cancel, driver/loop_state.py)."""

from __future__ import annotations

import re
import threading
import warnings

import numpy as np
import pytest
from helpers.arch import use_arch
from helpers.loop_kernels import crawl

import qgraph


@qgraph.kernel(graph_while="flag", max_iterations=2_000_000)  # a failed cancel trips the guard: no hang
def spin(count, flag, stop_at: int):
    count[0] += 1
    flag[0] = 1 if count[0] < stop_at else 0


@qgraph.kernel
def count_up(x, k: int):
    for _ in qgraph.repeat(k):
        x[0] += 1.0
        qgraph.report("x", x[0])


@pytest.fixture(
    params=[pytest.param("cuda", marks=pytest.mark.cuda), pytest.param("cuda-host", marks=pytest.mark.cuda)]
)
def cuda_loop(request, monkeypatch):
    """The CUDA device WHILE loop and the forced host do-while fallback."""
    if request.param == "cuda-host":
        monkeypatch.setenv("QGRAPH_GRAPH_WHILE", "host")
    use_arch("cuda")
    yield request.param
    qgraph.sync()


def test_cancel_from_another_thread_stops_the_loop_after_a_whole_pass(cuda_loop):
    count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.from_numpy(np.ones(1, np.int32))
    spin(count, flag, 2)  # compiled and its graph built before the timer starts
    qgraph.sync()
    count.fill(0)
    timer = threading.Timer(0.3, spin.cancel)
    timer.start()
    with pytest.raises(qgraph.LoopCancelled, match=r"kernel spin: the device loop .*cancelled after pass") as info:
        spin(count, flag, 1 << 62)
        qgraph.sync()
    timer.join()
    passes = int(re.search(r"after pass ([\d,]+)", str(info.value)).group(1).replace(",", ""))
    assert passes > 1 and count.to_numpy()[0] == passes  # the arrays hold the last whole pass
    count.fill(0)
    spin(count, flag, 5)  # the next call runs normally
    qgraph.sync()
    assert count.to_numpy()[0] == 5 and spin.stats.iterations == (5,)


def test_cancel_from_another_thread_stops_the_loop_on_every_target(loop_arch):
    """On the CPU too: the runner, holding the GIL, lets other threads run about every millisecond
    while there are any, and stops after the pass in which the cancel word was set."""
    stop_at = 1 << 30 if loop_arch == "cpu" else 1 << 21  # seconds of passes on each target
    count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.from_numpy(np.ones(1, np.int32))
    crawl(count, flag, 2)  # compiled before the timer starts
    qgraph.sync()
    count.fill(0)
    timer = threading.Timer(0.05, crawl.cancel)
    timer.start()
    with pytest.raises(qgraph.LoopCancelled, match=r"kernel crawl: the device loop at line \d+ was cancelled") as info:
        crawl(count, flag, stop_at)
        qgraph.sync()
    timer.join()
    passes = int(re.search(r"after pass ([\d,]+)", str(info.value)).group(1).replace(",", ""))
    assert 1 < passes < stop_at and count.to_numpy()[0] == passes
    count.fill(0)
    crawl(count, flag, 3)
    qgraph.sync()
    assert count.to_numpy()[0] == 3


def test_a_cancel_between_calls_does_not_stop_the_next_one(cuda_loop):
    count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.from_numpy(np.ones(1, np.int32))
    spin(count, flag, 3)
    qgraph.sync()
    spin.cancel()  # nothing runs: the next call's loop clears the word as it starts (or the sync did)
    qgraph.sync()
    count.fill(0)
    spin(count, flag, 4)
    qgraph.sync()
    assert count.to_numpy()[0] == 4


def test_the_ring_is_read_live_without_torn_or_reordered_rows(cuda):
    """A million reports, read while the loop runs: every row's value is its pass (no torn pair),
    passes increase, and the final history holds the documented subset."""
    x, passes = qgraph.ndarray(qgraph.f64, (1,)), 1_000_000
    count_up(x, passes)
    reads = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qgraph.HistoryWarning)
        while reads < 10_000 and not count_up._reports.settled():
            rows = count_up.history["x"]
            assert np.array_equal(rows[:, 0], rows[:, 1]) and np.all(np.diff(rows[:, 0]) > 0), rows
            reads += 1
    qgraph.sync()
    assert count_up.history.count("x") == passes
    with pytest.warns(qgraph.HistoryWarning):
        rows = count_up.history["x"]
    assert rows[-1, 0] == passes and len(rows) == 4096 + 21  # 0, 1, 2, 4 ... 2^19, then the latest 4096
    assert reads > 1  # it was read while it ran
