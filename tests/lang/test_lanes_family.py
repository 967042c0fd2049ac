"""Lanes (lang.cuda.lanes) where they meet the rest of the language: a generated family of kernels,
each an inner sum of a parallel loop placed {at the top, in a repeat loop, in a cond region, after
another inner loop, with its term from a helper, with the whole loop in a helper} and summed into
{a local then stored, the element itself (`out[i] +=`), a vec2, a struct's array field, a 0-d array,
float32 with float32 literals}, on both backends against NumPy, at sizes that run 32, 8 and 1 lanes
on CUDA; and the gradient of the sums through kernel.grad."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.lanes_family import FAMILY, PLACES, TARGETS, M, arrays

import qgraph


def _expected(place: str, target: str, x: np.ndarray, w: np.ndarray, reps: int) -> np.ndarray:
    total = w.astype(np.float64) * x.astype(np.float64).sum()
    if target == "float32":
        total = 0.5 * total
    runs = reps if place == "repeat" else 1
    if target in ("element", "struct"):
        return runs * total
    if target == "zero_d":
        return np.array(runs * total.sum())
    if target == "vec2":
        return np.stack([total, np.full_like(total, x.sum())], 1)
    return total


@pytest.mark.parametrize("n", [40, 9000, 70000])  # CUDA: 32, 8 and 1 lanes
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("place", PLACES)
def test_the_family_against_numpy(arch, place, target, n):
    if arch == "cpu" and n > 40:
        pytest.skip("the CPU runs no lanes: one size covers it")
    rng = np.random.default_rng(n + len(place) * 7 + len(target))
    x, w, out = arrays(target, n, rng)
    reps, flag = 3, qgraph.from_numpy(np.ones(1, np.int32))
    kernel = getattr(FAMILY, f"k_{place}_{target}")
    kernel(x, w, FAMILY.Sums(out) if target == "struct" else out, reps, flag)
    got = out.to_numpy()
    want = _expected(place, target, x.to_numpy(), w.to_numpy(), reps)
    tol = 2e-4 if target == "float32" else 1e-9
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


@pytest.mark.parametrize("target", ["local", "element", "float32"])
@pytest.mark.parametrize("place", ["top", "repeat", "after_loop", "helper_term"])
def test_gradients_through_the_sum(arch, place, target):
    """out_i = runs * w_i * sum_j x_j (halved for float32): with out.grad = g, x.grad_j = runs * sum_i g_i w_i
    and w.grad_i = runs * g_i * sum_j x_j."""
    rng = np.random.default_rng(5)
    dtype = np.float32 if target == "float32" else np.float64
    n = 300
    x = qgraph.from_numpy(rng.standard_normal(M).astype(dtype), requires_grad=True)
    w = qgraph.from_numpy(rng.standard_normal(n).astype(dtype), requires_grad=True)
    out = qgraph.from_numpy(np.zeros(n, dtype), requires_grad=True)
    g = rng.standard_normal(n).astype(dtype)
    kernel = getattr(FAMILY, f"k_{place}_{target}")
    flag = qgraph.from_numpy(np.ones(1, np.int32))
    kernel(x, w, out, 2, flag)
    out.grad.from_numpy(g)
    kernel.grad(x, w, out, 2, flag)
    runs = 2 if place == "repeat" and target == "element" else 1  # a stored sum is the last pass's
    scale = runs * (0.5 if target == "float32" else 1.0)
    xs, ws = x.to_numpy().astype(np.float64), w.to_numpy().astype(np.float64)
    tol = 1e-3 if target == "float32" else 1e-9
    np.testing.assert_allclose(x.grad.to_numpy(), np.full(M, scale * (g * ws).sum()), rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(w.grad.to_numpy(), scale * g * xs.sum(), rtol=tol, atol=tol)
