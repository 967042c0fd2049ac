"""The CUDA call path's same-arguments fast path (backends/cuda_call.py): a call with the last
call's very objects replays the last graph instance at once; every other call must still see
its own arguments, whatever the fast path remembered. Values against NumPy on both archs."""

from __future__ import annotations

import numpy as np

import qgraph


@qgraph.kernel(cuda_graph=True)
def axpb(y, x, a: qgraph.f32, b):
    for i in range(y.shape[0]):
        y[i] = a * x[i] + b


@qgraph.kernel(cuda_graph=True, graph_cache_size=1)
def one_graph(y, x, a: float):
    for i in range(y.shape[0]):
        y[i] = a * x[i]


@qgraph.struct
class Pair:
    y: object
    x: object


@qgraph.kernel(cuda_graph=True)
def pair_copy(p: Pair, a: float):
    for i in range(p.y.shape[0]):
        p.y[i] = a * p.x[i]


def test_repeated_and_changed_arguments(arch):
    rng = np.random.default_rng(3)
    xs = [rng.random(300).astype(np.float32) for _ in range(3)]
    x = [qgraph.from_numpy(v) for v in xs]
    y = qgraph.ndarray(np.float32, 300)
    a, b = np.float32(2.0), 0.5
    replays = axpb.stats.replays
    for _ in range(5):
        axpb(y, x[0], a, b)
    np.testing.assert_allclose(y.to_numpy(), 2 * xs[0] + 0.5, rtol=1e-6)
    if arch == "cuda":
        assert axpb.stats.replays - replays == 5
    # every argument changed in turn, then the first set again: each call sees its own
    for xi, ai, bi, expect in ((x[1], a, b, 2 * xs[1] + 0.5), (x[1], np.float32(3.0), b, 3 * xs[1] + 0.5),
                               (x[1], np.float32(3.0), 1.5, 3 * xs[1] + 1.5), (x[0], a, b, 2 * xs[0] + 0.5),
                               (x[0], a, 7, 2 * xs[0] + 7)):
        axpb(y, xi, ai, bi)
        np.testing.assert_allclose(y.to_numpy(), expect, rtol=1e-6)
    x[0].from_numpy(xs[2])  # new contents behind the same array
    axpb(y, x[0], a, 7)
    np.testing.assert_allclose(y.to_numpy(), 2 * xs[2] + 7, rtol=1e-6)


def test_alternating_sets_and_an_evicted_graph(arch):
    xs = np.arange(64, dtype=np.float64)
    x1, x2 = qgraph.from_numpy(xs), qgraph.from_numpy(2 * xs)
    y1, y2 = qgraph.ndarray(np.float64, 64), qgraph.ndarray(np.float64, 64)
    for k in range(6):
        one_graph(y1, x1, 1.0 + k)
        one_graph(y2, x2, 1.0 + k)
        np.testing.assert_array_equal(y1.to_numpy(), (1.0 + k) * xs)
        np.testing.assert_array_equal(y2.to_numpy(), (1.0 + k) * 2 * xs)
    # another signature evicts the only cached graph; the remembered instance must not run
    xf, yf = qgraph.from_numpy(xs.astype(np.float32)), qgraph.ndarray(np.float32, 64)
    one_graph(y1, x1, 3.0)
    one_graph(yf, xf, 3.0)
    one_graph(y1, x1, 3.0)
    one_graph(y1, x1, 3.0)
    np.testing.assert_array_equal(y1.to_numpy(), 3.0 * xs)
    np.testing.assert_array_equal(yf.to_numpy(), 3.0 * xs.astype(np.float32))


def test_a_struct_field_reassigned_behind_the_same_object(arch):
    xs = np.arange(32, dtype=np.float64)
    p = Pair(qgraph.ndarray(np.float64, 32), qgraph.from_numpy(xs))
    a = 2.0
    pair_copy(p, a)
    pair_copy(p, a)
    p.x = qgraph.from_numpy(10 * xs)
    pair_copy(p, a)
    np.testing.assert_array_equal(p.y.to_numpy(), 20 * xs)


def test_after_reset_the_same_arguments_run_again(arch):
    xs = np.ones(16, np.float32)
    x, y = qgraph.from_numpy(xs), qgraph.ndarray(np.float32, 16)
    axpb(y, x, np.float32(1.0), 1)
    qgraph.reset()
    axpb(y, x, np.float32(1.0), 2)
    axpb(y, x, np.float32(1.0), 2)
    np.testing.assert_array_equal(y.to_numpy(), 3.0)
