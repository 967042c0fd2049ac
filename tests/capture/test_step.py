"""@qgraph.graph (issue 14): a Python function calling kernels runs as one CUDA graph per call,
with results equal to the calls made one by one, in-place updates for new arrays, shapes and
numbers, concurrent branches for independent calls, ordered calls where arrays alias; on the
CPU the function simply runs."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.kernels import axpy

import qgraph


@qgraph.kernel
def scale(x, a: float):
    for i in range(x.shape[0]):
        x[i] *= a


@qgraph.kernel(graph_while="flag")
def halve_until(x, flag, tol: float):
    for i in range(x.shape[0]):
        x[i] *= 0.5
    flag[0] = 1 if x[0] > tol else 0


@qgraph.graph
def step(x, y, z, dt: float):
    scale(x, 1.0 + dt)          # x
    scale(z, 2.0)               # z: independent of the first
    axpy(x, y, dt * 10)         # reads x, writes y: after the first
    axpy(z, y, 1.0)             # after the second and the third (y)


def _reference(x, y, z, dt):
    x = x * (1.0 + dt)
    z = z * 2.0
    y = y + dt * 10 * x
    return x, y + z, z


def _arrays(n, seed):
    rng = np.random.default_rng(seed)
    return [rng.random(n) for _ in range(3)]


def test_a_step_equals_its_calls_made_one_by_one(arch):
    host = _arrays(100, 1)
    dev = [qgraph.from_numpy(a) for a in host]
    for dt in (0.1, 0.2, 0.3):  # a new number each step: the same graph, nodes updated
        step(*dev, dt)
        host = list(_reference(host[0], host[1], host[2], dt))
    for d, h in zip(dev, host):
        np.testing.assert_allclose(d.to_numpy(), h, rtol=1e-12)
    assert step.stats.kernel_calls == 4  # of the last call, on both backends
    if arch == "cuda":
        assert step.stats.builds == 1 and step.stats.replays == 3 and step.stats.graph_nodes == 4
    else:  # no graph on the CPU
        assert step.stats.builds == step.stats.replays == step.stats.graph_nodes == step.stats.cache_size == 0


def test_independent_calls_are_concurrent_and_shared_arrays_ordered(cuda):
    step(*[qgraph.from_numpy(a) for a in _arrays(50, 2)], 0.1)
    assert step.stats.waits == ((), (), (0,), (1, 2))
    x = qgraph.from_numpy(np.ones(50))
    before = step.stats.builds
    step(x, qgraph.from_numpy(np.zeros(50)), x, 0.1)  # x passed twice: the calls on it stay ordered
    assert step.stats.builds == before + 1
    assert step.stats.waits == ((), (0,), (1,), (2,))  # a chain (each waits for all before it)


def test_new_arrays_and_shapes_need_no_rebuild(cuda):
    step(*[qgraph.from_numpy(a) for a in _arrays(64, 3)], 0.1)
    builds, updates = step.stats.builds, step.stats.node_updates
    for n, seed in ((64, 4), (200, 5), (7, 6)):
        host = _arrays(n, seed)
        dev = [qgraph.from_numpy(a) for a in host]
        step(*dev, 0.25)
        for d, h in zip(dev, _reference(*host, 0.25)):
            np.testing.assert_allclose(d.to_numpy(), h, rtol=1e-12)
    assert step.stats.builds == builds
    assert step.stats.node_updates > updates


def test_views_of_one_buffer(cuda):
    @qgraph.graph
    def halves(buf, lo, hi):
        scale(lo, 2.0)
        scale(hi, 3.0)
        axpy(lo, buf, 1.0)

    cp = pytest.importorskip("cupy")  # views share one allocation

    buf = cp.ones(8)
    halves(buf[4:], buf[:4], buf[4:])  # lo and hi do not overlap; buf[4:] is hi
    assert halves.stats.waits == ((), (), (0, 1))
    np.testing.assert_array_equal(cp.asnumpy(buf), [2, 2, 2, 2, 5, 5, 5, 5])


def test_python_values_are_computed_on_every_call(arch):
    @qgraph.graph
    def ramp(x, k: int):
        scale(x, float(k + 1))  # a number computed in Python, new on each call

    x = qgraph.from_numpy(np.ones(4))
    for k in range(3):
        ramp(x, k)
    np.testing.assert_array_equal(x.to_numpy(), 6.0)


def test_steps_calling_steps_and_device_loops(loop_arch):
    @qgraph.graph
    def inner(x, a):
        scale(x, a)

    @qgraph.graph
    def outer(x, flag):
        inner(x, 8.0)
        halve_until(x, flag, 1.5)
        inner(x, 3.0)

    x = qgraph.from_numpy(np.ones(5))
    flag = qgraph.from_numpy(np.ones(1, np.int32))
    if loop_arch == "cuda-host":  # a host loop cannot be part of a graph
        with pytest.raises(qgraph.QgraphError, match="runs on the host here .* cannot be part of a @qgraph.graph"):
            outer(x, flag)
        return
    outer(x, flag)  # 8 -> 4, 2, 1 -> 3
    np.testing.assert_array_equal(x.to_numpy(), 3.0)
    assert outer.stats.kernel_calls == 3 and inner.stats.kernel_calls == 0  # the inner calls joined the outer step


@qgraph.graph
def scale_times(x, times: int):
    for _ in range(times):  # a Python loop in the body: as many kernel calls as it says
        scale(x, 2.0)


def test_stats_count_the_kernel_calls_of_the_last_call(arch):
    x = qgraph.from_numpy(np.ones(8))
    for times in (3, 3, 1, 0):
        scale_times(x, times)
        assert scale_times.stats.kernel_calls == times
    np.testing.assert_array_equal(x.to_numpy(), 2.0 ** 7)
    if arch == "cuda":  # the call with the same arguments replayed its graph; the last one had none to run
        assert scale_times.stats.replays == 3 and scale_times.stats.graph_nodes == 0


def test_stream_inside_a_step_is_an_error(cuda):
    @qgraph.graph
    def bad(x):
        scale(x, 2.0, stream=0)

    with pytest.raises(qgraph.QgraphError, match="was given stream= inside a @qgraph.graph function"):
        bad(qgraph.from_numpy(np.ones(3)))
    scale(qgraph.from_numpy(np.ones(3)), 2.0)  # the recording ended: calls launch again


def test_the_decorator_rejects_what_it_cannot_run():
    with pytest.raises(TypeError, match="is a kernel: @qgraph.graph decorates a plain function"):
        qgraph.graph(scale)
    with pytest.raises(ValueError, match="graph_cache_size must be a positive int"):
        qgraph.graph(graph_cache_size=0)


def test_the_same_arguments_replay_without_running_the_body(arch):
    runs = []

    @qgraph.graph
    def counted(x, a: float):
        runs.append(1)
        scale(x, a)

    x = qgraph.from_numpy(np.ones(4))
    for _ in range(3):
        counted(x, 2.0)
    np.testing.assert_array_equal(x.to_numpy(), 8.0)
    # on both backends the body ran once (traced); on CUDA the graph was replayed
    assert len(runs) == 1 and counted.stats.traced
    assert counted.stats.replays == (3 if arch == "cuda" else 0)
    counted(x, 3.0)  # a new number: the trace replays with it, the body does not run
    np.testing.assert_array_equal(x.to_numpy(), 24.0)
    assert len(runs) == 1
    y = qgraph.from_numpy(np.ones(4))
    counted(y, 3.0)  # a new array: another structure, traced by running the body
    np.testing.assert_array_equal(y.to_numpy(), 3.0)
    assert len(runs) == 2


@qgraph.kernel
def noise(x):
    for i in range(x.shape[0]):
        x[i] += qgraph.random()


def test_random_draws_advance_on_every_call(arch):
    @qgraph.graph
    def noisy(x):
        noise(x)

    x = qgraph.from_numpy(np.zeros(256))
    noisy(x)
    first = x.to_numpy().copy()
    noisy(x)
    assert not np.allclose(x.to_numpy() - first, first)  # another draw, not the same numbers again


@qgraph.kernel
def relax_once(u, un, change):
    change[0] = 0.0
    for i in range(1, u.shape[0] - 1):
        un[i] = 0.5 * (u[i - 1] + u[i + 1])
        qgraph.atomic_max(change, 0, abs(un[i] - u[i]))


@qgraph.kernel
def copy_back(u, un, change, flag, tol: float, count):
    for i in range(1, u.shape[0] - 1):
        u[i] = un[i]
    count[0] += 1
    flag[0] = 1 if change[0] > tol else 0


def _relax_reference(u, tol):
    u, count = u.copy(), 0
    while True:
        un = u.copy()
        un[1:-1] = 0.5 * (u[:-2] + u[2:])
        change = np.abs(un[1:-1] - u[1:-1]).max()
        u[1:-1] = un[1:-1]
        count += 1
        if not change > tol:
            return u, count


@qgraph.graph(graph_while="flag")
def relax(u, un, change, flag, tol: float, count):
    relax_once(u, un, change)
    copy_back(u, un, change, flag, tol, count)


def test_a_step_repeated_on_the_device_while_its_flag_is_set(loop_arch):
    if loop_arch == "cuda-host":
        pytest.skip("a step's loop is a WHILE node; the host fallback of kernels does not apply")
    u0 = np.zeros(32)
    u0[0], u0[-1] = 1.0, -1.0
    ref, passes = _relax_reference(u0, 1e-3)
    for _ in range(2):  # the second call (new arrays, a new flag) updates the same graph
        u, un = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
        change, count = qgraph.from_numpy(np.zeros(1)), qgraph.from_numpy(np.zeros(1, np.int64))
        flag = qgraph.from_numpy(np.ones(1, np.int32))
        relax(u, un, change, flag, 1e-3, count)
        np.testing.assert_allclose(u.to_numpy(), ref, rtol=1e-12)
        assert count.to_numpy()[0] == passes > 10
    assert relax.stats.kernel_calls == 2  # of one pass of the body, on both backends
    if loop_arch == "cuda":
        assert relax.stats.builds == 1 and relax.stats.graph_nodes == 4 + 2  # 4 tasks, slot writer, condition


def test_while_loop_runs_a_plain_function(arch):
    def one_pass(u, un, change, flag, count):
        relax_once(u, un, change)
        copy_back(u, un, change, flag, 1e-3, count)

    u0 = np.zeros(16)
    u0[0] = 1.0
    ref, passes = _relax_reference(u0, 1e-3)
    u, un = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
    change, count = qgraph.from_numpy(np.zeros(1)), qgraph.from_numpy(np.zeros(1, np.int64))
    flag = qgraph.from_numpy(np.ones(1, np.int32))
    qgraph.while_loop(flag, one_pass, u, un, change, flag, count)
    np.testing.assert_allclose(u.to_numpy(), ref, rtol=1e-12)
    assert count.to_numpy()[0] == passes


def test_a_step_loop_needs_a_kernel_that_takes_the_flag(cuda):
    @qgraph.graph(graph_while="flag")
    def forgetful(x, flag):
        scale(x, 2.0)

    with pytest.raises(qgraph.QgraphError, match="no kernel call in step forgetful takes the flag"):
        forgetful(qgraph.from_numpy(np.ones(2)), qgraph.from_numpy(np.ones(1, np.int32)))
    with pytest.raises(TypeError, match="graph_while='flg' names no parameter"):
        qgraph.graph(graph_while="flg")(lambda x, flag: None)


def test_threads_share_a_step(arch):
    import threading

    @qgraph.graph
    def bump(x, a: float):
        scale(x, a)
        axpy(x, x, 1.0)  # x += x: x *= 2

    arrays = [qgraph.from_numpy(np.ones(64)) for _ in range(4)]
    errors = []

    def worker(x):
        try:
            for _ in range(50):
                bump(x, 1.0)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(x,)) for x in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for x in arrays:
        np.testing.assert_array_equal(x.to_numpy(), 2.0 ** 50)


@pytest.mark.parametrize("substeps", [1, 8, 100])
def test_changing_numbers_are_node_updates_without_a_new_dependency_analysis(cuda, monkeypatch, substeps):
    """A step passing the time: the read/write analysis (quadratic in the calls) follows the
    arrays alone, so a new number each call updates nodes and analyses nothing again."""
    from qgraph.capture import step_capture

    analysed = []
    real = step_capture.dependencies
    monkeypatch.setattr(step_capture, "dependencies", lambda calls: analysed.append(len(calls)) or real(calls))

    @qgraph.graph
    def timed(x, y, t):
        for k in range(substeps):
            scale(x, 1.0 + t * 1e-3)
            axpy(x, y, t + k)

    x_np, y_np, _ = _arrays(17, 5)
    x, y = qgraph.from_numpy(x_np), qgraph.from_numpy(y_np)
    for call in range(4):
        t = 0.5 + call
        timed(x, y, t)
        for k in range(substeps):
            x_np = x_np * (1.0 + t * 1e-3)
            y_np = y_np + (t + k) * x_np
    np.testing.assert_allclose(x.to_numpy(), x_np, rtol=1e-12)
    np.testing.assert_allclose(y.to_numpy(), y_np, rtol=1e-12)
    # one analysis per graph: the first call's, and (with enough calls reading the time) the traced
    # step's own graph reading it from a parameter block (capture/number_block.py)
    forms = 1 if substeps < 4 else 2
    assert analysed == [2 * substeps] * forms and timed.stats.builds == forms
    z = qgraph.from_numpy(y_np)  # another array: analysed again (its overlaps may differ)
    timed(x, z, 9.0)
    assert analysed == [2 * substeps] * (forms + 1)
