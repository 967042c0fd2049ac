"""Traced steps: a @qgraph.graph body runs once per structure with its numbers traced; later calls with new
numbers replay without it (stats.traced), bit-identical to the calls made one by one, on both backends.
A body that decides in Python from a number, converts it, or reaches arrays a replay cannot check runs
on every call instead, and stats.fallback_reason names the line."""

from __future__ import annotations

import math

import numpy as np
import pytest

import qgraph


@qgraph.kernel
def advance(u, v, dt: qgraph.f32):
    for i in range(u.shape[0]):
        v[i] = v[i] - dt * u[i]
    for i in range(u.shape[0]):
        u[i] = u[i] + dt * v[i]


@qgraph.kernel
def drive(u, t: qgraph.f32):
    u[0] = math.sin(t)


@qgraph.kernel
def scale(x, a: float):
    for i in range(x.shape[0]):
        x[i] *= a


@qgraph.kernel
def fill_first(x, n: int, value: float):
    for i in range(n):
        x[i] = value


def _substeps(u, v, t, dt, count):
    for k in range(count):
        advance(u, v, dt)
        drive(u, t + k * dt)
    return t + count * dt


def _fresh(seed: int = 0, n: int = 64):
    rng = np.random.default_rng(seed)
    u0, v0 = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    return u0, v0


def test_new_numbers_replay_without_the_body_and_match_eager_calls(arch):
    runs = []

    @qgraph.graph
    def step(u, v, t, dt, count: int):
        runs.append(1)
        return _substeps(u, v, t, dt, count)

    u0, v0 = _fresh()
    u, v = qgraph.from_numpy(u0), qgraph.from_numpy(v0)
    eu, ev = qgraph.from_numpy(u0), qgraph.from_numpy(v0)
    rng = np.random.default_rng(1)
    t = 0.0
    for _ in range(6):
        dt = float(rng.uniform(1e-4, 1e-2))
        got = step(u, v, t, dt, 3)
        want = _substeps(eu, ev, t, dt, 3)  # the same kernel calls, one by one
        assert got == want  # the returned number is evaluated from the trace
        t = got
    np.testing.assert_array_equal(u.to_numpy(), eu.to_numpy())
    np.testing.assert_array_equal(v.to_numpy(), ev.to_numpy())
    # the first call found `count` deciding structure (range): the second traced with it static
    assert len(runs) == 2 and step.stats.traced and step.stats.fallback_reason is None
    assert step.stats.traces == 2 and step.stats.kernel_calls == 6
    if arch == "cuda":  # the first call's graph, then the step's own reading its numbers from a block
        assert step.stats.builds == 2


def test_a_python_decision_on_a_number_runs_the_body_every_call(arch):
    runs = []

    @qgraph.graph
    def step(x, t):
        runs.append(1)
        if t > 1.0:
            scale(x, 2.0)
        scale(x, t)

    x = qgraph.from_numpy(np.ones(8))
    for t in (0.5, 2.0, 0.75, 3.0):
        step(x, t)
    np.testing.assert_array_equal(x.to_numpy(), 0.5 * 4.0 * 0.75 * 6.0)
    assert len(runs) == 4 and not step.stats.traced
    reason = step.stats.fallback_reason
    assert "if t > 1.0:" in reason and "'t'" in reason and "static=('t',)" in reason


def test_a_number_given_to_numpy_runs_the_body_every_call(arch):
    @qgraph.graph
    def step(x, t):
        scale(x, float(np.cos(float(t))))

    x = qgraph.from_numpy(np.ones(4))
    for t in (0.1, 0.2):
        step(x, t)
    np.testing.assert_array_equal(x.to_numpy(), np.cos(0.1) * np.cos(0.2))
    assert not step.stats.traced and "float()" in step.stats.fallback_reason


def test_numpy_ufuncs_on_numbers_are_traced(arch):
    @qgraph.graph
    def step(x, t):
        scale(x, np.cos(t) * np.float64(2.0) + 1)

    x = qgraph.from_numpy(np.ones(4))
    want = 1.0
    for t in (0.1, 0.2, 0.3):
        step(x, t)
        want *= np.cos(t) * 2.0 + 1
    np.testing.assert_array_equal(x.to_numpy(), want)
    assert step.stats.traced and step.stats.traces == 1


