"""Reductions and scatters in parallel loops: `+=` and the atomics, checked against NumPy.

A loop-invariant target is a reduction (partials per thread, combined per block), an index
made of the loop variables is thread-private, anything else is an atomic scatter.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.reduction_kernels import (
    dot,
    graph_largest_0d,
    grid_total,
    histogram,
    largest,
    largest_change,
    positive_sum_and_max,
    private_updates,
    smallest,
    strided_sum,
    total,
    total_minus,
)

import qgraph

pytestmark = pytest.mark.usefixtures("all_numba_threads")  # parallel execution on every thread


@qgraph.kernel
def row_sums(a, out):
    for i, j in qgraph.ndrange(a.shape[0], a.shape[1]):
        out[i] += a[i, j]


SIZES = [0, 1, 31, 32, 33, 1000, 2**20 + 7, 2**26]
DTYPES = [np.int32, np.int64, np.uint32, np.uint64, np.float32, np.float64]


def _data(n, dtype, seed):
    """Drawn in `dtype` itself: drawing 64-bit values and converting them took 0.6-1.4 s of each 2^26 case."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return rng.integers(-100, 100, n, dtype=dtype)
    if np.dtype(dtype).kind == "u":
        return rng.integers(0, 200, n, dtype=dtype)
    x = rng.random(n, dtype=dtype)
    x += np.asarray(0.5, dtype)  # never zero
    return x


