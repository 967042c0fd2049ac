"""Kernel results against NumPy references, on every arch (codegen + launcher)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.kernels import (
    SCALE,
    clamp01,
    cube,
    lerp,
    mixed,
    saxpy,
    scalar_types,
    serial_range_forms,
    signed_indices,
    skip_odd,
    stencil,
    strided_range,
    with_funcs,
    zero_d,
    zero_d_in_parallel_loop,
    zero_d_to_func,
)

import qgraph


@qgraph.kernel
def copy_any(src, dst):
    for i in range(src.shape[0]):
        dst[i] = src[i]


@qgraph.kernel
def serial_loops(x, out):
    acc = 0.0
    if x.shape[0] > 0:  # nested, so a serial loop (a top-level range loop would be parallel)
        for i in range(x.shape[0]):
            acc += x[i]
    k = 0
    while k < 3:
        k += 1
    out[0] = acc * k


@qgraph.kernel
def empty_range(out, n):
    for i in range(n):
        out[i] = 5.0
    out[0] += 1.0


def test_saxpy(arch):
    rng = np.random.default_rng(1)
    x_np, y_np = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    x, y = qgraph.from_numpy(x_np), qgraph.from_numpy(y_np)
    saxpy(x, y, 2.5)
    np.testing.assert_allclose(y.to_numpy(), 2.5 * x_np + y_np, rtol=1e-6)
    assert saxpy.stats.num_tasks == 1


def test_stencil_ndrange(arch):
    u_np = np.random.default_rng(2).random((33, 47))
    u, out = qgraph.from_numpy(u_np), qgraph.ndarray(qgraph.f64, u_np.shape)
    stencil(u, out)
    ref = np.zeros_like(u_np)
    ref[1:-1, 1:-1] = 0.25 * (u_np[:-2, 1:-1] + u_np[2:, 1:-1] + u_np[1:-1, :-2] + u_np[1:-1, 2:])
    np.testing.assert_allclose(out.to_numpy(), ref, rtol=1e-12)


def test_mixed_serial_and_parallel_tasks(arch):
    assert [t.kind for t in mixed.tasks] == ["serial", "parallel", "parallel", "serial"]
    x_np = np.arange(64, dtype=np.float64)
    x, total, out = qgraph.from_numpy(x_np), qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.f64, (2,))
    mixed(x, total, out, 64)
    s = (2 * x_np).sum()
    np.testing.assert_allclose(out.to_numpy(), [s + 1.0, math.sqrt(s)])
    np.testing.assert_allclose(x.to_numpy(), 2 * x_np)
    assert mixed.stats.num_tasks == 4


@pytest.mark.parametrize("start,stop,step", [(0, 10, 1), (3, 17, 4), (15, 2, -3), (5, 5, 1), (9, 0, -1)])
def test_range_start_stop_step(arch, start, stop, step):
    out = qgraph.ndarray(qgraph.i64, (20,))
    strided_range(out, start, stop, step)
    ref = np.zeros(20, np.int64)
    for i in range(start, stop, step):
        ref[i] = i + 100
    np.testing.assert_array_equal(out.to_numpy(), ref)


def test_funcs_calling_funcs_and_globals(arch):
    rng = np.random.default_rng(3)
    a, b, t = (rng.random(100) for _ in range(3))
    t = t * 1.4 - 0.2
    out = qgraph.ndarray(qgraph.f64, (100,))
    with_funcs(qgraph.from_numpy(a), qgraph.from_numpy(b), qgraph.from_numpy(t), out)
    np.testing.assert_allclose(out.to_numpy(), (a + (b - a) * np.clip(t, 0, 1)) * SCALE)


def test_func_is_callable_from_python():
    assert lerp(0.0, 10.0, 0.5) == 5.0
    assert clamp01(7.0) == 1.0


def test_three_dimensional_ndrange(arch):
    out = qgraph.ndarray(qgraph.i32, (4, 5, 6))
    cube(out)
    i, j, k = np.indices((4, 5, 6))
    np.testing.assert_array_equal(out.to_numpy(), i * 100 + j * 10 + k)


def test_continue_skips_one_iteration(arch):
    out = qgraph.ndarray(qgraph.i32, (11,))
    skip_odd(out)
    np.testing.assert_array_equal(out.to_numpy(), [1, 0] * 5 + [1])


def test_int32_then_float64_gives_two_specialisations(arch):
    before = copy_any.stats.specialisations
    a = qgraph.from_numpy(np.arange(10, dtype=np.int32))
    b = qgraph.ndarray(qgraph.i32, (10,))
    copy_any(a, b)
    c = qgraph.from_numpy(np.linspace(0, 1, 7))
    d = qgraph.ndarray(qgraph.f64, (7,))
    copy_any(c, d)
    np.testing.assert_array_equal(b.to_numpy(), np.arange(10, dtype=np.int32))
    np.testing.assert_array_equal(d.to_numpy(), np.linspace(0, 1, 7))
    assert copy_any.stats.specialisations == before + 2


@pytest.mark.parametrize("sizes", [(256, 1024, 64), (4096, 16, 1000)])
def test_shapes_change_between_calls(arch, sizes):
    for n in sizes:
        src_np = np.arange(n, dtype=np.float32) + n
        src, dst = qgraph.from_numpy(src_np), qgraph.ndarray(qgraph.f32, (n,))
        dst.fill(-1.0)
        copy_any(src, dst)
        np.testing.assert_array_equal(dst.to_numpy(), src_np)


def test_serial_task_with_nested_loops(arch):
    x = qgraph.from_numpy(np.arange(10, dtype=np.float64))
    out = qgraph.ndarray(qgraph.f64, (1,))
    serial_loops(x, out)
    assert out.to_numpy()[0] == 45.0 * 3
    assert serial_loops.stats.num_tasks == 1


def test_scalar_types(arch):
    out = qgraph.ndarray(qgraph.f64, (2,))
    scalar_types(out, 2, 0.5, True)
    np.testing.assert_array_equal(out.to_numpy(), [2.5, 1.0])
    out2 = qgraph.ndarray(qgraph.f64, (2,))
    scalar_types(out2, np.int32(3), np.float32(0.25), False)
    np.testing.assert_array_equal(out2.to_numpy(), [3.25, 0.0])


def test_zero_d_arrays(arch):
    x = qgraph.from_numpy(np.array(21, dtype=np.int64))
    y = qgraph.ndarray(qgraph.i64, ())
    zero_d(x, y)
    assert y.shape == () and y.to_numpy() == 42


def test_numpy_arrays_are_arguments_on_cpu(cpu):
    x, y = np.ones(5, np.float32), np.zeros(5, np.float32)
    saxpy(x, y, 2.0)
    np.testing.assert_array_equal(y, 2.0)


def test_strided_numpy_view_on_cpu(cpu):
    src = np.arange(20, dtype=np.float64)[::2]
    dst = np.zeros(10)
    copy_any(src, dst)
    np.testing.assert_array_equal(dst, src)


def test_empty_parallel_loop(arch):
    out = qgraph.ndarray(qgraph.f64, (3,))
    empty_range(out, 0)
    np.testing.assert_array_equal(out.to_numpy(), [1.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.float64, np.int32, np.uint8])
def test_dtypes(arch, dtype):
    src_np = (np.arange(50) % 7).astype(dtype)
    src, dst = qgraph.from_numpy(src_np), qgraph.ndarray(dtype, (50,))
    copy_any(src, dst)
    np.testing.assert_array_equal(dst.to_numpy(), src_np)


@qgraph.kernel(cuda_graph=True)
def nothing(x):
    """A kernel whose body is only a docstring: no tasks, calls are no-ops."""


def test_kernel_without_tasks(arch):
    x = qgraph.ndarray(qgraph.f32, (3,))
    nothing(x)
    nothing(x)
    assert nothing.stats.num_tasks == 0
    np.testing.assert_array_equal(x.to_numpy(), 0.0)


def test_calls_from_another_thread(arch):
    import threading

    x = qgraph.from_numpy(np.zeros(100))
    errors = []

    def worker():
        try:
            for _ in range(3):
                skip_odd_float(x)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert not errors, errors
    np.testing.assert_array_equal(x.to_numpy()[:4], [3.0, 0.0, 3.0, 0.0])


@qgraph.kernel(cuda_graph=True)
def skip_odd_float(out):
    for i in range(out.shape[0]):
        if i % 2 == 1:
            continue
        out[i] += 1.0


def test_zero_d_arrays_inside_parallel_loops(arch):
    total, scale = qgraph.ndarray(qgraph.i64, ()), qgraph.from_numpy(np.array(2.5))
    out = qgraph.ndarray(qgraph.f64, (10,))
    zero_d_in_parallel_loop(total, scale, out)
    np.testing.assert_array_equal(out.to_numpy(), 2.5 * np.arange(10))
    assert total.to_numpy() == 10


def test_zero_d_array_passed_to_a_func_in_a_serial_task(arch):
    out = qgraph.ndarray(qgraph.f64, (1,))
    zero_d_to_func(qgraph.from_numpy(np.array(1.25)), out)
    assert out.to_numpy()[0] == 2.5


def test_loop_variables_are_signed_integers(arch):
    """`min(i, 3)`, `i - 5` behave as in Python: loop variables are signed int64 on both backends."""
    a = np.arange(8, dtype=np.float32) + 0.5
    out, grid = qgraph.from_numpy(np.zeros(8, np.float32)), qgraph.from_numpy(np.zeros((4, 5)))
    signed_indices(qgraph.from_numpy(a), out, grid)
    i = np.arange(8)
    np.testing.assert_array_equal(out.to_numpy(), a[np.minimum(i, 3)] + (i - 5))
    ii, jj = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    np.testing.assert_array_equal(grid.to_numpy(), np.maximum(ii - jj, -1) * 10 + a[np.maximum(jj - 1, 0)])


def test_serial_range_loops_keep_python_semantics(arch):
    n = 9
    out = qgraph.ndarray(qgraph.i64, (n,))
    serial_range_forms(out, -4, 11, 3)
    base = sum(j for j in range(-4, 11) if j % 3) + sum(1000 * j for j in range(11, -4, -2)) + 7 * len(range(0, 11, 3))
    expected = [base + 100000 * (i - 1 if i else -1) for i in range(n)]
    assert out.to_numpy().tolist() == expected