def test_static_arguments_key_the_traces_by_value(arch):
    runs = []

    @qgraph.graph(static=("doubled",))
    def step(x, a, doubled):
        runs.append(doubled)
        scale(x, a)
        if doubled:
            scale(x, 2.0)

    x = qgraph.from_numpy(np.ones(4))
    for a, doubled in ((1.5, True), (3.0, False), (0.5, True), (2.0, False)):
        step(x, a, doubled)
    np.testing.assert_array_equal(x.to_numpy(), 1.5 * 2 * 3.0 * 0.5 * 2 * 2.0)
    assert runs == [True, False] and step.stats.traced


def test_static_names_that_are_no_parameter_are_an_error():
    with pytest.raises(TypeError, match=r"static=\('dx',\): 'dx' names no parameter of step\(x, dt\)"):
        @qgraph.graph(static=("dx",))
        def step(x, dt):
            scale(x, dt)


def test_a_global_array_swapped_by_the_body_is_not_replayed_stale(arch):
    state = {"a": qgraph.from_numpy(np.ones(4)), "b": qgraph.from_numpy(np.full(4, 10.0))}

    @qgraph.graph
    def step(factor):
        scale(state["a"], factor)  # an array reached through a dict: a replay cannot tell it is the same
        state["a"], state["b"] = state["b"], state["a"]

    for f in (2.0, 3.0, 4.0):
        step(f)
    a, b = state["a"].to_numpy(), state["b"].to_numpy()
    np.testing.assert_array_equal(np.sort([a[0], b[0]]), [8.0, 30.0])
    assert not step.stats.traced and "not an argument of the step" in step.stats.fallback_reason


def test_a_module_global_reassigned_between_calls_is_seen(arch):
    ns: dict = {"scale": scale, "np": np}
    exec("def body(x, a):\n    scale(x, a * k)\n", ns)
    ns["k"] = 2.0
    step = qgraph.graph(ns["body"])
    x = qgraph.from_numpy(np.ones(4))
    step(x, 1.0)
    step(x, 1.5)  # traced replay
    assert step.stats.traced
    ns["k"] = 10.0  # the body reads k: the trace is stale, so the body runs (and traces again)
    step(x, 1.0)
    np.testing.assert_array_equal(x.to_numpy(), 2.0 * 3.0 * 10.0)


def test_a_number_that_is_a_loop_bound_updates_the_call_in_full(arch):
    @qgraph.graph
    def step(x, n, value):
        fill_first(x, n, value)

    x = qgraph.from_numpy(np.zeros(8))
    want = np.zeros(8)
    for n, value in ((2, 1.0), (5, 2.0), (3, 3.0), (8, -0.0), (1, 0.0)):
        step(x, n, value)
        want[:n] = value
        np.testing.assert_array_equal(x.to_numpy(), want)
        assert np.array_equal(np.signbit(x.to_numpy()), np.signbit(want))
    assert step.stats.traced and step.stats.traces == 1


def test_a_graph_while_step_is_traced(arch):
    @qgraph.kernel
    def halve(x, flag, tol: float):
        for i in range(x.shape[0]):
            x[i] *= 0.5
        flag[0] = 1 if x[0] > tol else 0

    @qgraph.graph(graph_while="flag")
    def until(x, flag, tol):
        halve(x, flag, tol)

    flag = qgraph.from_numpy(np.ones(1, np.int32))
    for tol in (1.0, 0.1, 0.01):
        x = np.full(4, 64.0)
        xs = qgraph.from_numpy(x)
        flag.from_numpy(np.ones(1, np.int32))
        until(xs, flag, tol)
        while True:
            x = x * 0.5
            if not x[0] > tol:
                break
        np.testing.assert_array_equal(xs.to_numpy(), x)


def test_host_calls_run_at_every_replay(arch):
    seen = []

    @qgraph.graph
    def step(x, a):
        scale(x, a)
        qgraph.host_call(seen.append, 1)

    x = qgraph.from_numpy(np.ones(4))
    for a in (2.0, 3.0, 4.0):
        step(x, a)
    qgraph.sync()
    assert seen == [1, 1, 1] and step.stats.traced
    np.testing.assert_array_equal(x.to_numpy(), 24.0)


def test_a_traced_number_given_to_host_call_runs_the_body(arch):
    seen = []

    @qgraph.graph
    def step(x, a):
        scale(x, a)
        qgraph.host_call(seen.append, a)

    x = qgraph.from_numpy(np.ones(4))
    for a in (2.0, 3.0):
        step(x, a)
    qgraph.sync()
    assert seen == [2.0, 3.0] and not step.stats.traced
    assert "host_call" in step.stats.fallback_reason


