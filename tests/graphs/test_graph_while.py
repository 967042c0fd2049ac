"""graph_while results, identical on CPU, the CUDA device loop and the host fallback."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.arch import use_arch
from helpers.loop_kernels import countdown, grow_until

import qgraph


@qgraph.kernel(graph_while="flag")
def relax(u, tmp, flag, steps):
    for i in range(1, u.shape[0] - 1):
        tmp[i] = 0.5 * (u[i - 1] + u[i + 1])
    for i in range(1, u.shape[0] - 1):
        u[i] = tmp[i]
    for i in range(steps.shape[0]):
        steps[i] += 1
    flag[0] = 1 if steps[0] < 7 else 0


def make_counter(n):
    return qgraph.from_numpy(np.array([n], np.int32))


@pytest.mark.parametrize("iterations", [5, 10])
def test_counter_decremented_by_serial_task(loop_arch, iterations):
    counter, flag = make_counter(iterations), qgraph.ndarray(qgraph.i32, (1,))
    visits = qgraph.ndarray(qgraph.i64, (300,))
    countdown(counter, flag, visits)
    assert counter.to_numpy()[0] == 0
    np.testing.assert_array_equal(visits.to_numpy(), iterations)


def test_boolean_done_flag_at_threshold(loop_arch):
    x = qgraph.from_numpy(np.ones(1000))
    done = qgraph.ndarray(qgraph.i32, ())
    grow_until(x, done, 500.0)
    ref, n = np.ones(1000), 0
    while True:
        ref = ref * 1.5 + 1.0
        n += 1
        if ref[0] >= 500.0:
            break
    np.testing.assert_array_equal(x.to_numpy(), ref)
    assert done.to_numpy() == 0


def test_several_parallel_loops_in_the_body(loop_arch):
    u0 = np.zeros(64)
    u0[0], u0[-1] = 1.0, 3.0
    u, tmp = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
    flag, steps = qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    relax(u, tmp, flag, steps)
    ref = u0.copy()
    for _ in range(7):
        ref[1:-1] = 0.5 * (ref[:-2] + ref[2:])
    np.testing.assert_allclose(u.to_numpy(), ref)
    assert steps.to_numpy()[0] == 7


def test_flag_starting_at_zero_runs_the_body_once(loop_arch):
    counter, flag = make_counter(0), qgraph.ndarray(qgraph.i32, (1,))
    visits = qgraph.ndarray(qgraph.i64, (10,))
    countdown(counter, flag, visits)
    np.testing.assert_array_equal(visits.to_numpy(), 1)
    assert counter.to_numpy()[0] == -1


def test_swapping_flag_arrays_needs_no_rebuild(loop_arch):
    flags = [qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,))]
    visits = qgraph.ndarray(qgraph.i64, (50,))
    expected = 0
    for call in range(6):
        n = 2 + call
        countdown(make_counter(n), flags[call % 2], visits)
        expected += n
    np.testing.assert_array_equal(visits.to_numpy(), expected)
    if loop_arch != "cpu":
        assert countdown.stats.builds == 1
        assert countdown.stats.cache_size == 1


def test_different_array_sizes_between_calls(loop_arch):
    for size in (100, 3000, 7):
        visits = qgraph.ndarray(qgraph.i64, (size,))
        countdown(make_counter(4), qgraph.ndarray(qgraph.i32, (1,)), visits)
        np.testing.assert_array_equal(visits.to_numpy(), 4)


def test_ten_thousand_iterations(loop_arch):
    counter, flag = make_counter(10_000), qgraph.ndarray(qgraph.i32, (1,))
    visits = qgraph.ndarray(qgraph.i64, (32,))
    countdown(counter, flag, visits)
    np.testing.assert_array_equal(visits.to_numpy(), 10_000)


def test_stats_say_where_the_loop_ran(loop_arch):
    countdown(make_counter(3), qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i64, (4,)))
    stats = countdown.stats
    assert stats.host_loop == (loop_arch == "cuda-host")
    assert stats.used_graph == (loop_arch != "cpu")


# --------------------------------------------------------------------------- runaway guard


@qgraph.kernel(graph_while="flag", max_iterations=50)
def never_done(passes, flag):
    for i in range(passes.shape[0]):
        passes[i] += 1
    flag[0] = 1  # a bug: the flag never reaches 0


@qgraph.kernel(graph_while="flag")
def countdown_env(counter, flag):
    counter[0] -= 1
    flag[0] = 1 if counter[0] > 0 else 0


def lambda_free(x):
    for i in range(x.shape[0]):
        x[i] += 1


def test_stats_count_the_passes_of_the_last_call(loop_arch):
    for n in (3, 7, 1):
        countdown(make_counter(n), qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i64, (4,)))
        assert countdown.stats.iterations == (n,)
    no_loop = qgraph.kernel(lambda_free)
    no_loop(qgraph.ndarray(qgraph.i64, (4,)))
    assert no_loop.stats.iterations == ()


def test_a_runaway_loop_is_stopped_by_the_guard_and_the_next_call_works(loop_arch):
    """The loop stops after max_iterations passes with its flag still set and QgraphError names the
    kernel, the loop's line, the flag and the limit: at the call on the CPU and the host fallback,
    at the next qgraph.sync() for the device loop (the call returns before the loop runs)."""
    passes, flag = qgraph.ndarray(qgraph.i64, (8,)), qgraph.ndarray(qgraph.i32, (1,))
    line = never_done.__wrapped__.__code__.co_firstlineno + 1  # the def line (the decorator is first)
    with pytest.raises(qgraph.QgraphError, match=rf"kernel never_done: the device loop at line {line} ran 50 "
                                                 r"passes with its flag 'flag' still non-zero .*max_iterations=50"):
        never_done(passes, flag)
        qgraph.sync()
    np.testing.assert_array_equal(passes.to_numpy(), 50)
    assert never_done.stats.iterations == (50,)
    qgraph.sync()  # reported once
    counter = make_counter(4)  # the same flag array, now a good loop
    countdown(counter, flag, qgraph.ndarray(qgraph.i64, (4,)))
    assert counter.to_numpy()[0] == 0 and countdown.stats.iterations == (4,)


def test_the_guard_limit_comes_from_the_environment(loop_arch, monkeypatch):
    monkeypatch.setenv("QGRAPH_MAX_ITERATIONS", "20")
    use_arch(loop_arch.split("-")[0])
    counter = make_counter(19)
    countdown_env(counter, qgraph.ndarray(qgraph.i32, (1,)))
    qgraph.sync()
    assert countdown_env.stats.iterations == (19,)
    with pytest.raises(qgraph.QgraphError, match="max_iterations=20"):
        countdown_env(make_counter(21), qgraph.ndarray(qgraph.i32, (1,)))
        qgraph.sync()
    monkeypatch.setenv("QGRAPH_MAX_ITERATIONS", "0")  # no guard
    use_arch(loop_arch.split("-")[0])
    countdown_env(make_counter(25), qgraph.ndarray(qgraph.i32, (1,)))
    assert countdown_env.stats.iterations == (25,)


def test_bad_guard_settings_name_the_fix():
    with pytest.raises(ValueError, match="max_iterations must be a positive int or None"):
        qgraph.kernel(max_iterations=0)
    with pytest.raises(ValueError, match="max_iterations must be a positive int or None"):
        qgraph.kernel(max_iterations="many")
    from qgraph.runtime.settings import Settings

    with pytest.raises(qgraph.QgraphError, match="QGRAPH_MAX_ITERATIONS='-3': expected a non-negative integer"):
        Settings.from_environ({"QGRAPH_MAX_ITERATIONS": "-3"})
    assert Settings.from_environ({}).max_iterations == 10_000_000
    assert Settings.from_environ({"QGRAPH_MAX_ITERATIONS": "0"}).max_iterations is None


_INTERRUPT_CHILD = """
import signal, sys, time
import numpy as np
import qgraph

