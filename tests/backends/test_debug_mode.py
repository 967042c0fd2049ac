"""Debug mode (issue 16): bounds-checked specialisations report an index out of bounds as an
IndexError naming the kernel, line, array, index and shape, after which the next call works;
QGRAPH_DEBUG=nan reports the first non-finite store; an exception raised inside a CPU task
keeps its type and names the task. Same tests on the CPU and on CUDA where the behaviour is
shared."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import qgraph
from qgraph.runtime.settings import Settings


def _line(fn, text: str) -> int:
    """The file line of the first line of `fn`'s source containing `text`."""
    lines, first = inspect.getsourcelines(getattr(fn, "__wrapped__", fn))
    return first + next(k for k, line in enumerate(lines) if text in line)


@qgraph.kernel(debug=True)
def axpy(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] += a * x[i]


@qgraph.kernel(debug=True)
def serial_copy(src, dst):
    for i in qgraph.serial(range(dst.shape[0])):
        dst[i] = src[i]


@qgraph.kernel(debug=True)
def stencil(u, out):
    for i, j in qgraph.ndrange(u.shape[0], u.shape[1]):
        out[i, j] = u[i, j + 1] - u[i, j]


@qgraph.kernel(debug=True, cuda_graph=True)
def two_tasks(x, y):
    for i in range(x.shape[0]):
        x[i] = 2.0 * x[i]
    for i in range(x.shape[0]):
        y[i - 1] = x[i]


@qgraph.kernel(debug=True, graph_while="flag")
def looping(x, offset, steps, flag):
    for i in range(x.shape[0]):
        x[i + offset[0]] += 1.0
    steps[0] += 1
    flag[0] = 1 if steps[0] < 3 else 0


@qgraph.kernel(debug=True)
def gather(x, idx, out):
    for i in range(idx.shape[0]):
        out[i] = x[idx[i]]


def test_an_out_of_bounds_write_in_a_parallel_task_is_an_index_error(arch):
    x, y = qgraph.from_numpy(np.ones(10)), qgraph.from_numpy(np.zeros(6))
    with pytest.raises(IndexError) as info:
        axpy(x, y, 2.0)
    text = str(info.value)
    assert f"kernel axpy, line {_line(axpy, 'y[i] += a')}" in text
    assert "is out of bounds for axis 0 of 'y' with shape (6,)" in text
    assert "y[i] += a * x[i]" in text  # the source line
    index = int(text.split("index ")[1].split()[0])
    assert 6 <= index < 10
    # the failing accesses were redirected into the array (element 0): nothing past its end was
    # touched, and the next good call works
    np.testing.assert_array_equal(y.to_numpy()[1:], 2.0)
    y2 = qgraph.from_numpy(np.zeros(10))
    axpy(x, y2, 3.0)
    np.testing.assert_array_equal(y2.to_numpy(), 3.0)


def test_an_out_of_bounds_read_in_a_serial_task(arch):
    src, dst = qgraph.from_numpy(np.arange(5.0)), qgraph.from_numpy(np.zeros(8))
    with pytest.raises(IndexError, match=r"index 5 is out of bounds for axis 0 of 'src' with shape \(5,\)"):
        serial_copy(src, dst)
    serial_copy(qgraph.from_numpy(np.arange(8.0)), dst)
    np.testing.assert_array_equal(dst.to_numpy(), np.arange(8.0))


def test_the_axis_and_shape_of_a_two_dimensional_access(arch):
    u = qgraph.from_numpy(np.random.default_rng(1).random((4, 5)))
    out = qgraph.ndarray(qgraph.f64, (4, 5))
    with pytest.raises(IndexError, match=r"index 5 is out of bounds for axis 1 of 'u' with shape \(4, 5\)"):
        stencil(u, out)


def test_negative_indices_within_the_extent_are_python_indexing(arch):
    x, y = qgraph.from_numpy(np.arange(4.0)), qgraph.from_numpy(np.zeros(4))
    two_tasks(x, y)  # y[-1] = x[0] is valid Python indexing
    np.testing.assert_array_equal(y.to_numpy(), [2.0, 4.0, 6.0, 0.0])


def test_a_gather_with_a_bad_index_array(arch):
    x = qgraph.from_numpy(np.arange(5.0))
    out = qgraph.ndarray(qgraph.f64, (3,))
    with pytest.raises(IndexError, match=r"index 7 is out of bounds for axis 0 of 'x' with shape \(5,\)"):
        gather(x, qgraph.from_numpy(np.array([0, 7, 2])), out)
    with pytest.raises(IndexError, match=r"index -6 is out of bounds"):
        gather(x, qgraph.from_numpy(np.array([0, 1, -6])), out)
    gather(x, qgraph.from_numpy(np.array([4, -1, 2])), out)
    np.testing.assert_array_equal(out.to_numpy(), [4.0, 4.0, 2.0])