def test_trace_false_runs_the_body_every_call(arch):
    runs = []

    @qgraph.graph(trace=False)
    def step(x, a):
        runs.append(1)
        scale(x, a)

    x = qgraph.from_numpy(np.ones(4))
    step(x, 2.0)
    step(x, 3.0)
    assert len(runs) == 2 and not step.stats.traced


def test_a_value_the_kernels_cannot_take_gets_the_body_s_error(arch):
    @qgraph.kernel
    def small(x, a: qgraph.f32):
        for i in range(x.shape[0]):
            x[i] = a

    @qgraph.graph
    def step(x, a):
        small(x, a * 2)

    x = qgraph.from_numpy(np.ones(4, np.float32))
    step(x, 1.0)
    step(x, 2.0)
    with pytest.raises(TypeError, match="does not fit in float32"):
        step(x, 1e300)
    step(x, 3.0)  # the next good call works
    np.testing.assert_array_equal(x.to_numpy(), 6.0)


def test_a_tape_sees_every_call_of_a_traced_step(arch):
    @qgraph.kernel
    def square(x, y, a: float):
        for i in range(x.shape[0]):
            y[i] = a * x[i] * x[i]

    @qgraph.graph
    def step(x, y, a):
        square(x, y, a)

    x = qgraph.from_numpy(np.arange(1.0, 5.0), requires_grad=True)
    y = qgraph.ndarray(np.float64, 4, requires_grad=True)
    step(x, y, 2.0)
    step(x, y, 3.0)  # traced replays before the tape
    for a in (1.5, 2.5):
        x.grad.from_numpy(np.zeros(4))
        with qgraph.Tape() as tape:
            step(x, y, a)
        tape.backward(grads={y: np.ones(4)})
        np.testing.assert_allclose(x.grad.to_numpy(), 2 * a * np.arange(1.0, 5.0))
        np.testing.assert_allclose(y.to_numpy(), a * np.arange(1.0, 5.0) ** 2)


def test_numbers_read_inside_tasks_come_from_one_parameter_block(cuda):
    """16 calls each given its own time: a replay updates one loader node, not 16 kernel nodes."""
    @qgraph.graph
    def step(u, v, t, dt):
        for k in range(8):
            advance(u, v, dt)
            drive(u, t + k * dt)

    u0, v0 = _fresh(3)
    u, v = qgraph.from_numpy(u0), qgraph.from_numpy(v0)
    eu, ev = qgraph.from_numpy(u0), qgraph.from_numpy(v0)
    t = 0.0
    for call in range(5):
        dt = 1e-3 * (call + 1)
        before = step.stats.node_updates
        step(u, v, t, dt)
        for k in range(8):
            advance(eu, ev, dt)
            drive(eu, t + k * dt)
        if call >= 2:  # the second call moved the numbers into the block; later ones update its loader alone
            assert step.stats.node_updates - before == 1
        t += 8 * dt
    np.testing.assert_array_equal(u.to_numpy(), eu.to_numpy())
    np.testing.assert_array_equal(v.to_numpy(), ev.to_numpy())
    assert step.stats.traced


@qgraph.kernel
def add_to(x, a: float):
    for i in range(x.shape[0]):
        x[i] += a


def test_a_graph_while_step_reading_its_numbers_from_a_block(arch):
    @qgraph.kernel
    def shrink(x, flag, tol: float, a: float):
        for i in range(x.shape[0]):
            x[i] *= a
        flag[0] = 1 if x[0] > tol else 0

    @qgraph.graph(graph_while="flag")
    def until(x, y0, y1, y2, flag, tol, a):
        add_to(y0, a)
        add_to(y1, 2 * a)
        add_to(y2, 3 * a)
        shrink(x, flag, tol, a)

    ys = [qgraph.from_numpy(np.zeros(4)) for _ in range(3)]
    want = np.zeros(3)
    flag = qgraph.from_numpy(np.ones(1, np.int32))
    for a in (0.5, 0.25, 0.75, 0.5):
        x = np.full(4, 8.0)
        xs = qgraph.from_numpy(x)
        flag.from_numpy(np.ones(1, np.int32))
        passes = 0
        while True:
            passes += 1
            x = x * a
            if not x[0] > 0.1:
                break
        until(xs, *ys, flag, 0.1, a)
        want += passes * a * np.array([1.0, 2.0, 3.0])
        np.testing.assert_array_equal(xs.to_numpy(), x)
        np.testing.assert_allclose([y.to_numpy()[0] for y in ys], want, rtol=1e-14)


