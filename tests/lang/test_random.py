"""Random numbers in kernels: counter-based (Philox), reproducible for a seed, the same on
every backend (both match the NumPy reference of lang.philox), fresh on every call, graph
replay and device-loop pass, with the moments of their distributions."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph
from qgraph.lang.lower import random_bits as philox


@qgraph.kernel(cuda_graph=True)
def draws(u, g, k, u32):
    for i in range(u.shape[0]):
        u[i] = qgraph.random()
        g[i] = qgraph.randn()
        k[i] = qgraph.randint(-3, 5)
        u32[i] = qgraph.random(qgraph.f32)


def run(n):
    u, g = qgraph.ndarray(qgraph.f64, (n,)), qgraph.ndarray(qgraph.f64, (n,))
    k, u32 = qgraph.ndarray(qgraph.i64, (n,)), qgraph.ndarray(qgraph.f32, (n,))
    draws(u, g, k, u32)
    return u.to_numpy(), g.to_numpy(), k.to_numpy(), u32.to_numpy()


def test_same_seed_same_numbers_and_each_call_fresh(arch):
    qgraph.seed(123)
    first = run(1000)
    second = run(1000)
    qgraph.seed(123)
    again = run(1000)
    for a, b, c in zip(first, second, again):
        np.testing.assert_array_equal(a, c)
        assert (a != b).mean() > 0.5
    if arch == "cuda":
        assert draws.stats.used_graph and draws.stats.builds == 1  # fresh numbers without a rebuild


def test_numbers_match_the_reference_on_every_backend(arch):
    qgraph.seed(99)
    u, g, k, u32 = run(500)
    index = np.arange(500, dtype=np.int64)
    stream = (0 << 16) | 0  # epoch 0 (the first call after seeding), task 0
    np.testing.assert_array_equal(u, philox.reference(99, stream, index, 0, "uniform_f64"))
    np.testing.assert_array_equal(g, philox.reference(99, stream, index, 1, "normal_f64"))
    np.testing.assert_array_equal(k, philox.reference(99, stream, index, 2, "randint", lo=-3, hi=5))
    np.testing.assert_array_equal(u32, philox.reference(99, stream, index, 3, "uniform_f32"))


def test_moments_over_a_million_draws(arch):
    qgraph.seed(7)
    u, g, k, u32 = run(1_000_000)
    assert 0 <= u.min() and u.max() < 1 and 0 <= u32.min() and u32.max() < 1 and u32.dtype == np.float32
    assert abs(u.mean() - 0.5) < 2e-3 and abs(u.var() - 1 / 12) < 2e-3
    assert abs(u32.mean() - 0.5) < 2e-3
    assert abs(g.mean()) < 5e-3 and abs(g.var() - 1) < 1e-2
    counts = np.bincount(k + 3, minlength=8)
    assert k.min() == -3 and k.max() == 4 and len(counts) == 8
    expected = len(k) / 8
    assert ((counts - expected) ** 2 / expected).sum() < 40  # chi-square, 7 degrees of freedom


@qgraph.kernel(graph_while="flag")
def random_walk(pos, step, flag):
    for i in range(pos.shape[0]):
        pos[i] += qgraph.randn()
    step[0] += 1
    flag[0] = 1 if step[0] < 20 else 0


def test_each_device_loop_pass_draws_fresh_numbers(arch):
    qgraph.seed(5)
    pos = qgraph.from_numpy(np.zeros(20000))
    step, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    random_walk(pos, step, flag)
    p = pos.to_numpy()
    assert step.to_numpy()[0] == 20
    assert abs(p.var() - 20) < 1.5  # 20 independent unit steps (the same numbers each pass would give 400)


@qgraph.func
def noisy(x):
    return x + qgraph.random()


@qgraph.kernel
def random_in_func(x):
    for i in range(x.shape[0]):
        x[i] = noisy(x[i])


def test_random_in_a_func_is_an_error(arch):
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"qgraph.random\(\) in a @qgraph.func: draw the number in the"):
        random_in_func(qgraph.from_numpy(np.zeros(3)))


def test_seed_checks_its_argument():
    with pytest.raises(TypeError, match="takes an int"):
        qgraph.seed(1.5)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        qgraph.seed(-1)
