"""Lanes (lang.cuda.lanes): a small 1-D parallel loop summing over one inner loop runs that loop on
several threads a body on CUDA. Which bodies qualify is decided on the generated code (no GPU);
a generated family of inner-loop forms x loop sizes (every lane count from 32 to 1) x graph/eager
runs on both backends against NumPy: the sums add in another order on CUDA, never other terms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.cuda_offline import A, S

import qgraph
from qgraph.bench.compute_sources import KERNELS_SOURCE
from qgraph.bench.kernels import module_from_source
from qgraph.compiler import cuda_program
from qgraph.lang.cuda.lanes import MAX_LANES, SPLIT_THREADS, lanes_expr, lanes_of
from qgraph.lang.options import KernelOptions

# Taichi's gallery N-body's force loop as the docs port it: the compute benchmark's kernel
COMPUTE = module_from_source("qgraph_bench_compute", KERNELS_SOURCE)
G, M = COMPUTE.G, COMPUTE.M
nbody = COMPUTE._taichi_forces


def triangle(x, out):  # an inner bound that depends on i, a start, subtraction, an int count
    for i in range(out.shape[0]):
        s = 0.0
        c = 0
        for j in range(1, i + 1):
            s -= x[j] * x[i]
            c += 1
        out[i] = s + c


def skips(x, out):  # a `continue` of the inner loop, an outer `continue` before it, float64 sums
    for i in range(out.shape[0]):
        if x[i] < -3.0:
            continue
        s = 0.0
        for j in range(x.shape[0]):
            if j % 3 == 0:
                continue
            s += abs(x[j] - x[i])
        out[i] = s


def taichi(pos: qgraph.vec2[:], force: qgraph.vec2[:]):  # Taichi's spelling: the element updated in the loop
    for i in range(pos.shape[0]):
        force[i] = qgraph.vec2(0.0, 0.0)
    for i in range(pos.shape[0]):
        p = pos[i]
        for j in range(pos.shape[0]):
            if i != j:
                diff = p - pos[j]
                r = math.sqrt(qgraph.dot(diff, diff) + 1e-5)
                force[i] += -G * M * M * (1.0 / r) ** 3 * diff


FORMS = {"nbody": nbody, "triangle": triangle, "skips": skips, "taichi": taichi}
GRAPH = {name: qgraph.kernel(fn, cuda_graph=True) for name, fn in FORMS.items()}
EAGER = {name: qgraph.kernel(fn) for name, fn in FORMS.items()}
ONE_LANE = {name: qgraph.kernel(fn, lanes=False) for name, fn in FORMS.items()}


def _reference(name: str, x: np.ndarray) -> np.ndarray:
    if name in ("nbody", "taichi"):
        d = x[:, None, :].astype(np.float64) - x[None, :, :]
        r = np.sqrt((d ** 2).sum(-1) + 1e-5)
        np.fill_diagonal(r, np.inf)
        return ((-G * M * M / r ** 3)[:, :, None] * d).sum(1)
    if name == "triangle":
        n = x.shape[0]
        prefix = np.concatenate([[0.0], np.cumsum(x[1:].astype(np.float64))])
        return -prefix[np.arange(n)] * x + np.arange(n)
    keep = np.arange(x.shape[0]) % 3 != 0
    out = np.abs(x[None, keep] - x[:, None]).sum(1)
    return np.where(x < -3.0, 0.0, out)


def _data(name: str, n: int, rng) -> tuple:
    """(x, out) as qgraph arrays (out: zeros)."""
    if name == "taichi":
        return qgraph.from_numpy(rng.random((n, 2), dtype=np.float32)), qgraph.ndarray(qgraph.vec2, (n,))
    if name == "nbody":
        x = rng.random((n, 2), dtype=np.float32)
    elif name == "triangle":
        x = rng.standard_normal(n).astype(np.float32)
    else:
        x = rng.standard_normal(n) * 2
    return qgraph.from_numpy(x), qgraph.from_numpy(np.zeros_like(x))


SIZES = [1, 33, 2048, 5000, 20000, 70000]  # lanes 32, 32, 32, 16, 4, 1


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "eager"])
@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("n", SIZES)
def test_inner_sums_match_numpy(arch, name, n, graph):
    if name in ("nbody", "taichi") and n > 5000 or name == "skips" and n > 20000 or arch == "cpu" and n > 2048:
        pytest.skip("quadratic (the CPU runs no lanes): the sizes below cover every lane count")
    rng = np.random.default_rng(n)
    x, out = _data(name, n, rng)
    kernel = (GRAPH if graph else EAGER)[name]
    kernel(x, out)
    x, out = x.to_numpy(), out.to_numpy()
    want = _reference(name, x)
    tol = 1e-3 if x.dtype == np.float32 else 1e-9
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))
    if name == "skips":  # the outer continue left those rows as they were
        assert (out[x < -3.0] == 0).all()


@pytest.mark.parametrize("name", sorted(FORMS))
def test_one_lane_is_the_loop_as_written(arch, name):
    rng = np.random.default_rng(7)
    x, out = _data(name, 300, rng)
    other = _data(name, 300, rng)[1]
    EAGER[name](x, out)
    ONE_LANE[name](x, other)
    x, out, other = x.to_numpy(), out.to_numpy(), other.to_numpy()
    tol = 1e-3 if x.dtype == np.float32 else 1e-12  # float32 sums of 300 terms, up to 1e4 each (close pairs)
    np.testing.assert_allclose(out, other, rtol=tol, atol=tol * max(1.0, float(np.abs(other).max())))


def test_lane_counts_follow_the_loop_size():
    assert [lanes_of(n) for n in SIZES] == [32, 32, 32, 16, 4, 1]
    # the host's grid expression is the same rule (the kernel's prologue: the family above on CUDA)
    assert all(eval(lanes_expr("n"), {}, {"n": n}) == lanes_of(n) for n in range(0, 3 * SPLIT_THREADS, 997))
    assert lanes_of(0) == MAX_LANES and lanes_of(SPLIT_THREADS) == 1 and lanes_of(SPLIT_THREADS // 2) == 2


# which bodies run on lanes: decided on the generated code, no GPU needed

def _lanes(fn, key) -> list[bool]:
    kernel = qgraph.kernel(fn)
    return [code.lanes for code in cuda_program.task_codes(kernel.source, key, KernelOptions()).codes]


def stores_in_loop(x, out):
    for i in range(out.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            out[i] = s
            s += x[j]


def starts_nonzero(x, out):
    for i in range(out.shape[0]):
        s = 1.0
        for j in range(x.shape[0]):
            s += x[j]
        out[i] = s


def reads_partial(x, out):
    for i in range(out.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            if s < 10.0:
                s += x[j]
        out[i] = s


def carries_a_local(x, out):
    for i in range(out.shape[0]):
        s = 0.0
        last = 0.0
        for j in range(x.shape[0]):
            s += x[j] - last
            last = x[j]
        out[i] = s


def reads_last_pass(x, out):
    for i in range(out.shape[0]):
        s = 0.0
        v = 0.0
        for j in range(x.shape[0]):
            v = x[j]
            s += v
        out[i] = s + v


def breaks(x, out):
    for i in range(out.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            if x[j] > 1.0:
                break
            s += x[j]
        out[i] = s


def two_loops(x, out):
    for i in range(out.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            s += x[j]
        for j in range(x.shape[0]):
            s += x[j]
        out[i] = s


def products(x, out):
    for i in range(out.shape[0]):
        s = 1.0
        for j in range(x.shape[0]):
            s *= x[j]
        out[i] = s


def updates_at_j(x, out):
    for i in range(out.shape[0]):
        for j in range(x.shape[0]):
            out[j] += x[i]


def updates_and_reads(x, out):
    for i in range(out.shape[0]):
        for j in range(x.shape[0]):
            out[i] += x[j] * out[i]


def updates_element(x, out):
    for i in range(out.shape[0]):
        for j in range(x.shape[0]):
            out[i] -= x[j]


def atomics(x, out):
    for i in range(out.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            qgraph.atomic_add(out, j, 1.0)
            s += x[j]
        out[i] = s


@pytest.mark.parametrize("fn,split", [
    (nbody, True), (triangle, True), (skips, True), (stores_in_loop, False), (starts_nonzero, False),
    (reads_partial, False), (carries_a_local, False), (reads_last_pass, False), (breaks, False),
    (two_loops, False), (products, False), (atomics, False), (updates_at_j, False), (updates_and_reads, False),
    (updates_element, True)], ids=lambda v: getattr(v, "__name__", str(v)))
def test_which_bodies_run_on_lanes(fn, split):
    key = (A("f4", 2), A("f4", 2)) if fn is nbody else (A("f8", 1), A("f8", 1))
    assert _lanes(fn, key) == [split]


def test_lanes_false_and_debug_keep_one_thread_a_body():
    kernel = qgraph.kernel(nbody)
    key = (A("f4", 2), A("f4", 2))
    assert [c.lanes for c in cuda_program.task_codes(kernel.source, key, KernelOptions(lanes=False)).codes] == [False]
    assert [c.lanes for c in cuda_program.task_codes(kernel.source, key, KernelOptions(debug="bounds")).codes] \
        == [False]
    with pytest.raises(TypeError, match="lanes must be True, False or None"):
        qgraph.kernel(nbody, lanes=2)


def test_a_scalar_argument_in_the_pre_part_is_fine():
    def scaled(x, out, k: float):
        for i in range(out.shape[0]):
            w = k * x[i]
            s = 0.0
            for j in range(x.shape[0]):
                s += w * x[j]
            out[i] = s
    assert _lanes(scaled, (A("f8", 1), A("f8", 1), S("f8"))) == [True]