def test_a_traced_step_whose_graph_was_evicted_is_traced_again(arch):
    runs = []

    @qgraph.graph(graph_cache_size=1)
    def step(x, a):
        runs.append(1)
        for _ in range(4):
            add_to(x, a)

    x, y = qgraph.from_numpy(np.zeros(4)), qgraph.from_numpy(np.zeros(4))
    want_x = want_y = 0.0
    for k, a in enumerate((1.0, 2.0, 3.0, 4.0, 5.0, 6.0)):
        target = x if k % 3 else y  # a second array: another trace, whose graph evicts the first's
        step(target, a)
        if target is x:
            want_x += 4 * a
        else:
            want_y += 4 * a
    np.testing.assert_array_equal(x.to_numpy(), want_x)
    np.testing.assert_array_equal(y.to_numpy(), want_y)
    assert step.stats.traced


def test_returned_numbers_in_a_dict_are_evaluated(arch):
    @qgraph.graph
    def step(x, t, dt):
        scale(x, 1.0 + dt)
        return {"t": t + dt, "label": "advanced"}

    x = qgraph.from_numpy(np.ones(4))
    t = 0.0
    for dt in (0.5, 0.25, 0.125):
        out = step(x, t, dt)
        assert out == {"t": t + dt, "label": "advanced"} and type(out["t"]) is float
        t = out["t"]
    assert step.stats.traced


def test_a_step_whose_arrays_change_every_call_stops_tracing_and_says_why(arch):
    @qgraph.graph(graph_cache_size=2)
    def step(x, a):
        scale(x, a)

    for _ in range(12):
        x = qgraph.from_numpy(np.ones(4))
        step(x, 3.0)
        np.testing.assert_array_equal(x.to_numpy(), 3.0)
    assert not step.stats.traced and "change on every call" in step.stats.fallback_reason


def test_what_a_helper_of_the_body_reads_is_watched_too(arch):
    ns: dict = {"scale": scale}
    exec("def gain():\n    return k\n\ndef body(x, a):\n    scale(x, a * gain())\n", ns)
    ns["k"] = 2.0
    step = qgraph.graph(ns["body"])
    x = qgraph.from_numpy(np.ones(4))
    step(x, 1.0)
    step(x, 1.5)
    ns["k"] = 10.0  # read by the helper, not the step function: the trace is stale all the same
    step(x, 1.0)
    np.testing.assert_array_equal(x.to_numpy(), 2.0 * 3.0 * 10.0)
    assert step.stats.traced


def test_operators_rounding_and_numpy_clamps_are_traced(arch):
    @qgraph.graph
    def step(x, t, dt):
        a = abs(-t) ** 2 + round(dt, 3) + math.floor(t * 10) + sum([t, dt]) - divmod_free(t)
        scale(x, 1.0 + np.minimum(dt, 0.05) + np.clip(a, 0.0, 1e6) * 1e-3)

    def divmod_free(t):
        return t // 0.5 + t % 0.5

    x = qgraph.from_numpy(np.ones(4))
    want = np.ones(4)
    for t, dt in ((0.25, 0.01), (1.75, 0.125), (3.5, 0.0625)):
        step(x, t, dt)
        a = abs(-t) ** 2 + round(dt, 3) + math.floor(t * 10) + sum([t, dt]) - (t // 0.5 + t % 0.5)
        want = want * (1.0 + np.minimum(dt, 0.05) + np.clip(a, 0.0, 1e6) * 1e-3)
        np.testing.assert_array_equal(x.to_numpy(), want)
    assert step.stats.traced and step.stats.traces == 1


def test_min_on_a_number_falls_back_and_points_at_numpy_s_clamps(arch):
    @qgraph.graph
    def step(x, dt):
        scale(x, 1.0 + min(dt, 0.05))

    x = qgraph.from_numpy(np.ones(4))
    step(x, 0.01)
    step(x, 0.1)
    np.testing.assert_array_equal(x.to_numpy(), 1.01 * 1.05)
    assert not step.stats.traced and "np.minimum" in step.stats.fallback_reason


def test_keyword_and_default_numbers_key_their_own_traces(arch):
    @qgraph.graph
    def step(x, t, dt=0.5):
        scale(x, t + dt)

    x = qgraph.from_numpy(np.ones(4))
    step(x, 1.0)  # dt's default: a constant of this trace
    step(x, 2.0)
    step(x, 1.0, dt=0.25)  # given by keyword: another trace, dt traced
    step(x, 1.0, dt=1.0)
    step(x, t=3.0)
    np.testing.assert_array_equal(x.to_numpy(), 1.5 * 2.5 * 1.25 * 2.0 * 3.5)
    assert step.stats.traces == 3 and step.stats.traced