def test_in_a_graph_and_its_replays(arch):
    x, y = qgraph.from_numpy(np.ones(4)), qgraph.from_numpy(np.zeros(2))
    for _ in range(2):  # the build, then a replay of the same graph
        with pytest.raises(IndexError, match=r"index 2 is out of bounds for axis 0 of 'y' with shape \(2,\)"):
            two_tasks(x, y)
    good = qgraph.from_numpy(np.zeros(4))
    two_tasks(qgraph.from_numpy(np.ones(4)), good)  # y[-1] = x[0]: Python indexing
    np.testing.assert_array_equal(good.to_numpy(), 2.0)


def test_in_a_device_loop_the_loop_stops_and_the_next_call_works(loop_arch):
    x, flag = qgraph.from_numpy(np.zeros(4)), qgraph.from_numpy(np.ones(1, np.int32))
    steps = qgraph.from_numpy(np.array([0], np.int64))
    with pytest.raises(IndexError, match=rf"line {_line(looping, 'x[i + offset')} .*index 4 is out of bounds "
                                         r"for axis 0 of 'x' with shape \(4,\)"):
        looping(x, qgraph.from_numpy(np.array([1], np.int64)), steps, flag)
    # the failed check ends the loop after its pass (the host do-while fallback runs on to its flag)
    assert steps.to_numpy()[0] == (3 if loop_arch == "cuda-host" else 1)
    x2, steps2 = qgraph.from_numpy(np.zeros(4)), qgraph.from_numpy(np.array([0], np.int64))
    looping(x2, qgraph.from_numpy(np.array([0], np.int64)), steps2, qgraph.from_numpy(np.ones(1, np.int32)))
    np.testing.assert_array_equal(x2.to_numpy(), 3.0)
    assert steps2.to_numpy()[0] == 3


@qgraph.kernel(debug="nan")
def square_root(x, y):
    for i in range(x.shape[0]):
        y[i] = np.sqrt(x[i])


@qgraph.kernel(debug="nan")
def spread(x, grid):
    for i in range(x.shape[0]):
        grid[i % 2, 0] += x[i] / (x[i] - 1.0)


def test_nan_mode_reports_the_first_non_finite_store(arch):
    x = qgraph.from_numpy(np.array([4.0, -1.0, 9.0]))
    y = qgraph.ndarray(qgraph.f64, (3,))
    with pytest.raises(FloatingPointError, match=rf"kernel square_root, line {_line(square_root, 'np.sqrt')} .*"
                                                 r"NaN was stored into 'y' at index 1"):
        square_root(x, y)
    square_root(qgraph.from_numpy(np.array([4.0, 1.0, 9.0])), y)
    np.testing.assert_array_equal(y.to_numpy(), [2.0, 1.0, 3.0])


def test_nan_mode_checks_atomic_updates(arch):
    grid = qgraph.from_numpy(np.zeros((2, 1)))
    with pytest.raises(FloatingPointError, match=r"[+-]inf was stored into 'grid' at index \(1, 0\)"):
        spread(qgraph.from_numpy(np.array([0.0, 1.0])), grid)


def test_bounds_mode_does_not_check_values(arch):
    @qgraph.kernel(debug=True)
    def square_root_unchecked(x, y):
        for i in range(x.shape[0]):
            y[i] = np.sqrt(x[i])

    y = qgraph.ndarray(qgraph.f64, (2,))
    square_root_unchecked(qgraph.from_numpy(np.array([-1.0, 4.0])), y)
    assert np.isnan(y.to_numpy()[0])


def test_without_debug_mode_nothing_is_checked(arch):
    @qgraph.kernel(debug=False)
    def plain(x, y):
        for i in range(x.shape[0]):
            y[i] = x[i]

    plain(qgraph.from_numpy(np.ones(3)), qgraph.from_numpy(np.zeros(3)))
    assert plain.debug is False


def test_qgraph_debug_turns_it_on_for_every_kernel(arch, monkeypatch):
    monkeypatch.setenv("QGRAPH_DEBUG", "1")
    qgraph.init(arch)

    @qgraph.kernel
    def copy(x, y):
        for i in range(x.shape[0]):
            y[i] = x[i]

    with pytest.raises(IndexError, match=r"axis 0 of 'y' with shape \(2,\)"):
        copy(qgraph.from_numpy(np.ones(3)), qgraph.from_numpy(np.zeros(2)))
    monkeypatch.delenv("QGRAPH_DEBUG")
    qgraph.init(arch)


def test_struct_fields_are_named_as_written(arch):
    @qgraph.struct
    class Particles:
        x: object
        v: object

    @qgraph.kernel(debug=True)
    def push(p: Particles, dt: float):
        for i in range(p.x.shape[0]):
            p.x[i] += dt * p.v[i + 1]

    p = Particles(qgraph.from_numpy(np.zeros(3)), qgraph.from_numpy(np.ones(3)))
    with pytest.raises(IndexError, match=r"axis 0 of 'p.v' with shape \(3,\)"):
        push(p, 0.1)


