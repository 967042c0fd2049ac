"""`for i in qgraph.serial(range(n)):` at the top level of a kernel runs in one thread (a serial
task), so a prefix sum or a recurrence written at top level is right on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph


@qgraph.kernel
def prefix_sum(x, out):
    for i in qgraph.serial(range(x.shape[0])):
        out[i] = x[i] if i == 0 else out[i - 1] + x[i]


@qgraph.kernel
def scaled_prefix(x, out, a):
    for i in range(x.shape[0]):  # parallel
        out[i] = a * x[i]
    for i in qgraph.serial(range(1, x.shape[0])):  # serial, after the parallel task
        out[i] += out[i - 1]
    for i in range(x.shape[0]):  # parallel, with a serial inner loop marked the same way
        for _k in qgraph.serial(range(2)):
            out[i] += 1


@qgraph.kernel
def misuse(x):
    for i in range(x.shape[0]):
        x[i] = len(qgraph.serial(range(3)))


def test_a_top_level_serial_loop_is_one_task_run_in_order(arch):
    x_np = np.random.default_rng(0).integers(0, 100, 100_000).astype(np.int64)
    x, out = qgraph.from_numpy(x_np), qgraph.ndarray(qgraph.i64, (100_000,))
    prefix_sum(x, out)
    np.testing.assert_array_equal(out.to_numpy(), np.cumsum(x_np))
    assert [t.parallel for t in prefix_sum.tasks] == [False]


def test_serial_loops_between_parallel_tasks(arch):
    x_np = np.random.default_rng(1).random(5000)
    x, out = qgraph.from_numpy(x_np), qgraph.ndarray(qgraph.f64, (5000,))
    scaled_prefix(x, out, 0.5)
    np.testing.assert_allclose(out.to_numpy(), np.cumsum(0.5 * x_np) + 2, rtol=1e-12)
    assert [t.parallel for t in scaled_prefix.tasks] == [True, False, True]


def test_qgraph_serial_elsewhere_is_a_clear_error(arch):
    with pytest.raises(qgraph.QgraphSyntaxError, match="qgraph.serial is only allowed as the iterator of a for loop"):
        misuse(qgraph.ndarray(qgraph.i64, (4,)))


def test_qgraph_serial_takes_one_iterable():
    with pytest.raises(qgraph.QgraphSyntaxError, match="qgraph.serial takes one iterable"):
        @qgraph.kernel
        def two(x):
            for i in qgraph.serial(range(3), range(4)):
                x[i] = 0


def test_plain_python_runs_the_loop_too():
    x, out = np.arange(5), np.zeros(5, dtype=np.int64)
    prefix_sum.__wrapped__(x, out)
    assert out.tolist() == [0, 1, 3, 6, 10]
