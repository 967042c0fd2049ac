"""@qgraph.func helpers under weak typing (lang.types.func_precision): a helper is typed per call's
argument types, and the caller sees the type of what it returns, so `fx = 0.0; fx += g(...)`
accumulates in float32 when the helper returns float32. Results go to float64 arrays, so the
precision the arithmetic ran in shows (float32 arithmetic leaves float32-representable values);
Taichi's N-body spelled as ported compiles to the machine code of its hand-tuned twin."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.cuda_offline import offline_entry_body
from helpers.numeric import call, is_float32_valued

import qgraph

F32, F64 = np.float32, np.float64
G = 1  # module-level ints, as in Taichi's N-body example
M = 5


@qgraph.func
def pull(dx, dy):
    r = math.sqrt(dx * dx + dy * dy + 1e-5)
    s = -G * M * M * (1.0 / r) ** 3
    return s * dx, s * dy


@qgraph.kernel
def forces(pos, out):
    for i in range(pos.shape[0]):
        fx = 0.0
        fy = 0.0
        for j in range(pos.shape[0]):
            if i != j:
                gx, gy = pull(pos[i, 0] - pos[j, 0], pos[i, 1] - pos[j, 1])
                fx += gx
                fy += gy
        out[i, 0] = fx
        out[i, 1] = fy


def _numpy_forces(pos: np.ndarray) -> np.ndarray:
    """The same sums in `pos`'s precision, in the kernel's order."""
    t = pos.dtype.type
    out = np.zeros(pos.shape, pos.dtype)
    for i in range(len(pos)):
        d = pos[i] - pos
        r = np.sqrt(d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1] + t(1e-5))
        s = t(-G * M * M) * (t(1) / r) ** 3
        s[i] = 0
        for k in range(2):
            acc = t(0)
            for term in s * d[:, k]:
                acc += term
            out[i, k] = acc
    return out


@pytest.mark.parametrize("dtype", [F32, F64])
def test_a_helpers_tuple_result_keeps_the_callers_accumulators_in_its_precision(arch, dtype):
    pos = np.random.default_rng(3).random((96, 2)).astype(dtype)
    out = np.zeros((96, 2))
    call(forces, pos, out)
    expected = _numpy_forces(pos)
    tolerance = (2e-5 if dtype is F32 else 1e-12) * np.abs(expected).max()
    np.testing.assert_allclose(out, expected, rtol=0, atol=tolerance)
    assert is_float32_valued(out) == (dtype is F32)


@qgraph.func
def tenth(a):
    return a * 0.1


@qgraph.kernel
def tenths(x, y, out):
    for i in range(x.shape[0]):
        out[0, i] = tenth(x[i])
        out[1, i] = tenth(y[i])


def test_a_helper_called_with_float32_and_float64_computes_each_in_its_own(arch):
    """Two instances of one helper: the float32 call no longer widens to the float64 one's type."""
    x = np.random.default_rng(4).uniform(0.5, 2.0, 200).astype(F32)
    out = np.zeros((2, 200))
    call(tenths, x, x.astype(F64), out)
    np.testing.assert_array_equal(out[0], x * F32(0.1))
    np.testing.assert_array_equal(out[1], x.astype(F64) * 0.1)
    assert is_float32_valued(out[0]) and not is_float32_valued(out[1])


@qgraph.func
def doubled(a):
    return 2.0 * a


@qgraph.func
def clipped(a):
    if a < 1.0:
        return 0.0
    return a * 0.3


@qgraph.kernel
def weak_results(x, out):
    for i in range(x.shape[0]):
        out[0, i] = x[i] * doubled(0.05)  # a weak result: float32 where it meets float32
        out[1, i] = clipped(x[i]) + 0.7


def test_weak_arguments_and_results_follow_the_caller(arch):
    x = np.random.default_rng(5).uniform(0.5, 2.0, 200).astype(F32)
    out = np.zeros((2, 200))
    call(weak_results, x, out)
    np.testing.assert_array_equal(out[0], x * F32(0.1))
    # within one float32 ulp: CUDA contracts the inlined a * 0.3 + 0.7 into one fma (one rounding, not two)
    np.testing.assert_allclose(out[1], np.where(x < 1, F32(0), x * F32(0.3)) + F32(0.7), rtol=2.4e-7, atol=0)
    assert is_float32_valued(out)


@pytest.mark.parametrize("fast", [False, True])
def test_taichis_nbody_as_ported_compiles_to_its_hand_tuned_twin(cuda_compiler, fast):
    """Module-level ints, float literals, `(1.0 / r) ** 3` in a helper and 0.0 accumulators give
    the PTX of float32 constants, a reciprocal cubed by hand and float32 accumulators: no float64,
    no pow, the same instructions (issue 29; before, 27 float64 instructions in the inner loop)."""
    from qgraph.bench.compute_sources import KERNELS_SOURCE
    from qgraph.bench.kernels import module_from_source
    from qgraph.compiler import ptx_stats

    mod = module_from_source("qgraph_bench_compute", KERNELS_SOURCE)
    args = (np.zeros((256, 2), F32), np.zeros((256, 2), F32))
    suffix = "_fast" if fast else ""
    natural = offline_entry_body(getattr(mod, "taichi_nbody" + suffix), args)
    tuned = offline_entry_body(getattr(mod, "taichi_nbody_tuned" + suffix), args)
    counts = {name: ptx_stats.ptx_counts(body) for name, body in (("natural", natural), ("tuned", tuned))}
    assert counts["natural"]["f64"] == 0 and ".f64" not in natural, counts
    assert "pow" not in natural and "call" not in natural and "lg2" not in natural
    assert counts["natural"]["ptx"] == counts["tuned"]["ptx"], counts
