"""qgraph.atomic_* are real atomics under contention, on every arch (cpu_atomics + CUDA)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.atomic_kernels import extremes, grid_counts, histogram

import qgraph

pytestmark = pytest.mark.usefixtures("all_numba_threads")  # parallel execution on every thread


@qgraph.kernel
def total(values, out):
    for i in range(values.shape[0]):
        qgraph.atomic_add(out, 0, values[i])


@qgraph.kernel
def compact(values, counter, out):
    for i in range(values.shape[0]):
        if values[i] % 3 == 0:
            slot = qgraph.atomic_add(counter, 0, 1)
            out[slot] = values[i]


def test_histogram_under_heavy_contention(arch):
    values_np = np.arange(1_000_003, dtype=np.int64)
    bins = qgraph.ndarray(qgraph.i64, (4,))
    histogram(qgraph.from_numpy(values_np), bins)
    np.testing.assert_array_equal(bins.to_numpy(), np.bincount(values_np % 4))


def test_integer_sum_is_exact(arch):
    values_np = np.random.default_rng(0).integers(0, 1000, 500_000, dtype=np.int64)
    out = qgraph.ndarray(qgraph.i64, (1,))
    total(qgraph.from_numpy(values_np), out)
    assert out.to_numpy()[0] == values_np.sum()


def test_float_sum_of_integers_is_exact(arch):
    values_np = np.random.default_rng(1).integers(0, 100, 200_000).astype(np.float64)
    out = qgraph.ndarray(qgraph.f64, (1,))
    total(qgraph.from_numpy(values_np), out)
    assert out.to_numpy()[0] == values_np.sum()


def test_min_max_sub(arch):
    values_np = np.random.default_rng(2).integers(-10**6, 10**6, 300_000, dtype=np.int32)
    lo = qgraph.from_numpy(np.array([2**31 - 1], np.int32))
    hi = qgraph.from_numpy(np.array([-2**31], np.int32))
    count = qgraph.from_numpy(np.array([300_000], np.int32))
    extremes(qgraph.from_numpy(values_np), lo, hi, count)
    assert lo.to_numpy()[0] == values_np.min()
    assert hi.to_numpy()[0] == values_np.max()
    assert count.to_numpy()[0] == 0


def test_atomic_returns_the_old_value(arch):
    values_np = np.arange(30_000, dtype=np.int32)
    counter = qgraph.ndarray(qgraph.i32, (1,))
    out = qgraph.ndarray(qgraph.i32, (30_000,))
    out.fill(-1)
    compact(qgraph.from_numpy(values_np), counter, out)
    n = counter.to_numpy()[0]
    assert n == 10_000
    got = out.to_numpy()
    np.testing.assert_array_equal(np.sort(got[:n]), values_np[values_np % 3 == 0])
    assert (got[n:] == -1).all()


def test_tuple_index_on_2d_array(arch):
    out = qgraph.ndarray(qgraph.i64, (2, 3))
    grid_counts(out, 60_000)
    np.testing.assert_array_equal(out.to_numpy(), np.full((2, 3), 10_000))


def test_atomics_run_serially_from_python():
    a = np.zeros(3, np.int64)
    assert qgraph.atomic_add(a, 1, 5) == 0
    assert qgraph.atomic_max(a, 1, 2) == 5
    assert qgraph.atomic_sub(a, 1, 1) == 5
    assert qgraph.atomic_min(a, 1, -7) == 4
    assert a[1] == -7


@qgraph.kernel
def one_index_into_2d(x, out):
    for i in range(x.shape[0]):
        qgraph.atomic_add(out, i, x[i])


@qgraph.kernel
def index_into_0d(x, out):
    for i in range(x.shape[0]):
        qgraph.atomic_max(out, 0, x[i])


@qgraph.kernel
def tuple_index_into_1d(x, out):
    for i in range(x.shape[0]):
        qgraph.atomic_min(out, (0, 1), x[i])


@pytest.mark.parametrize("kernel, shape, message", [
    (one_index_into_2d, (4, 2), r"qgraph.atomic_add: 1 index for out, a 2-d array; an atomic updates one element.*"
                                r"a tuple of 2, e.g. \(i, j\)"),
    (index_into_0d, (), r"1 index for out, a 0-d array.*\(\) for a 0-d array"),
    (tuple_index_into_1d, (4,), r"2 indices for out, a 1-d array.*one integer, e.g. i"),
])
def test_an_atomic_index_names_one_element(arch, kernel, shape, message):
    """Not a row updated as a whole (or numba's words about another construct): the line and the fix."""
    x = qgraph.from_numpy(np.ones(4, np.float32))
    with pytest.raises(qgraph.QgraphSyntaxError, match=message) as info:
        kernel(x, qgraph.ndarray(qgraph.f32, shape))
    assert info.value.lineno is not None and "test_atomics.py" in str(info.value)
    total(x, out := qgraph.ndarray(qgraph.f32, (1,)))  # nothing half-built: other kernels still run
    assert out.to_numpy()[0] == 4
