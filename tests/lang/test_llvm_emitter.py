"""The CPU's LLVM emitter (lang.llvm, compiler.llvm_cpu): a serial form it compiles gives numba's
results to the bit. A family of kernels covering numba's typing rules where they are easy to get
wrong (small ints and float32 meeting literals, floor division and remainder of negatives and by
zero, literal powers, NaN in min/max, negative indices, bool arrays, int64 wrap-around, variables
unified across assignments, loops with steps, breaks and helpers) runs emitted and then with
QGRAPH_EMITTER=0 on random data; both must be the emitted and the numba function respectively."""

from __future__ import annotations

import math

import numpy as np
import pytest

import qgraph


@qgraph.func
def _hypot_step(a, b):
    s = a * a + b * b
    return math.sqrt(s) if s > 0.0 else 0.0


@qgraph.func
def _polar(a, b):
    return math.hypot(a, b), math.atan2(b, a)


@qgraph.kernel
def tuples_and_bools(x, f, out):
    for i in range(x.shape[0]):
        r, t = _polar(x[i], f[i])  # a helper returning a tuple of floats
        flag = 0
        if x[i] > f[i]:
            flag = x[i] > 0.0  # an int then a bool: numba's int64
        out[i, 0] = r
        out[i, 1] = t
        out[i, 2] = flag + math.hypot(3, i)


@qgraph.kernel
def float_division_and_steps(x, f, step: int, out):
    for i in range(x.shape[0]):
        out[i, 0] = x[i] // f[i]  # CPython's float floor division, as numba computes it
        out[i, 1] = x[i] % f[i]
        out[i, 2] = x[i] % -1.5 + x[i] // 0.25
        out[i, 3] = x[i] // 0.0 + f[i] % 0.0  # numpy's error model: inf and nan
        s = 0.0
        for j in range(i, x.shape[0], step):  # a step held in a variable: the runtime's trip count
            s += x[j]
        out[i, 4] = s


@qgraph.kernel
def mixed_types(x, f, n, m, out):
    for i in range(x.shape[0]):
        out[i, 0] = f[i] * 0.5  # float32 * a float literal: float64
        out[i, 1] = f[i] + m[i]  # float32 + int32: float64
        out[i, 2] = f[i] + np.int16(3)  # float32 + int16: float32
        out[i, 3] = n[i] / 3  # int / int: float64
        out[i, 4] = m[i] * m[i] * 65537  # int32 arithmetic in int64
        out[i, 5] = np.float32(x[i]) * np.float32(1.1)


@qgraph.kernel
def integer_division(n, k: int, out):
    for i in range(n.shape[0]):
        out[i, 0] = n[i] // k
        out[i, 1] = n[i] % k
        out[i, 2] = n[i] // 0  # numpy's error model: 0
        out[i, 3] = n[i] % 0
        out[i, 4] = -n[i] // 7
        out[i, 5] = (n[i] << 3) ^ (n[i] >> 1) & 7
        out[i, 6] = n[i] * 1_000_000_007 * 1_000_000_007  # wraps as int64


@qgraph.kernel
def powers_and_math(x, f, out):
    for i in range(x.shape[0]):
        out[i, 0] = x[i] ** 3
        out[i, 1] = (abs(x[i]) + 0.5) ** -2
        out[i, 2] = abs(x[i]) ** 0.5
        out[i, 3] = f[i] ** 2
        out[i, 4] = math.exp(f[i]) + math.tanh(x[i]) + math.atan2(x[i], f[i])
        out[i, 5] = math.floor(x[i] * 10.0) + math.ceil(f[i]) + math.trunc(-x[i])
        out[i, 6] = np.floor(f[i]) + math.sqrt(abs(f[i])) + math.log(abs(x[i]) + 1.0)
        out[i, 7] = _hypot_step(x[i], f[i])


@qgraph.kernel
def nan_min_max_and_branches(x, f, flags, out):
    for i in range(x.shape[0]):
        out[i, 0] = min(x[i], f[i])
        out[i, 1] = max(x[i], 0.0, f[i])
        out[i, 2] = x[i] if x[i] > f[i] else -x[i]
        out[i, 3] = 1.0 if flags[i] and not x[i] <= 0.0 else 0.0
        out[i, 4] = x[-1 - i]  # a negative index counts from the end
        out[i, 5] = math.isnan(x[i]) + 2 * math.isinf(f[i])