signal.signal(signal.SIGINT, signal.default_int_handler)  # a test runner may start us with SIGINT ignored
qgraph.init(sys.argv[1])


@qgraph.kernel(graph_while="flag", max_iterations=int(sys.argv[2]) or None)
def spin(x, flag):
    for i in range(x.shape[0]):
        x[i] += 1.0
    flag[0] = 1


@qgraph.kernel(graph_while="flag")
def finite(x, flag):
    for i in range(x.shape[0]):
        x[i] += 1.0
    flag[0] = 1 if x[0] < 5 else 0


x, flag = qgraph.ndarray(qgraph.f64, (4,)), qgraph.ndarray(qgraph.i32, (1,))
finite(x, flag)
qgraph.compile(spin, x, flag)  # the Ctrl-C comes while it runs, not while it compiles
print("ready", flush=True)
started = time.perf_counter()
try:
    spin(x, flag)
    qgraph.sync()
    print("no interrupt", flush=True)
except KeyboardInterrupt as e:
    print(f"interrupted after {time.perf_counter() - started:.1f} s: {e}", flush=True)
try:
    qgraph.sync()
except qgraph.QgraphError as e:
    print("guard:", str(e)[:60], flush=True)
y = qgraph.ndarray(qgraph.f64, (4,))
finite(y, flag)
print("next call:", y.to_numpy()[0], flush=True)
"""


def _interrupt(arch: str, limit: int, tmp_path) -> str:
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "child.py"
    script.write_text(_INTERRUPT_CHILD)
    child = subprocess.Popen([sys.executable, str(script), arch, str(limit)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        import time

        time.sleep(1.0)  # the runaway loop is running
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, err
    return out


def test_ctrl_c_stops_a_runaway_cpu_loop_and_the_next_call_works(tmp_path):
    """No guard (max_iterations=None): Ctrl-C is the way out; the compiled loop checks for it."""
    out = _interrupt("cpu", 0, tmp_path)
    # the device loop checks after each pass, its parallel loop after each chunk: either may see it first
    assert re.search(r"interrupted after .*kernel spin was interrupted in (its device loop|the parallel loop at "
                     r"line \d+)", out), out
    assert "next call: 5.0" in out, out


@pytest.mark.cuda
def test_ctrl_c_gets_through_a_wait_for_a_runaway_device_loop(tmp_path):
    """qgraph.sync() waits interruptibly; Ctrl-C there sets the kernel's cancel word, the device loop
    ends after its pass (runtime.cancel) and KeyboardInterrupt names it; the guard never trips and
    the next call works."""
    use_arch("cuda")
    out = _interrupt("cuda", 2_000_000, tmp_path)
    assert re.search(r"interrupted after .*kernel spin: the device loop at line \d+ was cancelled after pass", out), out
    assert "guard:" not in out, out
    assert "next call: 5.0" in out, out
