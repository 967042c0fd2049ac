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


@qgraph.kernel(cuda_graph=True)
def stepped(u, v, n: qgraph.i32, dt: qgraph.f32, t: float):
    for i in range(n):
        v[i] = v[i] - dt * u[i]
    for i in range(u.shape[0]):
        u[i] = u[i] + dt * v[i] + t


def test_new_numbers_each_call_update_nodes_in_place(arch):
    """The new-numbers fast path (the same arrays, new annotated numbers): every call computes
    with its own numbers, loop bounds that follow a number included, and builds no graph."""
    rng = np.random.default_rng(8)
    u_np, v_np = rng.random(64).astype(np.float32), rng.random(64).astype(np.float32)
    u, v = qgraph.from_numpy(u_np), qgraph.from_numpy(v_np)
    other = qgraph.from_numpy(u_np.copy())
    calls = [(64, 0.01, 0.5), (64, 0.02, 0.25), (40, 0.02, 0.25), (64, np.float32(0.03), 1.0), (64, 0.03, 1.0),
             (64, 0.01, 0.5), (10, 0.04, -2.0)]
    mirror = {id(u): u_np, id(other): u_np.copy()}
    for step, (n, dt, t) in enumerate(calls):
        target = other if step == 4 else u  # another array between two number changes
        t_np = mirror[id(target)]
        v_np[:n] = v_np[:n] - np.float32(dt) * t_np[:n]
        t_np[:] = t_np + np.float32(dt) * v_np + np.float32(t)
        stepped(target, v, n, dt, t)
        np.testing.assert_allclose(target.to_numpy(), t_np, rtol=1e-5, err_msg=f"call {step}")
        np.testing.assert_allclose(v.to_numpy(), v_np, rtol=1e-5, err_msg=f"call {step}")
    with np.testing.assert_raises(TypeError):
        stepped(u, v, 64, "0.1", 1.0)  # not a number: the general path's error
    with np.testing.assert_raises(TypeError):
        stepped(u, v, 2.5, 0.1, 1.0)  # a float for an integer annotation
    stepped(u, v, 64, 0.0, 0.0)  # the next good call works
    np.testing.assert_allclose(u.to_numpy(), u_np, rtol=1e-5)
    if arch == "cuda":
        assert stepped.stats.builds == 1 and stepped.stats.node_updates > 0


@qgraph.kernel(cuda_graph=True)
def shaped(u, v, t: qgraph.f32, dt: qgraph.f32, n: qgraph.i32, reps: qgraph.i32):
    for i in range(n):  # n shapes the launch: a new n updates the nodes in full
        v[i] = v[i] + dt * u[i] + t
    for _ in qgraph.repeat(reps):  # so does a repeat count
        for i in range(u.shape[0]):
            u[i] = u[i] * 0.5 + t


def _shaped_numpy(u, v, t, dt, n, reps):
    t32, dt32 = np.float32(t), np.float32(dt)
    v[:n] = v[:n] + dt32 * u[:n] + t32
    for _ in range(reps):
        u[:] = u * np.float32(0.5) + t32


def test_new_numbers_in_place_next_to_numbers_that_shape_the_launch(arch):
    """A family of calls: the time alone changing (written into the bytes where it lies, found once
    per instance), with dt, with a loop bound or a repeat count (in full), on two arrays in turn:
    every call against NumPy, one graph built."""
    rng = np.random.default_rng(3)
    arrays = [(rng.random(48).astype(np.float32), rng.random(48).astype(np.float32)) for _ in range(2)]
    device = [(qgraph.from_numpy(a.copy()), qgraph.from_numpy(b.copy())) for a, b in arrays]
    calls = [(0.1, 0.01, 48, 2), (0.2, 0.01, 48, 2), (0.3, 0.01, 48, 2), (0.4, 0.02, 48, 2), (0.5, 0.02, 48, 2),
             (0.6, 0.02, 30, 2), (0.7, 0.02, 30, 2), (0.8, 0.02, 30, 3), (0.9, 0.02, 30, 3), (1.0, 0.03, 40, 1)]
    for step, numbers in enumerate(calls):
        for which in (0, 0, 1) if step % 3 == 0 else (0,):  # the same call twice, then the other arrays
            u, v = device[which]
            shaped(u, v, *numbers)
            _shaped_numpy(*arrays[which], *numbers)
            np.testing.assert_allclose(u.to_numpy(), arrays[which][0], rtol=1e-5, err_msg=f"call {step}")
            np.testing.assert_allclose(v.to_numpy(), arrays[which][1], rtol=1e-5, err_msg=f"call {step}")
    if arch == "cuda":
        assert shaped.stats.builds == 1
        u, v = device[0]
        shaped(u, v, 2.0, 0.03, 40, 1)  # the instance's nodes were set in full by the last call
        before = shaped.stats.node_updates
        shaped(u, v, 2.5, 0.03, 40, 1)  # the time alone: its bytes in the two nodes that hold it
        assert shaped.stats.node_updates - before <= 2
        _shaped_numpy(*arrays[0], 2.0, 0.03, 40, 1)
        _shaped_numpy(*arrays[0], 2.5, 0.03, 40, 1)
        np.testing.assert_allclose(u.to_numpy(), arrays[0][0], rtol=1e-5)
