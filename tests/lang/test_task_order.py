"""A serial task right after a parallel one sees every iteration's writes and reductions, runs
when the loop is empty, and keeps its locals apart from the loop's."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph


@qgraph.kernel(cuda_graph=True)
def scale_then_check(x, y, total, first_last, n: int):
    for i in range(n):
        y[i] = 2.0 * x[i]
        total[0] += y[i]
    first_last[0] = y[0] if n > 0 else -1.0
    first_last[1] = y[n - 1] if n > 0 else -1.0
    first_last[2] = total[0]


@qgraph.kernel
def clashing_locals(x, out):
    for i in range(x.shape[0]):
        t = x[i] * 2.0
        x[i] = t
    t = 0  # an int here, a float in the loop above
    i = 0
    while i < 3:
        t += i
        i += 1
    out[0] = t + x[0]


@qgraph.kernel(graph_while="flag")
def sweeps(x, count, flag):
    for i in range(x.shape[0]):
        x[i] += 1.0
    count[0] += 1
    flag[0] = 1 if count[0] < 5 else 0


@pytest.mark.parametrize("n", [0, 1, 257, 3_000_017])
def test_the_tail_sees_every_write_and_reduction(arch, n):
    x = np.random.default_rng(n).random(max(n, 1))
    y, total = qgraph.ndarray(qgraph.f64, (max(n, 1),)), qgraph.from_numpy(np.zeros(1))
    fl = qgraph.ndarray(qgraph.f64, (3,))
    scale_then_check(qgraph.from_numpy(x), y, total, fl, n)
    got = fl.to_numpy()
    if n == 0:
        np.testing.assert_array_equal(got, [-1.0, -1.0, 0.0])  # the serial task ran though the loop did not
    else:
        np.testing.assert_allclose(got, [2 * x[0], 2 * x[n - 1], 2 * x[:n].sum()], rtol=1e-12)
    if arch == "cuda":
        assert scale_then_check.stats.graph_nodes == 2 and scale_then_check.stats.num_tasks == 2


def test_tail_locals_do_not_clash_with_the_loop(arch):
    x, out = qgraph.from_numpy(np.array([1.5, 2.0, 3.0])), qgraph.from_numpy(np.zeros(1))
    clashing_locals(x, out)
    assert out.to_numpy()[0] == 3 + 3.0


def test_tails_inside_a_device_loop(arch):
    x, count, flag = qgraph.from_numpy(np.zeros(100_000)), qgraph.from_numpy(np.zeros(1, np.int64)), \
        qgraph.ndarray(qgraph.i32, (1,))
    sweeps(x, count, flag)
    assert count.to_numpy()[0] == 5
    np.testing.assert_array_equal(x.to_numpy(), np.full(100_000, 5.0))