@qgraph.kernel
def loops_and_unified_locals(x, n, out):
    for i in range(x.shape[0]):
        s = 0  # an int, then a float: one float64 variable, as numba unifies it
        for j in range(i, -1, -2):
            s += x[j]
        k = 0
        while True:
            k += 1
            if k * k > n[i] % 50 or k > 20:
                break
            if k % 3 == 0:
                continue
            s += 0.25
        out[i, 0] = s
        out[i, 1] = k


@qgraph.kernel
def a_device_loop_and_an_atomic(x, total, count, passes: int):
    for _ in qgraph.repeat(passes):
        for i in range(x.shape[0]):
            qgraph.atomic_add(total, 0, x[i])
            qgraph.atomic_max(count, 0, i)


def _data(rng, size):
    x = rng.standard_normal(size)
    x[::7] = np.nan
    x[3::11] = 0.0
    f = rng.standard_normal(size).astype(np.float32)
    f[5::13] = np.inf
    n = rng.integers(-10**6, 10**6, size)
    m = rng.integers(-50_000, 50_000, size).astype(np.int32)
    flags = rng.random(size) > 0.5
    return x, f, n, m, flags


CASES = {
    "float_division_and_steps": (float_division_and_steps,
                                 lambda d: (d["x"], d["f"], 3, np.zeros((d["size"], 5)))),
    "tuples_and_bools": (tuples_and_bools, lambda d: (d["x"], d["f"], np.zeros((d["size"], 3)))),
    "mixed_types": (mixed_types, lambda d: (d["x"], d["f"], d["n"], d["m"], np.zeros((d["size"], 6)))),
    "integer_division": (integer_division, lambda d: (d["n"], -7, np.zeros((d["size"], 7), np.int64))),
    "powers_and_math": (powers_and_math, lambda d: (d["x"], d["f"], np.zeros((d["size"], 8)))),
    "nan_min_max_and_branches": (nan_min_max_and_branches,
                                 lambda d: (d["x"], d["f"], d["flags"], np.zeros((d["size"], 6)))),
    "loops_and_unified_locals": (loops_and_unified_locals, lambda d: (d["x"], d["n"], np.zeros((d["size"], 2)))),
    "a_device_loop_and_an_atomic": (a_device_loop_and_an_atomic,
                                    lambda d: (np.abs(d["f"][:40]).clip(0, 9).astype(np.float64), np.zeros(1),
                                               np.zeros(1, np.int64), 3)),
}


def _run(kernel, make, data):
    args = make(data)
    kernel(*args)
    launcher, values = kernel.launcher_for(args)
    key, _ = launcher.resolve(values)
    program = launcher._signatures[key].program
    return [np.array(a) for a in args if isinstance(a, np.ndarray)], program


@pytest.mark.parametrize("size", [1, 37, 300])
@pytest.mark.parametrize("case", sorted(CASES))
def test_an_emitted_serial_form_gives_numbas_results_to_the_bit(cpu, case, size, monkeypatch):
    kernel, make = CASES[case]
    x, f, n, m, flags = _data(np.random.default_rng(size), size)
    data = {"x": x, "f": f, "n": n, "m": m, "flags": flags, "size": size}
    monkeypatch.setenv("QGRAPH_EMITTER", "strict")
    emitted, program = _run(kernel, make, data)
    assert program.serial_emitted is None and type(program.serial_runner).__name__ == "builtin_function_or_method"
    monkeypatch.setenv("QGRAPH_EMITTER", "0")
    qgraph.init("cpu")  # drops the compiled kernels: the same signature compiles again, by numba
    by_numba, program = _run(kernel, make, data)
    assert program.serial_emitted == "QGRAPH_EMITTER=0"
    for a, b in zip(emitted, by_numba):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))  # bit for bit, NaNs included


