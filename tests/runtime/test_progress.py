"""kernel(..., progress=...) and @qgraph.kernel(progress=...): a bar or a callback fed while a device
loop runs, its last update the call's final passes and reported values; a callback returning False
cancels (on the CPU too)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.loop_kernels import crawl, creep

import qgraph


@qgraph.kernel(graph_while="flag")
def halve(x, flag, tol: float):
    x[0] = 0.5 * x[0]
    qgraph.report("x", x[0])
    flag[0] = 1 if x[0] > tol else 0


def test_the_last_update_is_the_calls_passes_and_latest_values(loop_arch):
    x, flag = qgraph.from_numpy(np.array([1.0])), qgraph.from_numpy(np.ones(1, np.int32))
    seen = []
    halve(x, flag, 1e-3, progress=lambda passes, values: seen.append((passes, values)))
    assert seen[-1] == (10, {"x": 0.5**10})  # 2^-10 < 1e-3 after ten passes
    assert all(passes <= 10 for passes, _ in seen)
    x.fill(1.0)
    halve(x, flag, 1e-3, progress=True)  # a tqdm bar (off here: stderr is no terminal)
    assert halve.stats.iterations == (10,)


SEEN_BY_THE_OPTION: list = []


@qgraph.kernel(graph_while="flag", progress=lambda passes, values: SEEN_BY_THE_OPTION.append(passes))
def halve_watched(x, flag, tol: float):
    x[0] = 0.5 * x[0]
    flag[0] = 1 if x[0] > tol else 0


def test_progress_given_to_the_kernel_is_its_calls_default(loop_arch):
    x, flag = qgraph.from_numpy(np.array([1.0])), qgraph.from_numpy(np.ones(1, np.int32))
    SEEN_BY_THE_OPTION.clear()
    halve_watched(x, flag, 1e-3)
    assert SEEN_BY_THE_OPTION and SEEN_BY_THE_OPTION[-1] == 10
    SEEN_BY_THE_OPTION.clear()
    x.fill(1.0)
    halve_watched(x, flag, 1e-3, progress=False)  # a call's own progress= wins
    qgraph.sync()
    assert SEEN_BY_THE_OPTION == [] and halve_watched.stats.iterations == (10,)


def test_the_progress_option_is_checked_at_decoration():
    with pytest.raises(TypeError, match="progress must be True"):
        qgraph.kernel(graph_while="flag", progress="yes")
    with pytest.raises(TypeError, match="progress= shows the progress of device loops"):

        @qgraph.kernel(progress=True)
        def scale(x):
            for i in range(x.shape[0]):
                x[i] *= 2.0


def test_kernels_without_loops_take_no_progress_argument():
    @qgraph.kernel
    def scale(x):
        for i in range(x.shape[0]):
            x[i] *= 2.0

    with pytest.raises(TypeError, match="progress"):
        scale(np.ones(3), progress=True)


def test_a_callback_returning_false_cancels_the_loop(loop_arch):
    # seconds of passes, a failed cancel ends there: an unrolled device loop runs 2**21 passes in about
    # 1.5 s, which a 6-process suite on one GPU once outran before the cancel landed
    stop_at = 1 << 30 if loop_arch == "cpu" else 1 << 23
    count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.from_numpy(np.ones(1, np.int32))
    crawl(count, flag, 2)
    qgraph.sync()
    seen = []

    def until_1000(passes, values):
        seen.append(passes)
        return passes < 1000

    with pytest.raises(qgraph.LoopCancelled, match="kernel crawl"):
        crawl(count, flag, stop_at, progress=until_1000)
    # the passes so far reached the watcher while the loop ran (a failed call gets no final update), and
    # only its answer to 1000 passes or more stopped the loop (how many polls that took depends on the
    # pass rate: the host fallback's passes wait for the GPU, shared with other processes in a test run)
    assert seen and seen == sorted(seen) and seen[-1] >= 1000 and count.to_numpy()[0] < stop_at
    count.fill(0)
    crawl(count, flag, 3, progress=True)
    assert count.to_numpy()[0] == 3


class _StopWatching(Exception):
    pass


def test_a_callback_that_raises_stops_the_loop_and_the_call_raises_it(loop_arch):
    """The callback's own exception, unchanged, ends the call early (not at the loop's end, nor a
    LoopCancelled in its place); the next call works."""
    stop_at = 1 << 27 if loop_arch == "cpu" else 1 << 23
    count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.from_numpy(np.ones(1, np.int32))
    crawl(count, flag, 2)  # compiled first: a cancel during the compile is another matter (issue 46)
    qgraph.sync()
    count.fill(0)

    def refuse(passes, values):
        raise _StopWatching(f"seen {passes} passes")

    with pytest.raises(_StopWatching, match="seen"):
        crawl(count, flag, stop_at, progress=refuse)
    ran = count.to_numpy()[0]
    count.fill(0)
    crawl(count, flag, 3)
    assert count.to_numpy()[0] == 3
    assert ran < stop_at


def test_a_bar_without_stderr_runs_the_call(loop_arch, monkeypatch):
    """progress=True where there is no stderr (pythonw, a daemon): no bar, the call runs."""
    monkeypatch.setattr("sys.stderr", None)
    x, flag = qgraph.from_numpy(np.array([1.0])), qgraph.from_numpy(np.ones(1, np.int32))
    halve(x, flag, 1e-3, progress=True)
    assert halve.stats.iterations == (10,)


def test_progress_under_a_tape_sees_the_recorded_call_and_cancels_it(loop_arch):
    """A tape runs a recording copy of the kernel: the callback sees its passes, and returning False
    stops it (issue 46: progress under a tape showed 0 and a cancel was ignored)."""
    x = qgraph.ndarray(qgraph.f64, (8,), requires_grad=True)
    count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.from_numpy(np.ones(1, np.int32))
    stop_at = qgraph.from_numpy(np.array([3]))
    with qgraph.Tape():
        creep(x, count, flag, stop_at)  # compiled
    seen = []

    def until_2000(passes, values):
        seen.append(passes)
        return passes < 2000

    count.fill(0)
    flag.fill(1)
    stop_at.fill(1 << 40 if loop_arch == "cpu" else 1 << 24)
    with pytest.raises(qgraph.LoopCancelled, match=r"kernel creep\w*: the device loop at line \d+ was cancelled"):
        with qgraph.Tape():
            creep(x, count, flag, stop_at, progress=until_2000)
            qgraph.sync()
    assert max(seen) >= 2000  # what the recording copy ran, not 0
