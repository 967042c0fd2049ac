"""Python numbers are weak (NEP 50): a float32 kernel computes in float32, a float64 one in
float64, on both backends. Results are written to float64 arrays so that the precision the
arithmetic ran in shows: a float32 computation leaves float32-representable values."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from helpers.numeric import call, is_float32_valued

import qgraph

F32, F64 = np.float32, np.float64


@qgraph.kernel
def literals_and_indices(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * 0.1 + i * 0.5 - 2


@qgraph.kernel
def scaled_into(x, out, a):
    for i in range(x.shape[0]):
        out[i] = x[i] * a


@qgraph.kernel
def row_sums(x, out):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(x.shape[1]):
            s += x[i, j]
        out[i] = s


@qgraph.kernel
def lengths(x, out):
    for i in range(x.shape[0]):
        inv = 1.0 / math.sqrt(x[i] * x[i] + 1e-6)
        out[i] = float(i) * inv


@qgraph.kernel
def at_most_a_tenth(x, out):
    for i in range(x.shape[0]):
        out[i] = 1 if x[i] <= 0.1 else 0


@qgraph.kernel
def thirds(out):
    for i in range(out.shape[0]):
        out[i] = i / 3


@qgraph.kernel(default_float=qgraph.f32)
def thirds_f32(out):
    for i in range(out.shape[0]):
        out[i] = i / 3


@qgraph.kernel
def int_plus_float(x, out):
    for i in range(x.shape[0]):
        out[i] = (i - 1) * x[i]


def _random(n, dtype, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 2.0, n).astype(dtype)


def test_float32_arrays_make_literals_and_indices_float32(arch):
    x = _random(1000, F32)
    out = np.zeros(1000)
    call(literals_and_indices, x, out)
    i = np.arange(1000)
    expected = x * 0.1 + i.astype(F32) * F32(0.5) - 2  # NumPy 2: Python numbers are weak
    assert expected.dtype == F32
    assert is_float32_valued(out)
    np.testing.assert_allclose(out, expected, rtol=2e-7)


def test_float64_arrays_keep_float64(arch):
    x = _random(1000, F64)
    out = np.zeros(1000)
    call(literals_and_indices, x, out)
    expected = x * 0.1 + np.arange(1000) * 0.5 - 2
    np.testing.assert_allclose(out, expected, rtol=1e-15)
    assert not is_float32_valued(out)


def test_python_float_arguments_are_weak_and_numpy_float64_is_not(arch):
    x = _random(1000, F32)
    weak, strong = np.zeros(1000), np.zeros(1000)
    call(scaled_into, x, weak, 0.1)
    np.testing.assert_array_equal(weak, x * F32(0.1))
    call(scaled_into, x, strong, np.float64(0.1))
    np.testing.assert_array_equal(strong, x.astype(F64) * 0.1)
    assert scaled_into.stats.specialisations == 2  # a Python float and a NumPy float64 are two signatures


def test_a_local_started_from_a_literal_takes_the_array_precision(arch):
    x = _random(64 * 50, F32).reshape(64, 50)
    out = np.zeros(64)
    call(row_sums, x, out)
    expected = np.cumsum(x, axis=1, dtype=F32)[:, -1]  # summed in order, in float32
    assert is_float32_valued(out)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_math_and_float_of_an_index_follow_the_array(arch):
    x = _random(500, F32)
    out = np.zeros(500)
    call(lengths, x, out)
    assert is_float32_valued(out)
    expected = np.arange(500, dtype=F32) * (F32(1) / np.sqrt(x * x + F32(1e-6)))
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@qgraph.func
def blend(a, b, i):
    """Python numbers here take the types the call sites pass (lang.types.func_precision)."""
    return a * 0.1 + b / 3 + i * 0.5 + inner(a)


@qgraph.func
def inner(a):
    return math.sqrt(a * a + 0.2)


@qgraph.kernel
def blended(x, y, out):
    for i in range(x.shape[0]):
        out[i] = blend(x[i], y[i], i)


def test_helpers_compute_in_the_precision_their_callers_pass(arch):
    """A float32 call computes the helper (and the helper it calls) in float32, a float64 call in
    float64: the same rule as in a kernel body."""
    x, y = _random(300, F32), _random(300, F32)
    out = np.zeros(300)
    call(blended, x, y, out)
    i = np.arange(300, dtype=F32)
    expected = x * F32(0.1) + y / F32(3) + i * F32(0.5) + np.sqrt(x * x + F32(0.2))
    assert expected.dtype == F32 and is_float32_valued(out)
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    x64, y64 = x.astype(F64), y.astype(F64)
    call(blended, x64, y64, out)
    np.testing.assert_allclose(out, x64 * 0.1 + y64 / 3 + i * 0.5 + np.sqrt(x64 * x64 + 0.2), rtol=1e-14)
    assert not is_float32_valued(out)


def test_comparisons_with_literals_run_in_the_array_precision(arch):
    x = np.array([0.1, 0.2, 0.05], dtype=F32)
    out = np.zeros(3, dtype=np.int64)
    call(at_most_a_tenth, x, out)
    assert out.tolist() == [1, 0, 1]  # float32(0.1) <= 0.1 in float32, as NumPy 2 compares it


def test_default_float_decides_where_nothing_else_does(arch):
    out, out32 = np.zeros(100), np.zeros(100)
    call(thirds, out)
    np.testing.assert_array_equal(out, np.arange(100) / 3)
    call(thirds_f32, out32)
    np.testing.assert_array_equal(out32, np.arange(100, dtype=F32) / F32(3))


def test_integers_combined_with_float32_stay_float32(arch):
    x = _random(300, F32)
    out = np.zeros(300)
    call(int_plus_float, x, out)
    assert is_float32_valued(out)
    np.testing.assert_allclose(out, (np.arange(300) - 1).astype(F32) * x, rtol=1e-7)


def test_default_float_rejects_what_is_not_a_float_type():
    with pytest.raises(TypeError, match=r"default_float must be a float type \(qgraph.f32 or qgraph.f64\)"):
        qgraph.kernel(default_float=qgraph.i32)


def test_the_environment_variable_is_checked():
    from qgraph.runtime.settings import Settings

    assert Settings.from_environ({"QGRAPH_DEFAULT_FLOAT": "float32"}).default_float == "f32"
    assert Settings.from_environ({}).default_float == "f64"
    with pytest.raises(qgraph.QgraphError, match="QGRAPH_DEFAULT_FLOAT='half'"):
        Settings.from_environ({"QGRAPH_DEFAULT_FLOAT": "half"})


@qgraph.kernel
def float32_step(x, v, f, dt, n):
    for i in range(n):
        ax = 0.0
        for j in range(n):
            d = x[j] - x[i] + 0.5 * j
            inv = 1.0 / math.sqrt(d * d + 0.01)
            ax += d * inv * inv * inv
        v[i] += dt * (ax + f[i] * 2) / 3
        x[i] = min(x[i] + dt * v[i], 10.0) if x[i] > -1 else abs(x[i]) ** 2


def test_a_float32_kernel_has_no_float64_instructions(cuda_compiler):
    from helpers.cuda_offline import A, S, compile_with

    from qgraph.args.kinds import WEAK_FLOAT, WEAK_INT

    f32 = "".join(compile_with(float32_step, (A("f4", 1),) * 3 + (WEAK_FLOAT, WEAK_INT)))
    f64 = "".join(compile_with(float32_step, (A("f8", 1),) * 3 + (WEAK_FLOAT, WEAK_INT)))
    strong = "".join(compile_with(float32_step, (A("f4", 1),) * 3 + (S("f8"), WEAK_INT)))
    assert not _f64_arithmetic(f32), _f64_arithmetic(f32)  # dt arrives as a double: one cvt, no arithmetic
    assert _f64_arithmetic(f64)
    assert _f64_arithmetic(strong)  # a NumPy float64 argument is float64, as asked


def _f64_arithmetic(ptx: str) -> list[str]:
    return re.findall(r"^\s*(?:@!?%p\d+\s+)?(?:add|sub|mul|div|fma|sqrt|rcp|rsqrt|setp|min|max|abs|neg)\S*\.f64\b.*$",
                      ptx, re.M)


# --------------------------------------------------------------------------- powers


@qgraph.kernel
def integer_powers(x, out):
    for i in range(x.shape[0]):
        out[0, i] = x[i] ** 3
        out[1, i] = x[i] ** 0
        out[2, i] = x[i] ** 1
        out[3, i] = x[i] ** -2
        out[4, i] = (1.0 / x[i]) ** 3
        out[5, i] = x[i] ** 0.5
        out[6, i] = x[i] ** 2.5
        out[7, i] = x[i] * (i + 1) ** -2  # an int to a negative power: a float, as in Python


def test_integer_literal_powers_match_numpy(arch):
    """`x ** k` keeps x's precision for every integer k (0 and negative ones too), float exponents
    are pow as before, and an integer to a negative literal power is a float (Python's rule)."""
    for dtype, rtol in ((F32, 2e-7), (F64, 1e-15)):
        x = np.random.default_rng(6).uniform(-2.0, 2.0, 300).astype(dtype)
        x[np.abs(x) < 0.1] = dtype(0.5)
        out = np.zeros((8, 300))
        call(integer_powers, x, out)
        one, i = dtype(1), np.arange(1, 301)
        expected = [x ** 3, np.ones_like(x), x, one / (x * x), (one / x) ** 3,
                    np.abs(x) ** dtype(0.5), np.abs(x) ** dtype(2.5), x * (one / (i * i).astype(dtype))]
        for row, want in ((0, expected[0]), (1, expected[1]), (2, expected[2]), (3, expected[3]), (4, expected[4]),
                          (7, expected[7])):
            np.testing.assert_allclose(out[row], want, rtol=2 * rtol, err_msg=f"row {row}")
        positive = x > 0  # a negative base to a float power is NaN in both
        for row in (5, 6):
            np.testing.assert_allclose(out[row][positive], expected[row][positive], rtol=4 * rtol, err_msg=f"row {row}")
            assert np.isnan(out[row][~positive]).all()
        assert is_float32_valued(out[np.isfinite(out)]) == (dtype is F32)


@qgraph.kernel
def int_powers(out, n):
    for i in range(out.shape[1]):
        k = i - n
        out[0, i] = k ** 3
        out[1, i] = k ** 0
        out[2, i] = (i + 1) ** -1
        out[3, i] = (i + 1) ** -3 * 8


def test_integer_powers_of_integers_follow_python(arch):
    """Non-negative powers of ints stay ints; negative literal powers are floats (numba's integer
    power gave 0 for them), as `(i + 1) ** -1` is in Python."""
    out = np.zeros((4, 40))
    call(int_powers, out, 20)
    k = range(-20, 20)
    np.testing.assert_array_equal(out[0], [v ** 3 for v in k])
    np.testing.assert_array_equal(out[1], [v ** 0 for v in k])
    np.testing.assert_allclose(out[2], [(v + 1) ** -1 for v in range(40)], rtol=1e-15)
    np.testing.assert_allclose(out[3], [(v + 1) ** -3 * 8 for v in range(40)], rtol=1e-15)


def test_integer_literal_powers_are_multiplications(cuda_compiler):
    """`x ** 3` compiles to two multiplications, with no pow; `x ** 2.5` stays a pow (offline
    PTX for sm_90)."""
    from helpers.cuda_offline import offline_entry_body

    from qgraph.compiler.ptx_stats import ptx_counts

    args = (np.zeros(64, F32), np.zeros(64, F32))
    cube, pow_ = offline_entry_body(cube_only, args), offline_entry_body(pow_only, args)
    assert not re.search(r"\b(call|lg2|ex2)\b", cube) and len(re.findall(r"\bmul\.f32", cube)) == 2, cube
    assert ptx_counts(pow_)["ptx"] > ptx_counts(cube)["ptx"] + 20  # libdevice's powf, inlined


@qgraph.kernel
def cube_only(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] ** 3


@qgraph.kernel
def pow_only(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] ** 2.5
