"""graph_while results, identical on CPU, the CUDA device loop and the host fallback."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import use_arch

import qgraph


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda),
                        pytest.param("cuda-host", marks=pytest.mark.cuda)])
def loop_arch(request, monkeypatch):
    """cpu, the CUDA device WHILE loop, and the forced host do-while fallback."""
    if request.param == "cuda-host":
        monkeypatch.setenv("QGRAPH_GRAPH_WHILE", "host")
    use_arch(request.param.split("-")[0])
    yield request.param
    qgraph.sync()
    monkeypatch.delenv("QGRAPH_GRAPH_WHILE", raising=False)
    qgraph.init(request.param.split("-")[0])


@qgraph.kernel(graph_while="flag")
def countdown(counter, flag, visits):
    for i in range(visits.shape[0]):
        visits[i] += 1
    counter[0] -= 1
    flag[0] = 1 if counter[0] > 0 else 0


@qgraph.kernel(graph_while="done")
def grow_until(x, done, threshold: float):
    for i in range(x.shape[0]):
        x[i] = x[i] * 1.5 + 1.0
    done[()] = 0 if x[0] >= threshold else 1


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
