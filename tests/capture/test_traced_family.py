"""Traced steps where they meet the other step features, generated: each body form (plain, a graph_while
loop, a host_call, a step calling a step, many calls reading the time: the parameter block) x each kind
of number (Python floats, NumPy float32, an integer count) x each call pattern (new numbers every call,
the same numbers again, two array sets taking turns), on both backends. The oracle is the same step with
trace=False (its body run on every call): results must be bit-identical, and the traced step must
replay (stats.traced) without running its body again."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import qgraph


@qgraph.kernel
def damp(x, v, c: float):
    for i in range(x.shape[0]):
        v[i] = v[i] * c - 0.01 * x[i]


@qgraph.kernel
def move(x, v, dt):
    for i in range(x.shape[0]):
        x[i] += dt * v[i]


@qgraph.kernel
def count_down(x, flag, n: qgraph.i32):
    flag[0] = 1 if x[0] < n else 0
    x[0] += 1.0


BODIES = ("plain", "loop", "host", "nested", "block")
NUMBERS = ("python", "float32", "count")
PATTERNS = ("new", "same", "swap")


def _make(body: str, trace: bool, log: list):
    """The step of one body form (a fresh function per step: each keeps its own traces)."""

    def inner(x, v, t, dt):
        damp(x, v, 1.0 - 0.1 * dt)
        move(x, v, dt * (1.0 + 0 * t))

    if body == "plain":
        def plain(x, v, flag, t, dt, n):
            inner(x, v, t, dt)
            move(x, v, 0.5 * dt)
        return qgraph.graph(trace=trace)(plain)
    if body == "loop":
        def loop(x, v, flag, t, dt, n):
            inner(x, v, t, dt)
            count_down(x, flag, n)
        return qgraph.graph(graph_while="flag", trace=trace)(loop)
    if body == "host":
        def host(x, v, flag, t, dt, n):
            inner(x, v, t, dt)
            qgraph.host_call(log.append, "ran")
        return qgraph.graph(trace=trace)(host)
    if body == "nested":
        sub = qgraph.graph(trace=trace)(inner)

        def nested(x, v, flag, t, dt, n):
            sub(x, v, t, dt)
            sub(x, v, t + dt, dt)
        return qgraph.graph(trace=trace)(nested)

    def block(x, v, flag, t, dt, n):  # 6 calls reading the changing time: its parameter block on CUDA
        for k in range(3):
            damp(x, v, 1.0 - 0.1 * (t + k * dt))
            move(x, v, dt)
    return qgraph.graph(trace=trace)(block)


def _numbers(kind: str, call: int, pattern: str):
    k = 0 if pattern == "same" else call
    t, dt = 0.1 * k, 0.01 + 0.001 * k
    n = 3 + (k % 3 if kind == "count" else 0)
    if kind == "float32":
        return np.float32(t), np.float32(dt), n
    return t, dt, n


@pytest.mark.parametrize("body, numbers, pattern", list(itertools.product(BODIES, NUMBERS, PATTERNS)))
def test_a_traced_step_equals_its_body_run_every_call(arch, body, numbers, pattern):
    rng = np.random.default_rng(len(body) * 7 + len(numbers) * 3 + len(pattern))
    x0, v0 = rng.standard_normal((2, 2, 16))
    logs = {True: [], False: []}
    results = {}
    for trace in (True, False):
        step = _make(body, trace, logs[trace])
        sets = [(qgraph.from_numpy(x0[s]), qgraph.from_numpy(v0[s])) for s in range(2)]
        flag = qgraph.from_numpy(np.ones(1, np.int32))
        for call in range(6):
            x, v = sets[call % 2 if pattern == "swap" else 0]
            t, dt, n = _numbers(numbers, call, pattern)
            if body == "loop":
                x.from_numpy(np.where(np.arange(16) == 0, 0.0, x.to_numpy()))  # the counter restarts
                flag.from_numpy(np.ones(1, np.int32))
            step(x, v, flag, t, dt, n)
        qgraph.sync()
        results[trace] = [a.to_numpy() for pair in sets for a in pair]
        if trace:  # traced once per array set, then replayed without the body
            assert step.stats.traced, step.stats.fallback_reason
            assert step.stats.traces == (2 if pattern == "swap" else 1)
    for got, want in zip(results[True], results[False]):
        np.testing.assert_array_equal(got, want)
    assert logs[True] == logs[False]  # a host call runs at every replay, as in the body run every call
