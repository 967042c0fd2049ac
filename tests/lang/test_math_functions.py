"""Math in kernels against CPython and NumPy, on both backends: every `math` function numba
compiles for the CPU and for CUDA, fmod/remainder/copysign with their signs, predicates used
as numbers, qgraph.clamp and np.clip, min/max with NaNs and mixed int/float arguments, and
NumPy linear algebra rejected with a pointer to qgraph's vector types. float32 inputs must
compute in float32 (results written to float64 arrays show the precision the math ran in)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.numeric import call  # device round trip of NumPy arguments

import qgraph

F32, F64 = np.float32, np.float64
SPECIAL = [0.0, -0.0, 2.5, -2.5, 3.5, -3.5, 7.0, -7.0, 1e-3, 5.5, 0.5, np.inf, -np.inf, np.nan, 1.0, -1.0]
SPECIAL_Y = [1.0, 1.0, 1.0, 1.0, -1.0, -1.0, 2.0, -2.0, 3.0, np.nan, 0.0, 2.0, 1.0, 1.0, np.inf, -np.inf]


def _data(dtype, n=600, seed=0, ties=True):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, n)
    y = rng.uniform(0.25, 3, n) * rng.choice([-1.0, 1.0], n)
    if ties:  # halfway cases of remainder, round numbers for fmod
        x[:40] = rng.integers(-12, 12, 40) * 0.5
        y[:40] = rng.choice([1.0, -1.0, 0.5, 2.0], 40)
    return x.astype(dtype), y.astype(dtype)


def _is_float32_valued(values: np.ndarray) -> bool:
    values = values[np.isfinite(values)]
    return bool(np.all(values == values.astype(F32).astype(F64)))


def _same(got: np.ndarray, expected: np.ndarray) -> bool:
    """Equal values, NaN where NaN, and the same sign of zero."""
    expected = np.asarray(expected, dtype=F64)
    both_nan = np.isnan(got) & np.isnan(expected)
    return bool(np.all(both_nan | ((got == expected) & (np.signbit(got) == np.signbit(expected)))))


def _cpython(fn, *args):
    """`fn` on Python floats; NaN where CPython raises (kernels return NaN there, like NumPy)."""
    try:
        return fn(*(float(a) for a in args))
    except (ValueError, OverflowError, ZeroDivisionError):
        return math.nan


# --------------------------------------------------------------------------- every function


@qgraph.kernel
def unary_math(x, out):
    for i in range(x.shape[0]):
        a = x[i]
        p = abs(a) + 0.25
        u = a / 4
        out[0, i] = math.sqrt(p)
        out[1, i] = math.exp(a)
        out[2, i] = math.expm1(u)
        out[3, i] = math.log(p)
        out[4, i] = math.log1p(p)
        out[5, i] = math.log10(p)
        out[6, i] = math.log2(p)
        out[7, i] = math.sin(a)
        out[8, i] = math.cos(a)
        out[9, i] = math.tan(u)
        out[10, i] = math.asin(u)
        out[11, i] = math.acos(u)
        out[12, i] = math.atan(a)
        out[13, i] = math.sinh(a)
        out[14, i] = math.cosh(a)
        out[15, i] = math.tanh(a)
        out[16, i] = math.asinh(a)
        out[17, i] = math.acosh(p + 1)
        out[18, i] = math.atanh(u)
        out[19, i] = math.degrees(a)
        out[20, i] = math.radians(a)
        out[21, i] = math.erf(a)
        out[22, i] = math.erfc(a)
        out[23, i] = math.gamma(p)
        out[24, i] = math.lgamma(p)
        out[25, i] = math.exp2(a)
        out[26, i] = math.fabs(a)
        out[27, i] = math.floor(a)
        out[28, i] = math.ceil(a)
        out[29, i] = math.trunc(a)
        out[30, i] = math.frexp(a)[0]
        out[31, i] = math.frexp(a)[1]
        out[32, i] = math.ldexp(a, 3)
        out[33, i] = math.pi * a + math.e - math.tau


def _unary_reference(a):
    p = abs(a) + a.dtype.type(0.25)  # as the kernel computes them, in the array's precision
    u = a / a.dtype.type(4)
    return [(math.sqrt, p), (math.exp, a), (math.expm1, u), (math.log, p), (math.log1p, p), (math.log10, p),
            (math.log2, p), (math.sin, a), (math.cos, a), (math.tan, u), (math.asin, u), (math.acos, u),
            (math.atan, a), (math.sinh, a), (math.cosh, a), (math.tanh, a), (math.asinh, a),
            (math.acosh, p + a.dtype.type(1)), (math.atanh, u), (math.degrees, a), (math.radians, a),
            (math.erf, a), (math.erfc, a), (math.gamma, p), (math.lgamma, p), (math.exp2, a), (math.fabs, a),
            (math.floor, a), (math.ceil, a), (math.trunc, a), (lambda v: math.frexp(v)[0], a),
            (lambda v: math.frexp(v)[1], a), (lambda v: math.ldexp(v, 3), a), (None, a)]


_EXACT_UNARY = {26, 27, 28, 29, 30, 31, 32}  # fabs, floor, ceil, trunc, frexp, ldexp: no rounding at all


@pytest.mark.parametrize("dtype", [F64, F32])
def test_every_unary_math_function_matches_cpython(arch, dtype):
    x, _ = _data(dtype, ties=False)  # every argument inside its function's domain
    out = np.zeros((34, x.size))
    call(unary_math, x, out)
    for row, (fn, arg) in enumerate(_unary_reference(x)):
        if fn is None:
            expected = x.astype(F64) * math.pi + math.e - math.tau
            if dtype is F32:  # the constants are weak: float32 arithmetic
                expected = x * F32(math.pi) + F32(math.e) - F32(math.tau)
        else:
            expected = np.array([_cpython(fn, v) for v in arg])
        if row in _EXACT_UNARY:
            np.testing.assert_array_equal(out[row], expected, err_msg=f"row {row}")
        elif dtype is F64:
            np.testing.assert_allclose(out[row], expected, rtol=1e-13, atol=1e-14, err_msg=f"row {row}")
        else:
            np.testing.assert_allclose(out[row], expected, rtol=4e-6, atol=1e-6, err_msg=f"row {row}")
            assert _is_float32_valued(out[row]), f"row {row} computed in float64"


@qgraph.kernel
def binary_math(x, y, out):
    for i in range(x.shape[0]):
        a = x[i]
        b = y[i]
        out[0, i] = math.atan2(a, b)
        out[1, i] = math.hypot(a, b)
        out[2, i] = math.pow(abs(a) + 0.25, b)
        out[3, i] = math.copysign(a, b)
        out[4, i] = math.fmod(a, b)
        out[5, i] = math.remainder(a, b)
        out[6, i] = math.nextafter(a, b)


_BINARY = [math.atan2, math.hypot, None, math.copysign, math.fmod, math.remainder, None]
_EXACT_BINARY = {3, 4, 5, 6}  # copysign, fmod, remainder and nextafter are exact in any precision


@pytest.mark.parametrize("dtype", [F64, F32])
def test_every_binary_math_function_matches_cpython(arch, dtype):
    x, y = _data(dtype)
    out = np.zeros((7, x.size))
    call(binary_math, x, y, out)
    for row, fn in enumerate(_BINARY):
        if row == 2:
            expected = [_cpython(math.pow, abs(a) + dtype(0.25), b) for a, b in zip(x, y)]
        elif row == 6:
            expected = np.nextafter(x, y)  # in the arrays' precision (CPython's is float64's)
        else:
            expected = [_cpython(fn, a, b) for a, b in zip(x, y)]
        if row in _EXACT_BINARY:
            assert _same(out[row], expected), f"row {row}: {out[row][:8]} vs {np.asarray(expected)[:8]}"
        elif dtype is F64:
            np.testing.assert_allclose(out[row], expected, rtol=1e-13, atol=1e-14, err_msg=f"row {row}")
        else:
            np.testing.assert_allclose(out[row], expected, rtol=4e-6, atol=1e-6, err_msg=f"row {row}")
            assert _is_float32_valued(out[row]), f"row {row} computed in float64"


@qgraph.kernel
def signs_and_remainders(x, y, out):
    for i in range(x.shape[0]):
        out[0, i] = math.fmod(x[i], y[i])
        out[1, i] = math.remainder(x[i], y[i])
        out[2, i] = math.copysign(x[i], y[i])
        out[3, i] = math.copysign(2, x[i])
        out[4, i] = math.fmod(x[i], 2)
        out[5, i] = math.remainder(x[i], 2)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_fmod_remainder_and_copysign_keep_cpythons_signs_and_special_values(arch, dtype):
    """Zeros keep their sign, halfway cases of remainder go to the even multiple, and where
    CPython raises (an infinite x, a zero y) the kernel gives NaN, as NumPy does."""
    x, y = np.array(SPECIAL, dtype=dtype), np.array(SPECIAL_Y, dtype=dtype)
    out = np.zeros((6, x.size))
    call(signs_and_remainders, x, y, out)
    expected = [[_cpython(math.fmod, a, b) for a, b in zip(x, y)],
                [_cpython(math.remainder, a, b) for a, b in zip(x, y)],
                [_cpython(math.copysign, a, b) for a, b in zip(x, y)],
                [math.copysign(2, a) for a in x],
                [_cpython(math.fmod, a, 2) for a in x],
                [_cpython(math.remainder, a, 2) for a in x]]
    for row, exp in enumerate(expected):
        assert _same(out[row], exp), f"row {row}: {out[row]} vs {exp}"


# --------------------------------------------------------------------------- precision


@qgraph.kernel
def thirds_of(x, y, out):
    for i in range(x.shape[0]):
        out[0, i] = math.fmod(x[i], y[i]) / 3
        out[1, i] = math.remainder(x[i], y[i]) / 3
        out[2, i] = math.copysign(x[i], y[i]) / 3
        out[3, i] = math.fmod(x[i], 2) / 3
        out[4, i] = max(i, x[i]) / 3
        out[5, i] = min(x[i], 1) / 3
        out[6, i] = qgraph.clamp(x[i], -1, 2) / 3
        out[7, i] = np.clip(x[i], -1, 2) / 3
        out[8, i] = float(math.isnan(x[i])) / 3 + x[i]


@pytest.mark.parametrize("dtype", [F64, F32])
def test_results_keep_the_precision_of_their_arguments(arch, dtype):
    """Divided by 3 in the kernel: a float32 result divided in float64 would not be float32-valued."""
    x, y = _data(dtype)
    out = np.zeros((9, x.size))
    call(thirds_of, x, y, out)
    t = dtype(3)
    i = np.arange(x.size)
    expected = [np.fmod(x, y) / t, np.array([math.remainder(a, b) for a, b in zip(x, y)], dtype=dtype) / t,
                np.copysign(x, y) / t, np.fmod(x, dtype(2)) / t, np.maximum(i.astype(dtype), x) / t,
                np.minimum(x, dtype(1)) / t, np.clip(x, dtype(-1), dtype(2)) / t, np.clip(x, dtype(-1), dtype(2)) / t,
                np.isnan(x).astype(dtype) / t + x]
    for row, exp in enumerate(expected):
        assert exp.dtype == dtype
        np.testing.assert_array_equal(out[row], exp, err_msg=f"row {row}")


# --------------------------------------------------------------------------- predicates as numbers


@qgraph.kernel
def predicates(x, out, count):
    for i in range(x.shape[0]):
        out[0, i] = float(math.isnan(x[i]))
        out[1, i] = 1.0 if math.isfinite(x[i]) else 0.0
        out[2, i] = math.isinf(x[i]) * 2.5
        out[3, i] = float(not math.isfinite(x[i]))
        out[4, i] = float(math.isnan(x[i]) or x[i] > 1)
        count[i] = int(math.isinf(x[i])) + int(math.isnan(x[i])) * 10


@pytest.mark.parametrize("dtype", [F64, F32])
def test_isnan_isinf_isfinite_work_as_numbers(arch, dtype):
    x = np.array(SPECIAL, dtype=dtype)
    out = np.zeros((5, x.size))
    count = np.zeros(x.size, dtype=np.int64)
    call(predicates, x, out, count)
    np.testing.assert_array_equal(out[0], np.isnan(x))
    np.testing.assert_array_equal(out[1], np.isfinite(x))
    np.testing.assert_array_equal(out[2], np.isinf(x) * 2.5)
    np.testing.assert_array_equal(out[3], ~np.isfinite(x))
    np.testing.assert_array_equal(out[4], np.isnan(x) | (x > 1))
    np.testing.assert_array_equal(count, np.isinf(x) + np.isnan(x) * 10)


# --------------------------------------------------------------------------- min, max, clamp


@qgraph.kernel
def min_max_rules(x, y, out):
    for i in range(x.shape[0]):
        out[0, i] = max(x[i], y[i])
        out[1, i] = max(y[i], x[i])
        out[2, i] = min(x[i], y[i])
        out[3, i] = min(y[i], x[i])
        out[4, i] = max(x[i], y[i], 0.0)
        out[5, i] = min(x[i], 3)
        out[6, i] = max(i, 0.5)
        out[7, i] = min(i, x[i]) * 2


def test_min_and_max_follow_python_with_nans_and_mixed_arguments(arch):
    """Python's rule on both backends: the earlier argument unless a later one is strictly
    smaller (larger), so a NaN first is returned and a NaN later is skipped (numba-cuda's own
    float min/max drop NaNs wherever they are); an int next to a float gives the float."""
    x, y = np.array(SPECIAL, dtype=F64), np.array(SPECIAL_Y, dtype=F64)
    out = np.zeros((8, x.size))
    call(min_max_rules, x, y, out)
    xs, ys = x.tolist(), y.tolist()
    expected = [[max(a, b) for a, b in zip(xs, ys)], [max(b, a) for a, b in zip(xs, ys)],
                [min(a, b) for a, b in zip(xs, ys)], [min(b, a) for a, b in zip(xs, ys)],
                [max(a, b, 0.0) for a, b in zip(xs, ys)], [min(a, 3) for a in xs],
                [max(i, 0.5) for i in range(x.size)], [min(i, a) * 2 for i, a in enumerate(xs)]]
    for row, exp in enumerate(expected):
        assert _same(out[row], exp), f"row {row}: {out[row]} vs {exp}"
    assert out[6, 0] == 0.5  # max(0, 0.5) is the float, not an int


@qgraph.kernel
def rounding(x, table, out, halves, v: qgraph.vec2[:], vout: qgraph.vec2[:]):
    for i in range(x.shape[0]):
        k = math.floor(x[i])  # Python's rule: an int, so it indexes
        out[0, i] = table[k + 3]
        out[1, i] = table[math.ceil(x[i]) + 3]
        out[2, i] = table[math.trunc(x[i]) + 3]
        out[3, i] = np.floor(x[i]) / 3  # NumPy's rule: a float of x's type
        out[4, i] = np.ceil(x[i]) / 3
        out[5, i] = np.trunc(x[i]) / 3
        halves[i] = math.floor(x[i]) // 2
        vout[i] = math.floor(v[i]) / 3 + np.ceil(v[i])  # per component, floats: the vector keeps its type


@pytest.mark.parametrize("dtype", [F64, F32])
def test_rounding_follows_python_and_numpy_on_both_backends(arch, dtype):
    """math.floor/ceil/trunc give ints (numba-cuda's give floats), np.floor/ceil/trunc floats of the
    argument's precision (numba-cuda has none), math.floor of a vector floats per component."""
    x = np.array([-2.5, -1.0, -0.5, -0.0, 0.25, 1.0, 1.5, 2.75], dtype=dtype)
    table = np.arange(8, dtype=F64) * 10
    out, halves = np.zeros((6, x.size)), np.zeros(x.size, np.int64)
    v = np.stack([x, -x], 1).astype(F32)
    vout = np.zeros_like(v)
    call(rounding, x, table, out, halves, v, vout)
    three = dtype(3)
    for row, fn in enumerate((math.floor, math.ceil, math.trunc)):
        np.testing.assert_array_equal(out[row], [table[fn(a) + 3] for a in x.tolist()])
    for row, fn in enumerate((np.floor, np.ceil, np.trunc), start=3):
        np.testing.assert_array_equal(out[row], fn(x) / three)  # divided in x's precision
    np.testing.assert_array_equal(halves, [math.floor(a) // 2 for a in x.tolist()])
    np.testing.assert_array_equal(vout, np.floor(v) / F32(3) + np.ceil(v))


@qgraph.kernel
def clamps(x, lo, hi, out, index):
    for i in range(x.shape[0]):
        out[0, i] = qgraph.clamp(x[i], lo, hi)
        out[1, i] = np.clip(x[i], lo, hi)
        out[2, i] = qgraph.clamp(x[i], -1, 2.5)
        out[3, i] = np.clip(x[i], 0, 1)
        index[i] = qgraph.clamp(i - 3, 0, x.shape[0] - 8)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_clamp_and_np_clip_match_numpy(arch, dtype):
    x, _ = _data(dtype)
    x[:len(SPECIAL)] = SPECIAL  # NaN stays NaN (as np.clip and the host's qgraph.clamp give)
    out = np.zeros((4, x.size), dtype=dtype)
    index = np.zeros(x.size, dtype=np.int64)
    call(clamps, x, -0.5, 1.5, out, index)
    np.testing.assert_array_equal(out[0], np.clip(x, dtype(-0.5), dtype(1.5)))
    np.testing.assert_array_equal(out[1], np.clip(x, dtype(-0.5), dtype(1.5)))
    np.testing.assert_array_equal(out[2], np.clip(x, dtype(-1), dtype(2.5)))
    np.testing.assert_array_equal(out[3], np.clip(x, dtype(0), dtype(1)))
    np.testing.assert_array_equal(index, np.clip(np.arange(x.size) - 3, 0, x.size - 8))
    assert [qgraph.clamp(float(v), -0.5, 1.5) for v in x[:len(SPECIAL)]] == pytest.approx(
        out[0, :len(SPECIAL)].tolist(), nan_ok=True)


def test_clamp_on_the_host():
    assert qgraph.clamp(5, 0, 3) == 3 and qgraph.clamp(-1.5, 0, 3) == 0 and qgraph.clamp(2.25, 0, 3) == 2.25
    assert isinstance(qgraph.clamp(2, 0, 3), int)
    assert math.isnan(qgraph.clamp(math.nan, 0.0, 1.0))
    assert qgraph.clamp(np.float32(7), 0, 1) == 1
    assert "clamp" in qgraph.__all__


# --------------------------------------------------------------------------- @qgraph.func


@qgraph.func
def wrapped(a, b):
    m = math.remainder(a, b) + math.fmod(a, 1.5)
    if math.isnan(m):
        return 0.0
    return qgraph.clamp(math.copysign(m, b), -1, 1) + float(math.isinf(b)) + max(a, b)


@qgraph.func
def no_literals(a, b):
    return (math.remainder(a, b) + math.fmod(a, b) + math.copysign(a, b) + max(a, b) + min(b, a)) / b


@qgraph.kernel
def through_a_func(x, y, out):
    for i in range(x.shape[0]):
        out[0, i] = wrapped(x[i], y[i])
        out[1, i] = no_literals(x[i], y[i])


def _wrapped_reference(a, b):
    m = math.remainder(a, b) + math.fmod(a, 1.5)
    return min(max(math.copysign(m, b), -1), 1) + float(math.isinf(b)) + max(a, b)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_math_in_a_qgraph_func(arch, dtype):
    """(A @qgraph.func types Python literals as numba does, float64, so only the function
    without literals is checked for float32 arithmetic.)"""
    x, y = _data(dtype)
    out = np.zeros((2, x.size))
    call(through_a_func, x, y, out)
    expected = [_wrapped_reference(float(a), float(b)) for a, b in zip(x, y)]
    np.testing.assert_allclose(out[0], expected, rtol=1e-6 if dtype is F32 else 1e-14, atol=1e-6)
    rem = np.array([math.remainder(a, b) for a, b in zip(x, y)], dtype=dtype)
    exact = (rem + np.fmod(x, y) + np.copysign(x, y) + np.maximum(x, y) + np.minimum(y, x)) / y
    np.testing.assert_array_equal(out[1], exact)


# --------------------------------------------------------------------------- what is refused


@qgraph.kernel
def uses_inv(a, out):
    for i in range(out.shape[0]):
        out[i] = np.linalg.inv(a)[0, 0]


@qgraph.kernel
def uses_dot(a, b, out):
    for i in range(out.shape[0]):
        out[i] = np.dot(a, b)


@qgraph.kernel
def uses_cross(a, b, out):
    for i in range(out.shape[0]):
        out[i] = np.cross(a, b)[0]


@qgraph.kernel
def uses_norm(a, out):
    for i in range(out.shape[0]):
        out[i] = np.linalg.norm(a)


@qgraph.func
def outer_helper(a, b):
    return np.outer(a, b)[0, 0]


@qgraph.kernel
def uses_outer_in_a_func(a, b, out):
    for i in range(out.shape[0]):
        out[i] = outer_helper(a, b)


@qgraph.kernel
def uses_isclose(x, out):
    for i in range(x.shape[0]):
        out[i] = float(math.isclose(x[i], 1.0))


@pytest.mark.parametrize("kernel, arrays, name", [
    (uses_inv, 1, "np.linalg.inv"), (uses_dot, 2, "np.dot"), (uses_cross, 2, "np.cross"),
    (uses_norm, 1, "np.linalg.norm"), (uses_outer_in_a_func, 2, "np.outer")])
def test_numpy_linear_algebra_points_to_the_vector_types(arch, kernel, arrays, name):
    args = [qgraph.from_numpy(np.eye(3)) if arrays == 1 else qgraph.from_numpy(np.ones(3))
            for _ in range(arrays)]
    with pytest.raises(qgraph.QgraphSyntaxError) as info:
        kernel(*args, qgraph.ndarray(np.float64, (4,)))
    err = info.value
    assert f"NumPy linear algebra ({name}) is not supported in a kernel" in str(err)
    assert "qgraph.vec3" in err.message and "qgraph.dot" in err.message
    assert err.filename == __file__ and err.lineno is not None
    assert name.split(".")[-1] + "(" in err.source_line  # the line of the call


def test_a_math_function_numba_lacks_names_the_line(arch):
    with pytest.raises(qgraph.QgraphSyntaxError, match="isclose") as info:
        uses_isclose(qgraph.from_numpy(np.ones(3)), qgraph.ndarray(np.float64, (3,)))
    assert info.value.filename == __file__


@qgraph.kernel
def numpy_ufuncs(x, out):
    for i in range(x.shape[0]):
        out[i, 0] = np.sqrt(x[i])
        out[i, 1] = np.exp(-x[i])
        out[i, 2] = np.log1p(x[i])
        out[i, 3] = np.arctan2(x[i], 2.0)
        out[i, 4] = np.abs(-x[i])
        out[i, 5] = np.hypot(x[i], 1.5)
        out[i, 6] = np.tanh(x[i])
        out[i, 7] = 1.0 if np.isfinite(x[i]) else 0.0


def test_numpy_ufuncs_of_numbers(arch):
    x_np = np.random.default_rng(5).random(64) * 3
    out = qgraph.ndarray(qgraph.f64, (64, 8))
    numpy_ufuncs(qgraph.from_numpy(x_np), out)
    expected = np.stack([np.sqrt(x_np), np.exp(-x_np), np.log1p(x_np), np.arctan2(x_np, 2.0), np.abs(x_np),
                         np.hypot(x_np, 1.5), np.tanh(x_np), np.ones(64)], axis=1)
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-13)