def test_values_against_numpy(cpu):
    x = np.random.default_rng(0).standard_normal(64)
    f = x.astype(np.float32)
    out = np.zeros((64, 8))
    powers_and_math(x, f, out)
    np.testing.assert_allclose(out[:, 0], x**3)
    np.testing.assert_allclose(out[:, 1], (np.abs(x) + 0.5) ** -2.0)
    np.testing.assert_allclose(out[:, 3], (f.astype(np.float32) ** 2).astype(np.float64))
    # b * b of the float32 argument is float32 arithmetic (numba's rule), then float64 with a * a
    np.testing.assert_allclose(out[:, 7], np.sqrt(x * x + (f * f).astype(np.float64)), rtol=1e-15)
    n = np.arange(-20, 20)
    out = np.zeros((40, 7), np.int64)
    integer_division(n, -7, out)
    np.testing.assert_array_equal(out[:, 0], n // -7)
    np.testing.assert_array_equal(out[:, 1], n % -7)
    np.testing.assert_array_equal(out[:, 2:4], 0)


def test_code_the_emitter_does_not_cover_is_numbas_and_says_why(cpu):
    @qgraph.kernel
    def draws(out):
        for i in range(out.shape[0]):
            out[i] = math.fmod(out[i] + 7.5, 2.0)

    out = np.arange(5.0)
    draws(out)
    np.testing.assert_allclose(out, np.fmod(np.arange(5.0) + 7.5, 2.0))
    launcher, values = draws.launcher_for((out,))
    program = launcher._signatures[launcher.resolve(values)[0]].program
    assert "_qg_fmod" in program.serial_emitted  # the call it left to numba, named


def test_a_wrong_argument_to_the_emitted_function_raises_instead_of_crashing(cpu):
    x = np.zeros(4)
    out = np.zeros((4, 6))
    mixed_types(x, x.astype(np.float32), np.zeros(4, np.int64), np.zeros(4, np.int32), out)
    launcher, values = mixed_types.launcher_for((x, x.astype(np.float32), np.zeros(4, np.int64),
                                                 np.zeros(4, np.int32), out))
    program = launcher._signatures[launcher.resolve(values)[0]].program
    with pytest.raises(TypeError, match="must be a NumPy array"):
        program.serial_runner([1.0], x, x, x, out, np.zeros(40, np.int64))
    with pytest.raises(TypeError, match="takes 6 arguments"):
        program.serial_runner(x)


@qgraph.kernel
def inverse_square(x):
    for i in range(x.shape[0]):
        x[i] = x[i] ** -2


@pytest.mark.parametrize("emitter", ["strict", "0"])
def test_zero_to_a_negative_literal_power_raises_as_numba_does(cpu, emitter, monkeypatch):
    monkeypatch.setenv("QGRAPH_EMITTER", emitter)
    qgraph.init("cpu")
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        inverse_square(np.array([2.0, 0.0]))
    x = np.array([2.0, 4.0])
    inverse_square(x)  # the next good call works
    np.testing.assert_array_equal(x, [0.25, 0.0625])


# ---------------------------------------------------------------- the constructs where they meet the rest


def _family_run(place: str, target: str, grad: bool) -> list[np.ndarray]:
    """One kernel of the inner-sum family (helpers.lanes_family: in a repeat or cond region, after an
    inner loop, in a helper, into a vec2, a struct field, a 0-d array, float32 with float32 literals)
    on fixed data; its outputs, and the inputs' gradients through kernel.grad where `grad`."""
    from helpers.lanes_family import FAMILY, arrays

    x, w, out = arrays(target, 40, np.random.default_rng(len(place) * 7 + len(target)))
    if grad:
        x, w, out = (qgraph.from_numpy(a.to_numpy(), requires_grad=True) for a in (x, w, out))
    kernel, flag = getattr(FAMILY, f"k_{place}_{target}"), qgraph.from_numpy(np.ones(1, np.int32))
    target_arg = FAMILY.Sums(out) if target == "struct" else out
    kernel(x, w, target_arg, 3, flag)
    if not grad:
        return [out.to_numpy()]
    out.grad.from_numpy(np.linspace(-1.0, 1.0, out.shape[0]).astype(out.dtype))
    kernel.grad(x, w, target_arg, 3, flag)
    return [out.to_numpy(), x.grad.to_numpy(), w.grad.to_numpy()]


def _family_cases():
    from helpers.lanes_family import PLACES, TARGETS

    values = [(p, t, False) for p in PLACES for t in TARGETS]
    return values + [(p, t, True) for p in ("top", "repeat", "after_loop", "helper_term")
                     for t in ("local", "element", "float32")]


@pytest.mark.parametrize("place,target,grad", _family_cases())
def test_the_inner_sum_family_emitted_is_numbas_to_the_bit(cpu, place, target, grad, monkeypatch):
    monkeypatch.setenv("QGRAPH_EMITTER", "strict")
    emitted = _family_run(place, target, grad)
    monkeypatch.setenv("QGRAPH_EMITTER", "0")
    qgraph.init("cpu")
    by_numba = _family_run(place, target, grad)
    for a, b in zip(emitted, by_numba):
        np.testing.assert_array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))