def test_the_debug_option_and_setting_are_validated():
    with pytest.raises(ValueError, match="debug: expected True, False, 'nan'"):
        qgraph.kernel(debug="loud")
    with pytest.raises(qgraph.QgraphError, match="QGRAPH_DEBUG='loud': expected 1"):
        Settings.from_environ({"QGRAPH_DEBUG": "loud"})
    assert Settings.from_environ({"QGRAPH_DEBUG": "nan"}).debug == "nan"
    assert Settings.from_environ({"QGRAPH_DEBUG": "1"}).debug == "bounds"
    assert Settings.from_environ({}).debug is None


@qgraph.kernel
def allocating(x, n):
    for i in range(x.shape[0]):
        x[i] = 1.0
    for i in range(x.shape[0]):
        t = np.empty(n[0])
        x[i] = t.size


def test_an_exception_inside_a_parallel_cpu_task_keeps_its_type_and_names_the_task(cpu):
    x = np.zeros(8)
    line = _line(allocating, "t = np.empty") - 1  # the task's loop
    with pytest.raises(ValueError, match=rf"kernel allocating, line {line} \(.*\), in a task: negative dimensions"):
        allocating(x, np.array([-1]))
    allocating(x, np.array([3]))
    np.testing.assert_array_equal(x, 3.0)


@qgraph.kernel(debug=True, deterministic=True)
def checked_sum(x, idx, total, scalar_total):
    for i in range(idx.shape[0]):
        total[0] += x[idx[i]]
        scalar_total[()] += 1.0


def test_reductions_scratch_arrays_and_zero_d_arrays_in_debug_mode(arch):
    x = qgraph.from_numpy(np.arange(6.0))
    total, count = qgraph.from_numpy(np.zeros(1)), qgraph.from_numpy(np.zeros(()))
    checked_sum(x, qgraph.from_numpy(np.array([0, 2, 5])), total, count)
    assert total.to_numpy()[0] == 7.0 and count.to_numpy()[()] == 3.0
    with pytest.raises(IndexError, match=r"index 6 is out of bounds for axis 0 of 'x' with shape \(6,\)"):
        checked_sum(x, qgraph.from_numpy(np.array([0, 6, 5])), total, count)


@qgraph.kernel(debug=True)
def quotients(a, b, q, r, f, k: int):
    for i in range(a.shape[0]):
        q[i] = a[i] // b[i]
        r[i] = k
        r[i] %= b[i]
        f[i] = a[i] / b[i] + (1.0 * a[i]) // (1.0 * b[i])  # float divisions by zero: inf and NaN, no error


@qgraph.kernel
def quotients_unchecked(a, b, q):
    for i in range(a.shape[0]):
        q[i] = a[i] // b[i] + a[i] % b[i]


def test_an_integer_division_by_zero_is_a_zero_division_error_in_debug_mode(arch):
    a = np.arange(1, 5)
    q, r, f = (qgraph.from_numpy(np.zeros(4, dt)) for dt in (np.int64, np.int64, np.float64))
    quotients(qgraph.from_numpy(a), qgraph.from_numpy(np.array([1, 2, 3, 4])), q, r, f, 7)
    np.testing.assert_array_equal(q.to_numpy(), a // [1, 2, 3, 4])
    np.testing.assert_array_equal(r.to_numpy(), 7 % np.array([1, 2, 3, 4]))
    line = _line(quotients, "q[i] = a[i] // b[i]")
    for divisors in ([1, 0, 3, 4], [0, 2, 3, 4]):
        with pytest.raises(ZeroDivisionError, match=rf"^kernel quotients, line {line} \(.*\): integer "
                                                    r"division or modulo by zero \(//\) \(debug mode"):
            quotients(qgraph.from_numpy(a), qgraph.from_numpy(np.array(divisors)), q, r, f, 7)
    quotients(qgraph.from_numpy(a), qgraph.from_numpy(np.array([1, 2, 3, 4])), q, r, f, 0)  # the next call works

    @qgraph.kernel(debug=True)
    def remainder_only(b, r):
        for i in range(b.shape[0]):
            r[i] = 7
            r[i] %= b[i]

    with pytest.raises(ZeroDivisionError, match=rf"line {_line(remainder_only, 'r[i] %= b[i]')} .*\(%\)"):
        remainder_only(qgraph.from_numpy(np.array([3, 0])), r)


def test_without_debug_mode_an_integer_division_by_zero_is_zero_as_in_numpy(arch):
    a, b = np.arange(1, 5), np.array([2, 0, 3, 0])
    q = qgraph.from_numpy(np.zeros(4, np.int64))
    quotients_unchecked(qgraph.from_numpy(a), qgraph.from_numpy(b), q)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(q.to_numpy(), a // b + a % b)
    np.testing.assert_array_equal(q.to_numpy(), [0 + 1, 0, 1 + 0, 0])
