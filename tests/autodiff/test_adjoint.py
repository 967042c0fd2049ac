"""Adjoint kernels (lang/adjoint): kernel.grad against central finite differences in float64 on
random data, on both backends, for every construct of the kernel language that carries a
gradient; float32 against float64; integers carry none; deterministic kernels repeat their
gradients bit for bit. The errors of what cannot be differentiated are in tests/lang/test_adjoint_errors.py.

A kernel call maps the arrays it gets to the arrays it leaves. With a random seed per float
array, L = sum over arrays of sum(seed * array after the call) has the gradient
dL/d(array before the call) for each float array: kernel.grad computes it from the seeds
placed in the arrays' `.grad` (the gradients of what the call left), central differences of
L compute it from forward calls alone. Each call gets fresh qgraph copies of NumPy arguments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.gradients import RNG, adjoint_grads, check_gradients, seeds_for, uniform

import qgraph
from qgraph.lang.adjoint import rules

V3 = qgraph.vector(3, qgraph.f64)
M33 = qgraph.matrix(3, 3, qgraph.f64)


# --------------------------------------------------------------------------- the check


N = 5


# --------------------------------------------------------------------------- arithmetic


@qgraph.kernel
def arithmetic(x, w, out):
    for i in range(x.shape[0]):
        a = x[i]
        b = w[i]
        out[i, 0] = a + b - 2.0 * a * b + 1.5
        out[i, 1] = a / b - b / 3.0 + 1.0 / a
        out[i, 2] = a ** 3 + b ** 2.5 + a ** b + 2.0 ** a
        out[i, 3] = -a * -(b - a) + (+b)
        out[i, 4] = (a + 2.3) % b - (a + 2.3) // b
        t = a * b
        t += a
        t -= 0.5 * b
        t *= a
        t /= b
        out[i, 5] = t


def test_arithmetic(arch):
    check_gradients(arithmetic, uniform(N), uniform(N, lo=1.05, hi=1.1), np.zeros((N, 6)))


# --------------------------------------------------------------------------- every math function

UNARY_NAMES = ["sin", "cos", "tan", "exp", "expm1", "exp2", "log", "log2", "log10", "log1p", "sqrt", "sinh",
               "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "fabs", "abs", "erf", "erfc",
               "degrees", "radians"]


@qgraph.kernel
def math_unary(x, out):
    for i in range(x.shape[0]):
        a = x[i]
        out[i, 0] = math.sin(a)
        out[i, 1] = math.cos(a)
        out[i, 2] = math.tan(a)
        out[i, 3] = math.exp(a)
        out[i, 4] = math.expm1(a)
        out[i, 5] = math.exp2(a)
        out[i, 6] = math.log(a)
        out[i, 7] = math.log2(a)
        out[i, 8] = math.log10(a)
        out[i, 9] = math.log1p(a)
        out[i, 10] = math.sqrt(a)
        out[i, 11] = math.sinh(a)
        out[i, 12] = math.cosh(a)
        out[i, 13] = math.tanh(a)
        out[i, 14] = math.asin(a)
        out[i, 15] = math.acos(a)
        out[i, 16] = math.atan(a)
        out[i, 17] = math.asinh(a)
        out[i, 18] = math.acosh(1.0 + a)
        out[i, 19] = math.atanh(a)
        out[i, 20] = math.fabs(a - 0.5)
        out[i, 21] = abs(a - 0.5)
        out[i, 22] = math.erf(a)
        out[i, 23] = math.erfc(a)
        out[i, 24] = math.degrees(a)
        out[i, 25] = math.radians(a)


@qgraph.kernel
def numpy_unary(x, out):
    for i in range(x.shape[0]):
        a = x[i]
        out[i, 0] = np.sin(a) + np.cos(a) + np.tan(a)
        out[i, 1] = np.exp(a) + np.expm1(a) + np.exp2(a)
        out[i, 2] = np.log(a) + np.log2(a) + np.log10(a) + np.log1p(a)
        out[i, 3] = np.sqrt(a) * np.sinh(a) + np.cosh(a) * np.tanh(a)
        out[i, 4] = np.arcsin(a) + np.arccos(a) * np.arctan(a)
        out[i, 5] = np.arcsinh(a) + np.arccosh(1.0 + a) + np.arctanh(a)
        out[i, 6] = np.fabs(a - 0.5) + np.abs(0.5 - a) * np.absolute(a - 0.5)
        out[i, 7] = np.degrees(a) + np.radians(a) + np.rad2deg(a) * np.deg2rad(a)


def test_every_unary_rule_is_tested():
    assert sorted(UNARY_NAMES) == sorted(rules._UNARY)


def test_math_functions(arch):
    xs = np.concatenate([uniform(N - 2), [0.3, 0.7]])  # both sides of abs's kink at 0.5
    check_gradients(math_unary, xs, np.zeros((N, len(UNARY_NAMES))))


def test_numpy_functions(arch):
    check_gradients(numpy_unary, uniform(N), np.zeros((N, 8)))


@qgraph.kernel
def binary_functions(x, y, out):
    for i in range(x.shape[0]):
        a = x[i]
        b = y[i]
        out[i, 0] = math.pow(a, b) + math.pow(a, 3.0) + b ** a
        out[i, 1] = math.atan2(a, b) + np.arctan2(b - 0.5, a)
        out[i, 2] = math.hypot(a, b) * np.hypot(b, 2.0 * a)
        out[i, 3] = math.copysign(a, b - 0.5) + np.copysign(b, 0.5 - a)
        out[i, 4] = math.fmod(a + 2.3, b + 0.55) + np.fmod(b + 2.3, a + 0.55)


def test_binary_functions(arch):
    check_gradients(binary_functions, uniform(N), uniform(N), np.zeros((N, 5)))


@qgraph.kernel
def numpy_power(x, y, out):
    for i in range(x.shape[0]):
        out[i] = np.power(x[i], y[i]) + np.power(y[i], 2.0)


def test_numpy_power(cpu):  # CUDA: numba-cuda has no lowering of the np.power ufunc (the forward fails too)
    check_gradients(numpy_power, uniform(N), uniform(N), np.zeros(N))


@qgraph.kernel
def min_max(x, y, out):
    for i in range(x.shape[0]):
        a = x[i]
        b = y[i]
        out[i, 0] = min(a, b) + 2.0 * max(a, b)
        out[i, 1] = max(a, b, 0.5) - min(a * b, 0.25, b)
        out[i, 2] = np.minimum(a, b) * np.maximum(a, b)
        out[i, 3] = np.fmin(a, 0.5) + np.fmax(b, 0.5)
        out[i, 4] = qgraph.clamp(a, 0.3, 0.6) + abs(a - b)


def test_min_max_abs(arch):
    check_gradients(min_max, uniform(8), uniform(8), np.zeros((8, 5)))


@qgraph.kernel
def casts(x, out):
    for i in range(x.shape[0]):
        a = x[i]
        k = int(a * 10.0)  # no gradient through the integer
        out[i] = float(a) * np.float64(a) + k * a + float(k) + math.floor(a * 10.0) * a


def test_casts(arch):
    grads = check_gradients(casts, uniform(N), np.zeros(N))
    assert np.all(np.isfinite(grads[0]))


# --------------------------------------------------------------------------- vectors and matrices


@qgraph.kernel
def vector_code(x: V3[:], y: V3[:], m: M33[:], out, vout: V3[:]):
    for i in range(x.shape[0]):
        a = x[i]
        b = y[i]
        c = qgraph.cross(a, b)
        out[i] = qgraph.dot(a, b) + qgraph.norm(c) + qgraph.dot(m[i] @ a, b) + a.x * b.z - a[1]
        vout[i] = qgraph.normalized(c) * a.y + m[i] @ b + 2.0 * a - b / 3.0


def test_vectors_and_matrices(arch):
    check_gradients(vector_code, RNG.standard_normal((N, 3)), RNG.standard_normal((N, 3)),
                    RNG.standard_normal((N, 3, 3)), np.zeros(N), np.zeros((N, 3)))


# --------------------------------------------------------------------------- helpers


@qgraph.func
def soft(a, t):
    if a > t:
        return a - 0.5 * t
    return a * a / (2.0 * t)


@qgraph.func
def polar(a, b):
    r = math.sqrt(a * a + b * b)
    return r, math.atan2(b, a)


@qgraph.func
def piecewise(a):
    if a < 0.35:
        return math.sin(a)
    elif a < 0.6:
        return soft(a, 0.45) * 2.0
    return a ** 2


def test_helpers_with_branches_early_returns_and_tuples(arch):
    @qgraph.kernel
    def helpers(x, y, out):
        for i in range(x.shape[0]):
            r, theta = polar(x[i], y[i])
            out[i] = soft(x[i], 0.5) + r * theta + piecewise(y[i])

    check_gradients(helpers, uniform(8), uniform(8), np.zeros(8))


# --------------------------------------------------------------------------- serial loops


@qgraph.kernel
def weighted_rows(w, x, y):
    for i in range(x.shape[0]):
        s = 0.0
        for k in range(x.shape[1]):
            s += w[k] * x[i, k]
        y[i] = math.tanh(s)


@qgraph.kernel
def nested_loops(a, x, out):
    for i in range(out.shape[0]):
        s = 0.0
        for k in range(a.shape[1]):
            t = 0.0
            for m in range(x.shape[1]):
                t += x[k, m] * x[k, m]
            s += a[i, k] * t
            s -= 0.5 * a[i, k]
        out[i] = s


@qgraph.kernel
def loop_shapes(x, out):
    for i in range(x.shape[0]):
        s = 0.0
        for k in range(x.shape[1] - 1, -1, -1):  # backwards
            s += x[i, k] * k
        for k in range(1, x.shape[1], 2):  # a step of two
            if x[i, k] > 0.5:
                s += x[i, k] * x[i, k]
            else:
                s -= math.exp(x[i, k])
        s = s * 0.5  # a linear update of the accumulator
        for k in range(x.shape[1]):
            s = 0.9 * s + x[i, k]
        out[i] = s


def test_serial_loop_accumulation(arch):
    check_gradients(weighted_rows, uniform(4), uniform(N, 4), np.zeros(N))


def test_nested_loops(arch):
    check_gradients(nested_loops, uniform(N, 3), uniform(3, 4), np.zeros(N))


def test_reversed_strided_and_branching_loops(arch):
    check_gradients(loop_shapes, uniform(N, 5), np.zeros(N))


# --------------------------------------------------------------------------- branches and choices


@qgraph.kernel
def branches(x, w, y):
    for i in range(x.shape[0]):
        a = x[i]
        if a > 0.5:
            b = a * w[i]
        elif a > 0.3:
            b = math.exp(a)
        else:
            b = w[i] ** 2
        c = a * a if b > 0.4 else b * 3.0
        d = a if (a > 0.45 and w[i] > 0.3) or a < 0.25 else w[i]
        e = (b - 0.2) and c  # values: c unless b is exactly 0.2
        f = (a - a) or w[i]  # 0.0 is false: w[i]
        y[i] = b + c + d * e + f


def test_branches_if_expressions_and_boolean_operators(arch):
    check_gradients(branches, uniform(12, lo=0.1, hi=0.9), uniform(12), np.zeros(12))


# --------------------------------------------------------------------------- arrays: reductions, gathers, scatters


@qgraph.kernel
def reductions(x, w, out):
    for i in range(x.shape[0]):
        out[0] += x[i] * x[i]
        out[1] += math.sin(x[i]) * w[0]
        out[2] -= w[1] * x[i]


@qgraph.kernel
def gathers(x, idx, w, y):
    for i in range(y.shape[0]):
        y[i] = x[idx[i]] * w[i] + x[idx[i] + 1] ** 2


@qgraph.kernel
def scatters(v, idx, w, a):
    for i in range(v.shape[0]):
        a[idx[i]] += v[i] * w[i]
        a[idx[i] + 1] -= v[i] * v[i]
        qgraph.atomic_add(a, idx[i], math.sin(w[i]))
        qgraph.atomic_sub(a, 0, v[i] * 0.5)


def test_reductions(arch):
    check_gradients(reductions, uniform(7), uniform(2), np.zeros(3))


def test_gathers(arch):
    idx = np.array([0, 2, 2, 1, 0, 3], np.int32)  # repeated: the adjoint's scatter collides
    check_gradients(gathers, uniform(5), idx, uniform(6), np.zeros(6))


def test_scatters_and_atomics(arch):
    idx = np.array([0, 2, 2, 1, 0, 3], np.int64)
    check_gradients(scatters, uniform(6), idx, uniform(6), uniform(5))


# --------------------------------------------------------------------------- in-place updates


@qgraph.kernel
def in_place(x, v, dt: float):
    for i in range(x.shape[0]):
        v[i] -= dt * x[i]
        x[i] += dt * v[i]
        x[i] = x[i] * x[i]
        v[i] *= 0.9
        v[i] = math.sin(v[i]) + x[i]


def test_in_place_updates(arch):
    check_gradients(in_place, uniform(N), uniform(N), 0.1, tape=True)


# --------------------------------------------------------------------------- tasks


@qgraph.kernel
def serial_tasks(x, out):
    out[0] = x[0] * x[1] + math.cos(x[2])
    for k in qgraph.serial(range(x.shape[0])):
        out[1] = out[1] * 0.5 + x[k] * x[k]


@qgraph.kernel
def two_tasks(x, y, w, out):
    for i in range(x.shape[0]):
        y[i] = math.sin(x[i]) * w[0] + x[i] * x[i]
    for i in range(x.shape[0]):
        out[0] += y[i] * y[i]
    out[1] = y[0] * out[0]


def test_serial_tasks(arch):
    check_gradients(serial_tasks, uniform(4), uniform(2))


def test_multi_task_kernel(arch):
    check_gradients(two_tasks, uniform(N), np.zeros(N), uniform(1), np.zeros(2))


@qgraph.kernel
def stencil_2d(u, out):
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        out[i, j] = u[i - 1, j] + u[i + 1, j] - 4.0 * u[i, j] * u[i, j] + u[i, j - 1] * u[i, j + 1]


@qgraph.kernel
def stencil_3d(u, c, out):
    for i, j, k in qgraph.ndrange((1, u.shape[0] - 1), u.shape[1], (0, u.shape[2])):
        out[i, j, k] = c[0] * (u[i - 1, j, k] - 2.0 * u[i, j, k] + u[i + 1, j, k]) + math.sin(u[i, j, k]) * c[1]


def test_ndrange_2d(arch):
    check_gradients(stencil_2d, uniform(5, 4), np.zeros((5, 4)))


def test_ndrange_3d(arch):
    check_gradients(stencil_3d, uniform(4, 3, 2), uniform(2), np.zeros((4, 3, 2)))


# --------------------------------------------------------------------------- dtypes


def test_float32_against_float64(arch):
    args64 = [uniform(N), uniform(N, lo=1.05, hi=1.1), np.zeros((N, 6))]
    seeds = seeds_for(args64)
    expected = adjoint_grads(arithmetic, args64, seeds)
    args32 = [a.astype(np.float32) for a in args64]
    found = adjoint_grads(arithmetic, args32, {k: s.astype(np.float32) for k, s in seeds.items()})
    for k in expected:
        assert found[k].dtype == np.float32
        np.testing.assert_allclose(found[k], expected[k], rtol=2e-4, atol=2e-5)


def test_integer_arrays_carry_no_gradient(arch):
    @qgraph.kernel
    def scaled(x, k, y):
        for i in range(x.shape[0]):
            y[i] = x[i] * k[i] + k[i] * k[i]
            k[i] += 1

    counts = np.array([1, 2, 3, 4, 5], np.int32)
    grads = check_gradients(scaled, uniform(N), counts, np.zeros(N), tape=True)  # k: read, then overwritten
    assert set(grads) == {0, 2}
    k = qgraph.from_numpy(counts)
    assert k.grad is None and not k.requires_grad
    with pytest.raises(TypeError, match="int32 array has no gradient"):
        k.requires_grad = True
    with pytest.raises(TypeError, match="has no gradient"):
        qgraph.from_numpy(counts, requires_grad=True)


# --------------------------------------------------------------------------- deterministic


@qgraph.kernel(deterministic=True)
def deterministic_sum(x, w, out):
    for i in range(x.shape[0]):
        out[0] += math.sin(x[i]) * w[0]
        out[1] += x[i] * x[i] * w[1]


def test_deterministic_gradients_repeat_bit_for_bit(arch):
    x = RNG.standard_normal(50_000)
    w = uniform(2)
    seeds = seeds_for([x, w, np.zeros(2)])
    first = adjoint_grads(deterministic_sum, [x, w, np.zeros(2)], seeds)
    for _ in range(3):
        again = adjoint_grads(deterministic_sum, [x, w, np.zeros(2)], seeds)
        for k in first:
            assert np.array_equal(first[k], again[k])
    small = [uniform(6), w, np.zeros(2)]
    check_gradients(deterministic_sum, *small)


# --------------------------------------------------------------------------- larger programs


@qgraph.func
def poly(a, n):
    s = 0.0
    for k in range(n):
        s += a ** k / (k + 1.0)
    return s


@qgraph.func
def early(a, b):
    if a > 0.5:
        if b > 0.5:
            return a * b
        c = a + b
    else:
        c = a - b
    c = c * c
    return c + a


@qgraph.kernel
def helper_loops_and_data_bounds(x, y, cnt, out):
    for i in range(x.shape[0]):
        t = x[i]
        if y[i] > 0.5:
            t = t * y[i]
        s = 0.0
        for k in range(cnt[i]):
            s += poly(t, 3) * y[k]
        for k in range(i):
            s += early(x[k], y[i])
        out[i] = s + t


@qgraph.kernel
def vector_accumulator(x: V3[:], out: V3[:], z):
    for i in range(x.shape[0]):
        acc = V3(0.0, 0.0, 0.0)
        for k in range(x.shape[0]):
            acc += x[k] * z[i]
        out[i] = acc * qgraph.norm(x[i])
        z[i] = qgraph.dot(acc, acc)


@qgraph.kernel
def element_history(x, y, loss):
    for i in range(x.shape[0]):
        y[i] = x[i]
        y[i] += x[i] * x[i]
        y[i] = y[i] * 2.0
        if x[i] > 0.5:
            y[i] = y[i] * x[i]
        w = int(x[i] * 4.0)
        loss[()] += y[i] * x[w]
        for _ in range(3):
            y[i] = y[i] * 0.5 + x[i]


@qgraph.kernel
def serial_locals(x, out):
    s = 0.0
    for k in qgraph.serial(range(x.shape[0])):
        s += x[k] * x[k]
    out[0] = math.sqrt(s)
    for k in qgraph.serial(range(x.shape[0] - 1, 0, -2)):
        out[1] += x[k] * s


def test_helpers_with_loops_and_data_dependent_bounds(arch):
    counts = np.array([0, 1, 2, 3, 2, 1], np.int32)  # trip counts read from an array
    check_gradients(helper_loops_and_data_bounds, uniform(6), uniform(6), counts, np.zeros(6))


def test_a_vector_accumulator(arch):
    x = RNG.standard_normal((4, 3))
    check_gradients(vector_accumulator, x, np.zeros((4, 3)), uniform(4), tape=True)  # z: read, then overwritten


def test_stores_and_reads_of_one_element_with_branches(arch):
    check_gradients(element_history, uniform(6), np.zeros(6), np.zeros(()))


def test_serial_task_locals_and_a_strided_serial_loop(arch):
    check_gradients(serial_locals, uniform(5), np.zeros(2))


# --------------------------------------------------------------------------- structs


@qgraph.struct
class Scaled:
    x: object
    k: float


@qgraph.kernel
def with_struct(s: Scaled, w, out):
    for i in range(out.shape[0]):
        out[i] = s.k * s.x[i] ** 2 * w[i] + math.sin(w[i])


def test_struct_arguments_pass_gradients_of_the_other_arrays(arch):
    fields = Scaled(qgraph.from_numpy(uniform(N)), 1.5)
    check_gradients(with_struct, fields, uniform(N), np.zeros(N))


def test_a_struct_field_with_a_gradient_is_an_error(arch):
    x = qgraph.from_numpy(uniform(N), requires_grad=True)
    w, out = qgraph.from_numpy(uniform(N), requires_grad=True), qgraph.ndarray(qgraph.f64, (N,), requires_grad=True)
    with_struct(Scaled(x, 1.5), w, out)
    out.grad.fill(1.0)
    with pytest.raises(qgraph.QgraphError, match="struct"):
        with_struct.grad(Scaled(x, 1.5), w, out)


def test_kernel_grad_of_a_call_that_overwrote_what_its_adjoint_reads(arch):
    @qgraph.kernel
    def square(x):
        for i in range(x.shape[0]):
            x[i] = x[i] * x[i]

    x = qgraph.from_numpy(uniform(N), requires_grad=True)
    square(x)
    x.grad.fill(1.0)
    with pytest.raises(qgraph.QgraphError, match="Tape"):
        square.grad(x)


# --------------------------------------------------------------------------- CUDA code without a GPU


def _a(dtype: str, ndim: int, element: tuple = ()) -> str:
    from qgraph.args.kinds import array_sig

    return array_sig(np.dtype(dtype), ndim + len(element), True, element=element)


def _s(dtype: str) -> str:
    from qgraph.args.kinds import scalar_sig

    return scalar_sig(np.dtype(dtype))


F8, F4, I4, I8 = (_a("f8", 1), _a("f4", 1), _a("i4", 1), _a("i8", 1))
CUDA_CASES = [
    (arithmetic, (F8, F8, _a("f8", 2))), (arithmetic, (F4, F4, _a("f4", 2))), (math_unary, (F8, _a("f8", 2))),
    (numpy_unary, (F8, _a("f8", 2))), (numpy_unary, (F4, _a("f4", 2))), (binary_functions, (F8, F8, _a("f8", 2))),
    (min_max, (F8, F8, _a("f8", 2))), (casts, (F8, F8)),
    (vector_code, (_a("f8", 1, (3,)), _a("f8", 1, (3,)), _a("f8", 1, (3, 3)), F8, _a("f8", 1, (3,)))),
    (weighted_rows, (F8, _a("f8", 2), F8)), (nested_loops, (_a("f8", 2), _a("f8", 2), F8)),
    (loop_shapes, (_a("f8", 2), F8)), (branches, (F8, F8, F8)), (reductions, (F8, F8, F8)),
    (reductions, (F4, F4, F4)), (gathers, (F8, I4, F8, F8)), (scatters, (F8, I8, F8, F8)),
    (in_place, (F8, F8, _s("f8"))), (serial_tasks, (F8, F8)), (two_tasks, (F8, F8, F8, F8)),
    (stencil_2d, (_a("f8", 2), _a("f8", 2))), (stencil_3d, (_a("f8", 3), F8, _a("f8", 3))),
    (deterministic_sum, (F8, F8, F8)), (helper_loops_and_data_bounds, (F8, F8, I4, F8)),
    (vector_accumulator, (_a("f8", 1, (3,)), _a("f8", 1, (3,)), F8)), (element_history, (F8, F8, _a("f8", 0))),
    (serial_locals, (F8, F8)),
]


@pytest.mark.parametrize("kernel,key", CUDA_CASES, ids=[f"{k.__name__}-{key[0]}" for k, key in CUDA_CASES])
def test_adjoints_compile_for_cuda(cuda_compiler, monkeypatch, kernel, key):
    """Every adjoint above compiles to PTX for sm_90 (as the CUDA backend compiles it: the
    kernel's deterministic option included), one entry per task, without a GPU."""
    from types import SimpleNamespace

    import numba.cuda.dispatcher as dispatcher
    from helpers.cuda_offline import compile_offline

    from qgraph.lang.adjoint import adjoint_source

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=(9, 0)))
    src = kernel.source
    grads = tuple(p for p, sig in zip(src.param_names, key) if sig.startswith("float"))
    full = key + tuple(key[src.param_names.index(g)] for g in grads)
    ptx, entries, sizes = compile_offline(SimpleNamespace(source=adjoint_source(src, grads)), full,
                                          deterministic=bool(kernel.deterministic))  # None: unset
    assert len(entries) == len(src.tasks) and all(size > 0 for size in sizes)
    assert all(".entry" in text for _, text in ptx)