def _close(got, want, dtype):
    if np.dtype(dtype).kind in "iu":  # the target wraps around like any integer of its width
        assert got == np.asarray(want).astype(dtype)
    else:
        rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_sum(arch, n, dtype):
    x = _data(n, dtype, n)
    wide = x.astype(np.float64) if np.dtype(dtype).kind == "f" else x
    start = np.array([7], dtype)
    out, xs = qgraph.from_numpy(start), qgraph.from_numpy(x)
    total(xs, out)
    _close(out.to_numpy()[0], 7 + wide.sum(), dtype)
    total_minus(xs, out)  # `-=` reduces too
    if np.dtype(dtype).kind in "iu":
        assert out.to_numpy()[0] == 7
    else:
        np.testing.assert_allclose(out.to_numpy()[0], 7, atol=1e-5 * max(1.0, wide.sum()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_min_and_max(arch, n, dtype):
    x = _data(n, dtype, n + 1)
    lo, hi = qgraph.from_numpy(np.array([150], dtype)), qgraph.from_numpy(np.array([1], dtype))
    xs = qgraph.from_numpy(x)
    smallest(xs, lo)
    largest(xs, hi)
    assert lo.to_numpy()[0] == (min(dtype(150), x.min()) if n else 150)
    assert hi.to_numpy()[0] == (max(dtype(1), x.max()) if n else 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("n", [33, 2**20 + 7, 2**26])
def test_dot_into_a_0d_array(arch, n, dtype):
    x, y = _data(n, dtype, 1), _data(n, dtype, 2)
    out = qgraph.from_numpy(np.array(3, dtype))
    dot(qgraph.from_numpy(x), qgraph.from_numpy(y), out)
    _close(out.to_numpy()[()], 3 + (x.astype(np.float64) * y).sum() if dtype != np.int64 else 3 + (x * y).sum(),
           dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_max_into_a_0d_array(arch, dtype):
    new, old = _data(100_000, dtype, 5), _data(100_000, dtype, 6)
    err = qgraph.from_numpy(np.array(-1, dtype))
    largest_change(qgraph.from_numpy(new), qgraph.from_numpy(old), err)
    assert err.to_numpy()[()] == np.abs(new - old).max()


def test_float32_sum_of_2_26_values_is_accurate(arch):
    x = np.random.default_rng(26).random(2**26, dtype=np.float32)
    out = qgraph.ndarray(qgraph.f32, (1,))
    total(qgraph.from_numpy(x), out)
    reference = x.astype(np.float64).sum()
    assert abs(out.to_numpy()[0] - reference) / reference < 1e-5  # one float32 accumulator would be off by 50%


def test_two_reductions_inside_a_branch(arch):
    x = np.random.default_rng(3).standard_normal(100_003)
    s, m = qgraph.from_numpy(np.zeros(1)), qgraph.from_numpy(np.full(1, -np.inf))
    positive_sum_and_max(qgraph.from_numpy(x), s, m)
    np.testing.assert_allclose(s.to_numpy()[0], x[x > 0].sum(), rtol=1e-12)
    assert m.to_numpy()[0] == x.max()


def test_two_dimensional_reduction_with_a_scalar_index(arch):
    a = np.random.default_rng(4).random((301, 257))
    out = qgraph.from_numpy(np.zeros(3))
    grid_total(qgraph.from_numpy(a), out, 2)
    np.testing.assert_allclose(out.to_numpy(), [0, 0, a.sum()], rtol=1e-12)


def test_a_row_index_inside_a_2d_loop_is_an_atomic_scatter(arch):
    a = np.random.default_rng(5).integers(0, 9, (64, 1000)).astype(np.float64)
    out = qgraph.from_numpy(np.zeros(64))
    row_sums(qgraph.from_numpy(a), out)
    np.testing.assert_array_equal(out.to_numpy(), a.sum(axis=1))


def test_histogram_is_exact_under_heavy_contention(arch):
    rng = np.random.default_rng(6)
    idx = rng.integers(0, 4, 1_000_000)
    w = rng.integers(1, 5, 1_000_000).astype(np.float64)  # integers: every ordering sums exactly
    h = qgraph.from_numpy(np.zeros(4))
    histogram(qgraph.from_numpy(idx), qgraph.from_numpy(w), h)
    np.testing.assert_array_equal(h.to_numpy(), np.bincount(idx, w, 4))


def test_thread_private_updates_stay_plain(arch):
    x, y = np.arange(10.0), np.full(10, 2.0)
    xq = qgraph.from_numpy(x)
    private_updates(xq, qgraph.from_numpy(y))
    np.testing.assert_array_equal(xq.to_numpy(), x + 3)


def test_continue_and_steps_in_a_reduction_loop(arch):
    x = np.random.default_rng(7).random(100_000)
    out = qgraph.from_numpy(np.zeros(1))
    strided_sum(qgraph.from_numpy(x), out, 7)
    idx = [i for i in range(1, 100_000, 7) if i % 3 != 0]
    np.testing.assert_allclose(out.to_numpy()[0], x[idx].sum(), rtol=1e-12)


@pytest.mark.parametrize("op", ["*=", "/=", "//=", "%="])
def test_non_atomic_updates_of_shared_elements_are_rejected(op, tmp_path):
    source = f"def bad(x, out):\n    for i in range(x.shape[0]):\n        out[0] {op} x[i]\n"
    path = tmp_path / "bad_update.py"
    path.write_text(source)
    namespace = {"qgraph": qgraph}
    exec(compile(source, str(path), "exec"), namespace)
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"has no atomic form") as info:
        qgraph.kernel(namespace["bad"])
    assert info.value.lineno == 3


# ---------------------------------------------------------------- in graphs and device loops


@qgraph.kernel(cuda_graph=True)
def graph_sum(x, out):
    out[0] = 0.0
    for i in range(x.shape[0]):
        out[0] += x[i] * x[i]


@qgraph.kernel(graph_while="flag")
def sum_until(x, acc, flag, passes):
    for i in range(x.shape[0]):
        acc[0] += x[i]
    passes[0] += 1
    flag[0] = 1 if passes[0] < 4 else 0


def test_reductions_in_a_graph_with_the_target_swapped(arch):
    x = np.random.default_rng(8).random(50_001)
    xq = qgraph.from_numpy(x)
    outs = [qgraph.from_numpy(np.full(1, 5.0)) for _ in range(3)]
    for out in outs + outs:
        graph_sum(xq, out)
    for out in outs:
        np.testing.assert_allclose(out.to_numpy()[0], (x * x).sum(), rtol=1e-12)
    if arch == "cuda":
        assert graph_sum.stats.builds == 1 and graph_sum.stats.used_graph


def test_a_0d_target_in_a_graph_swapped_between_calls(arch):
    x = np.random.default_rng(10).random(20_011) * 4
    xq = qgraph.from_numpy(x)
    errs = [qgraph.from_numpy(np.array(5.0)) for _ in range(3)]
    counts = [qgraph.from_numpy(np.array(7, np.int32)) for _ in range(3)]
    slot = qgraph.ndarray(qgraph.i32, (x.shape[0],))
    for err, count in zip(errs + errs, counts + counts):
        graph_largest_0d(xq, err, count, slot)
    for err, count in zip(errs, counts):
        assert err.to_numpy()[()] == x.max() and count.to_numpy()[()] == x.shape[0]
    np.testing.assert_array_equal(np.sort(slot.to_numpy()), np.arange(x.shape[0]))
    if arch == "cuda":
        assert graph_largest_0d.stats.builds == 1 and graph_largest_0d.stats.used_graph


def test_reductions_inside_graph_while_with_swapped_targets(arch):
    x = np.random.default_rng(9).random(10_007)
    xq = qgraph.from_numpy(x)
    for _ in range(3):
        acc = qgraph.from_numpy(np.zeros(1))
        flag = qgraph.ndarray(qgraph.i32, (1,))
        passes = qgraph.from_numpy(np.zeros(1, np.int64))
        sum_until(xq, acc, flag, passes)
        assert passes.to_numpy()[0] == 4
        np.testing.assert_allclose(acc.to_numpy()[0], 4 * x.sum(), rtol=1e-12)
    if arch == "cuda":
        assert sum_until.stats.builds == 1


def test_narrow_integer_reductions_say_why_on_cuda(cuda):
    out = qgraph.from_numpy(np.zeros(1, np.int16))
    with pytest.raises(qgraph.QgraphSyntaxError, match="atomics for 32- and 64-bit"):
        total(qgraph.from_numpy(np.ones(10, np.int16)), out)
    total(qgraph.from_numpy(np.ones(10, np.int32)), qgraph.from_numpy(np.zeros(1, np.int32)))  # the next call works


# ---------------------------------------------------------------- deterministic mode


@qgraph.kernel(deterministic=True, cuda_graph=True)
def det_sum_and_max(x, s, m):
    s[0] = 0.0
    for i in range(x.shape[0]):
        s[0] += x[i]
        qgraph.atomic_max(m, 0, x[i])


@qgraph.kernel(deterministic=True)
def det_histogram(idx, w, h):
    for i in range(idx.shape[0]):
        h[idx[i]] += w[i]


def test_deterministic_reductions_are_bit_identical(arch):
    x = np.random.default_rng(10).standard_normal(3_000_017).astype(np.float32)
    xq = qgraph.from_numpy(x)
    sums, maxes = set(), set()
    for _ in range(5):
        s, m = qgraph.ndarray(qgraph.f32, (1,)), qgraph.from_numpy(np.full(1, -np.inf, np.float32))
        det_sum_and_max(xq, s, m)
        sums.add(s.to_numpy().tobytes())
        maxes.add(m.to_numpy()[0])
    assert len(sums) == 1 and maxes == {x.max()}
    got = np.frombuffer(sums.pop(), np.float32)[0]
    assert abs(got - x.astype(np.float64).sum()) <= 1e-5 * np.abs(x).sum()


def test_deterministic_mode_rejects_float_scatters(arch):
    idx = qgraph.from_numpy(np.arange(100) % 7)
    with pytest.raises(qgraph.QgraphSyntaxError, match="deterministic mode: 'h'"):
        det_histogram(idx, qgraph.from_numpy(np.ones(100)), qgraph.from_numpy(np.zeros(7)))
    h = qgraph.from_numpy(np.zeros(7, np.int64))  # an integer scatter is exact in any order
    det_histogram(idx, qgraph.from_numpy(np.ones(100, np.int64)), h)
    np.testing.assert_array_equal(h.to_numpy(), np.bincount(np.arange(100) % 7))


def test_qgraph_deterministic_environment(arch, monkeypatch):
    monkeypatch.setenv("QGRAPH_DETERMINISTIC", "1")
    qgraph.init(arch)
    try:
        with pytest.raises(qgraph.QgraphSyntaxError, match="deterministic mode"):
            histogram(qgraph.from_numpy(np.arange(10) % 3), qgraph.from_numpy(np.ones(10)),
                      qgraph.from_numpy(np.zeros(3)))
    finally:
        monkeypatch.delenv("QGRAPH_DETERMINISTIC")
        qgraph.init(arch)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_min_and_max_over_signs_zeros_and_infinities(arch, dtype):
    rng = np.random.default_rng(11)
    for values, starts in [(rng.standard_normal(100_003), (np.inf, -np.inf)),
                           (-rng.random(50_000) - 1, (0.0, 0.0)),  # all negative, target +0.0
                           (np.array([-0.0, -0.0]), (np.inf, -np.inf)),
                           (np.array([-np.inf, 3.0, -2.0]), (1.0, -5.0))]:
        x = values.astype(dtype)
        lo, hi = qgraph.from_numpy(np.array([starts[0]], dtype)), qgraph.from_numpy(np.array([starts[1]], dtype))
        smallest(qgraph.from_numpy(x), lo)
        largest(qgraph.from_numpy(x), hi)
        assert lo.to_numpy()[0] == min(dtype(starts[0]), x.min())
        assert hi.to_numpy()[0] == max(dtype(starts[1]), x.max())


def test_deterministic_option_is_checked():
    with pytest.raises(TypeError, match="deterministic must be True, False or None"):
        qgraph.kernel(deterministic="yes")


@qgraph.kernel
def two_updates_of_one_total(x, total):
    for i in range(x.shape[0]):
        total[0] += x[i] * 2.0
        if x[i] > 0.5:
            total[0] += x[i]


def test_two_updates_of_one_reduction_in_an_iteration(arch):
    x0 = np.linspace(0.0, 1.0, 1000)
    x, total = qgraph.from_numpy(x0), qgraph.ndarray(qgraph.f64, (1,))
    two_updates_of_one_total(x, total)
    np.testing.assert_allclose(total.to_numpy(), [2 * x0.sum() + x0[x0 > 0.5].sum()], rtol=1e-12)
