"""Arrays shorter than the loops over them (issue 46): where a loop runs over `x.shape[0]` and indexes
`y[i]` in every iteration, a call with a shorter `y` is an IndexError naming the kernel, the line, both
arrays and their extents (without debug mode: the check costs a comparison per call), not a crash; the
next good call works. Accesses a branch guards, empty loops and longer arrays pass."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import qgraph
from qgraph import launcher


def _line(fn, text: str) -> int:
    """The file line of the first line of `fn`'s source containing `text`."""
    lines, first = inspect.getsourcelines(getattr(fn, "__wrapped__", fn))
    return first + next(k for k, line in enumerate(lines) if text in line)


@qgraph.kernel(cuda_graph=True)
def add(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] + 1.0


@qgraph.kernel
def copy2d(u, out):
    for i, j in qgraph.ndrange(u.shape[0], u.shape[1]):
        out[i, j] = u[i, j]


@qgraph.kernel
def smooth(u, out):
    for i in range(1, u.shape[0] - 1):
        out[i + 1] = u[i - 1] + u[i + 1]


@qgraph.kernel
def guarded(x, y):
    for i in range(x.shape[0]):
        if i < y.shape[0]:
            y[i] = x[i]


@qgraph.kernel
def over_y(x, y):
    for i in range(y.shape[0]):
        y[i] = 2.0 * x[i]


@qgraph.kernel(cuda_graph=True)
def repeated(x, y, k: int):
    for _ in qgraph.repeat(k):
        for i in range(x.shape[0]):
            y[i] = x[i] * 0.5


@qgraph.kernel
def serial_sum(x, y, total):
    for i in qgraph.serial(range(len(x))):
        total[0] += y[i]


def _arrays(*values):
    return tuple(qgraph.from_numpy(np.asarray(v, dtype=np.float64)) for v in values)


def test_a_loop_longer_than_the_array_it_writes_is_an_index_error(arch):
    x, y = _arrays(np.ones(10**6), np.zeros(3))
    with pytest.raises(IndexError) as info:
        add(x, y)
    text = str(info.value)
    assert f"kernel add, line {_line(add, 'y[i] = x[i]')} (" in text
    assert "y[i] writes index up to 999,999 on axis 0 but y has shape (3,)" in text
    assert f"the loop at line {_line(add, 'for i in range')} runs over x.shape[0] = 1,000,000" in text
    assert "pass arrays of matching length" in text
    good = _arrays(np.zeros(10**6))[0]
    add(x, good)  # the next good call works
    np.testing.assert_array_equal(good.to_numpy(), 2.0)


def test_a_replayed_graph_checks_each_new_set_of_arrays(arch):
    x, y, short = _arrays(np.arange(8.0), np.zeros(8), np.zeros(5))
    for _ in range(3):  # the build, then replays (the same-arguments fast path on CUDA)
        add(x, y)
    for _ in range(2):
        with pytest.raises(IndexError, match=r"y has shape \(5,\)"):
            add(x, short)
    add(x, y)
    np.testing.assert_array_equal(y.to_numpy(), np.arange(8.0) + 1.0)
    np.testing.assert_array_equal(short.to_numpy(), 0.0)  # nothing was written


def test_two_dimensional_extents_name_the_axis(arch):
    u, out = _arrays(np.ones((4, 5)), np.zeros((4, 4)))
    with pytest.raises(
        IndexError,
        match=r"out\[i, j\] writes index up to 4 on axis 1 but out has shape \(4, 4\); "
        r"the loop at line \d+ runs over u.shape\[1\] = 5 .* matching shapes",
    ):
        copy2d(u, out)
    wide = _arrays(np.zeros((5, 6)))[0]
    copy2d(u, wide)  # longer on both axes: fine
    np.testing.assert_array_equal(wide.to_numpy()[:4, :5], 1.0)


def test_literal_offsets_of_the_bounds_and_the_index(arch):
    u = _arrays(np.arange(6.0))[0]
    with pytest.raises(IndexError, match=r"out\[i \+ 1\] writes index up to 5 .* runs over u.shape\[0\] - 1 = 5"):
        smooth(u, _arrays(np.zeros(5))[0])
    out = _arrays(np.zeros(6))[0]
    smooth(u, out)
    np.testing.assert_array_equal(out.to_numpy(), [0.0, 0.0, 2.0, 4.0, 6.0, 8.0])
    smooth(_arrays(np.ones(2))[0], _arrays(np.zeros(1))[0])  # range(1, 1) is empty: nothing is reached


def test_a_serial_loop_and_the_plain_dispatcher(arch):
    x, y, total = _arrays(np.ones(4), np.ones(3), np.zeros(1))
    with pytest.raises(IndexError, match=r"y\[i\] reads index up to 3 .* runs over len\(x\) = 4") as generated:
        serial_sum(x, y, total)
    with pytest.raises(IndexError) as plain:
        launcher.dispatch(launcher.bind(serial_sum, (x, y, total)))
    assert str(plain.value) == str(generated.value)
    serial_sum(y, y, total)
    assert total.to_numpy()[0] == 3.0


def test_what_must_not_raise(arch):
    x, y, long = _arrays(np.arange(3.0), np.zeros(3), np.zeros(7))
    add(x, long)  # y longer than x
    np.testing.assert_array_equal(long.to_numpy(), [1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0])
    over_y(x, y)  # a loop over y's extent reading x[i] of the same length
    np.testing.assert_array_equal(y.to_numpy(), [0.0, 2.0, 4.0])
    short = _arrays(np.zeros(2))[0]
    guarded(x, short)  # the access is guarded by a branch: the kernel's own business
    np.testing.assert_array_equal(short.to_numpy(), [0.0, 1.0])


def test_a_repeat_loop_that_runs_no_pass_reaches_nothing(arch):
    x, short = _arrays(np.ones(6), np.zeros(2))
    repeated(x, short, 0)
    repeated(x, short, 0)  # a replay on CUDA
    with pytest.raises(IndexError, match=r"y has shape \(2,\)"):
        repeated(x, short, 2)  # the same arrays, a new count
    y = _arrays(np.zeros(6))[0]
    repeated(x, y, 2)
    np.testing.assert_array_equal(y.to_numpy(), 0.5)
