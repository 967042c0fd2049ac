"""A float stored into an integer or bool array (issue 46): NumPy's `same_kind` casting, at compile time.
`a[i] = x[i]` with a float64 `x` and an int64 `a` would drop the fraction silently (1.5 -> 1); it is a
QgraphSyntaxError naming the line, the array, both dtypes and the conversions that say what is meant.
Integer into float and narrowing within a kind (float64 into float32, int64 into int32) stay stores."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import qgraph


def _line(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(getattr(fn, "__wrapped__", fn))
    return first + next(k for k, line in enumerate(lines) if text in line)


@qgraph.kernel
def store(x, a):
    for i in range(x.shape[0]):
        a[i] = x[i]


@qgraph.kernel
def literal(a):
    for i in range(a.shape[0]):
        a[i] = 1.5


@qgraph.kernel
def halve(a):
    for i in range(a.shape[0]):
        a[i] /= 2


@qgraph.kernel
def scatter(x, a):
    for i in range(x.shape[0]):
        qgraph.atomic_add(a, 0, x[i])


@qgraph.kernel
def explicit(x, a, b, back):
    for i in range(x.shape[0]):
        a[i] = int(x[i])
        b[i] = math.floor(x[i])
        a[i] += qgraph.i64(x[i] * 2.0) - a[i] // 2
        back[i] = a[i]  # an integer into a float array


def _arrays(*values):
    return tuple(qgraph.from_numpy(np.asarray(v)) for v in values)


def test_a_float_stored_into_an_int64_array_is_a_compile_error(arch):
    x, a = _arrays(np.array([1.5, 2.5]), np.zeros(2, np.int64))
    with pytest.raises(qgraph.QgraphSyntaxError) as info:
        store(x, a)
    error = info.value
    assert error.lineno == _line(store, "a[i] = x[i]")
    text = str(error)
    assert "kernel store: a float64 value is stored into 'a', an array of int64" in text
    assert "same_kind" in text and "int(...) rounds toward zero" in text and "qgraph.i64(...)" in text
    ints = _arrays(np.array([1, 2], np.int64))[0]
    store(ints, a)  # the next good call (another signature) works
    np.testing.assert_array_equal(a.to_numpy(), [1, 2])


@pytest.mark.parametrize(
    "kernel, dtype, words",
    [
        (literal, np.int32, "a float value is stored into 'a', an array of int32"),
        (halve, np.int64, "`//=` divides integers"),
        (literal, np.bool_, "bool(...) or a comparison"),
    ],
)
def test_literals_updates_and_bools(arch, kernel, dtype, words):
    with pytest.raises(qgraph.QgraphSyntaxError, match=words.replace("(", r"\(").replace(")", r"\)")):
        kernel(qgraph.from_numpy(np.zeros(3, dtype)))


def test_an_atomic_into_an_integer_array(arch):
    with pytest.raises(qgraph.QgraphSyntaxError, match="a float64 value is stored into 'a', an array of int64"):
        scatter(*_arrays(np.ones(3), np.zeros(1, np.int64)))


def test_explicit_conversions_and_same_kind_stores_are_allowed(arch):
    x = np.array([1.75, -2.5, 3.25])
    a, b, back = _arrays(np.zeros(3, np.int64), np.zeros(3, np.int32), np.zeros(3))
    explicit(qgraph.from_numpy(x), a, b, back)
    want = np.trunc(x).astype(np.int64)
    want = want + np.trunc(x * 2.0).astype(np.int64) - want // 2
    np.testing.assert_array_equal(a.to_numpy(), want)
    np.testing.assert_array_equal(b.to_numpy(), np.floor(x).astype(np.int32))
    np.testing.assert_array_equal(back.to_numpy(), want.astype(np.float64))
    narrow = qgraph.from_numpy(np.zeros(3, np.float32))
    store(qgraph.from_numpy(x), narrow)  # float64 into float32: within the kind
    np.testing.assert_array_equal(narrow.to_numpy(), x.astype(np.float32))
    small = qgraph.from_numpy(np.zeros(3, np.int32))
    store(a, small)  # int64 into int32
    np.testing.assert_array_equal(small.to_numpy(), want.astype(np.int32))
