"""Lanes (lang.cuda.lanes) where they meet the rest of the language: a generated family of kernels,
each an inner sum of a parallel loop placed {at the top, in a repeat loop, in a cond region, after
another inner loop, with its term from a helper, with the whole loop in a helper} and summed into
{a local then stored, the element itself (`out[i] +=`), a vec2, a struct's array field, a 0-d array,
float32 with float32 literals}, on both backends against NumPy, at sizes that run 32, 8 and 1 lanes
on CUDA; and the gradient of the sums through kernel.grad."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph
from qgraph.bench.kernels import module_from_source

PLACES = ["top", "repeat", "cond", "after_loop", "helper_term", "helper_loop"]
TARGETS = ["local", "element", "vec2", "struct", "zero_d", "float32"]
M = 64  # inner loop length

# per target: (setup before the inner loop, the inner loop's update, the store after it); {t} is the term
_TARGET = {
    "local": ("s = 0.0", "s += {t}", "out[i] = s"),
    "element": ("", "out[i] += {t}", ""),
    "vec2": ("s = qgraph.vec2d(0.0, 0.0)", "s += qgraph.vec2d({t}, x[j])", "out[i] = s"),
    "struct": ("", "st.out[i] += {t}", ""),
    "zero_d": ("", "out[()] += {t}", ""),
    "float32": ("s = np.float32(0.0)", "s += np.float32(0.5) * {t}", "out[i] = s"),
}


def _kernel_source(place: str, target: str) -> str:
    setup, update, store = _TARGET[target]
    out = "st" if target == "struct" else "out"
    term = "term(w[i], x[j])" if place == "helper_term" else "w[i] * x[j]"
    if place == "helper_loop":  # the whole sum in a helper: a value, added as the target takes it
        update_once = update.format(t="summed(x, w[i])").replace("x[j])", "summed(x, 1.0))")
        body = [setup, update_once, store]
    else:
        body = [setup]
        if place == "after_loop":
            body += ["c = 0.0", "for k in range(2):", "    c += 0.5"]
            term = f"c * {term}"
        body += ["for j in range(x.shape[0]):", "    " + update.format(t=term), store]
    lines = [line for line in body if line]
    loop = ["for i in range(w.shape[0]):"] + ["    " + line for line in lines]
    if place == "repeat":
        loop = ["for _ in qgraph.repeat(reps):"] + ["    " + line for line in loop]
    elif place == "cond":
        loop = ["if qgraph.cond(flag):"] + ["    " + line for line in loop]
    params = f"x, w, {out}, reps: int, flag"
    return f"\n@qgraph.kernel(cuda_graph=True)\ndef k_{place}_{target}({params}):\n" + \
        "\n".join("    " + line for line in loop) + "\n"


SOURCE = '''
import numpy as np
import qgraph


@qgraph.struct
class Sums:
    out: object


@qgraph.func
def term(a, b):
    return a * b


@qgraph.func
def summed(x, a):
    s = 0.0
    for j in range(x.shape[0]):
        s += a * x[j]
    return s
''' + "".join(_kernel_source(p, t) for p in PLACES for t in TARGETS)
FAMILY = module_from_source("qgraph_test_lanes_family", SOURCE)


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


def _arrays(target: str, n: int, rng):
    dtype = np.float32 if target == "float32" else np.float64
    x = qgraph.from_numpy(rng.standard_normal(M).astype(dtype))
    w = qgraph.from_numpy(rng.standard_normal(n).astype(dtype))
    if target == "vec2":
        out = qgraph.ndarray(qgraph.vec2d, (n,))
    elif target == "zero_d":
        out = qgraph.from_numpy(np.zeros((), dtype))
    else:
        out = qgraph.from_numpy(np.zeros(n, dtype))
    return x, w, out


@pytest.mark.parametrize("n", [40, 9000, 70000])  # CUDA: 32, 8 and 1 lanes
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("place", PLACES)
def test_the_family_against_numpy(arch, place, target, n):
    if arch == "cpu" and n > 40:
        pytest.skip("the CPU runs no lanes: one size covers it")
    rng = np.random.default_rng(n + len(place) * 7 + len(target))
    x, w, out = _arrays(target, n, rng)
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
