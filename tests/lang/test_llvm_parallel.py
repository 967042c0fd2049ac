"""The CPU's parallel form emitted straight to LLVM IR (lang.llvm.parallel): each `prange` body a chunk
function on numba's threads. A family of parallel kernels (2-D ranges, helpers, reductions of every
op and type, atomics, chunked loops, interchanged repeat loops, graph_while) runs at a size that
takes the parallel form, emitted and then with QGRAPH_EMITTER=0 (numba's parfors); both against
NumPy, and the emitted form must be the one that ran."""

from __future__ import annotations

import math

import numpy as np
import pytest

import qgraph

N = 300_000  # above the serial form's limit (262,144 elements): the parallel form runs on any thread count


@qgraph.func
def _smooth(a, b):
    return math.sqrt(a * a + b * b) if a > b else a - b


@qgraph.kernel
def elementwise(x, y, out):
    for i in range(x.shape[0]):
        out[i, 0] = _smooth(x[i], y[i])
        out[i, 1] = x[i] * 2.0 if i % 3 == 0 else y[i] - 1.0
    for i, j in qgraph.ndrange(out.shape[0], 2):
        out[i, j] += 0.5 * j


@qgraph.kernel
def reductions(x, n, total, low, high, count, diff):
    for i in range(x.shape[0]):
        total[0] += x[i]
        qgraph.atomic_min(low, 0, x[i])
        qgraph.atomic_max(high, 0, x[i])
        count[0] += n[i] % 7
        diff[0] -= x[i] * 0.5


@qgraph.kernel
def histogram(n, bins):
    for i in range(n.shape[0]):
        qgraph.atomic_add(bins, n[i] % bins.shape[0], 1)


@qgraph.kernel
def repeated(x, k: int):
    for _ in qgraph.repeat(k):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5 + 1.0


@qgraph.kernel(graph_while="flag")
def halve_until_small(x, flag):
    for i in range(x.shape[0]):
        x[i] = x[i] * 0.5
    for _ in range(1):
        flag[0] = 1 if x[0] > 1.0 else 0


def _data():
    rng = np.random.default_rng(7)
    return rng.standard_normal(N), rng.standard_normal(N), rng.integers(0, 1000, N)


def _cases():
    x, y, n = _data()
    return {
        "elementwise": (elementwise, lambda: (x, y, np.zeros((N, 2))),
                        lambda a: np.stack([np.where(x > y, np.hypot(x, y), x - y),
                                            np.where(np.arange(N) % 3 == 0, 2 * x, y - 1) + 0.5], 1)),
        "reductions": (reductions, lambda: (x, n, np.zeros(1), np.full(1, np.inf), np.full(1, -np.inf),
                                            np.zeros(1, np.int64), np.zeros(1)),
                       None),
        "histogram": (histogram, lambda: (n, np.zeros(13, np.int64)), lambda a: np.bincount(n % 13, minlength=13)),
        "repeated": (repeated, lambda: (x.copy(), 3), lambda a: ((x * 0.5 + 1) * 0.5 + 1) * 0.5 + 1),
        "graph_while": (halve_until_small, lambda: (np.abs(x) * 64 + 100, np.ones(1, np.int32)), None),
    }


def _run(kernel, make):
    args = make()
    kernel(*args)
    launcher, values = kernel.launcher_for(args)
    program = launcher._signatures[launcher.resolve(values)[0]].program
    return args, program


@pytest.mark.parametrize("case", ["elementwise", "reductions", "histogram", "repeated", "graph_while"])
def test_an_emitted_parallel_form_gives_numbas_results(cpu, case, monkeypatch, all_numba_threads):
    kernel, make, expected = _cases()[case]
    monkeypatch.setenv("QGRAPH_EMITTER", "strict")
    emitted, program = _run(kernel, make)
    assert program.parallel_emitted is None and type(program.runner).__name__ == "builtin_function_or_method"
    monkeypatch.setenv("QGRAPH_EMITTER", "0")
    qgraph.init("cpu")  # drops the compiled kernels: the same signature compiles again, by numba
    by_numba, program = _run(kernel, make)
    assert program.parallel_emitted == "QGRAPH_EMITTER=0"
    for a, b in zip(emitted, by_numba):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)  # reductions fold in another order
    if expected is not None:
        np.testing.assert_allclose(emitted[-1] if case != "repeated" else emitted[0], expected(emitted), rtol=1e-12)


def test_reductions_against_numpy(cpu, all_numba_threads):
    x, _, n = _data()
    total, low, high, count, diff = np.zeros(1), np.full(1, np.inf), np.full(1, -np.inf), np.zeros(1, np.int64), \
        np.zeros(1)
    reductions(x, n, total, low, high, count, diff)
    np.testing.assert_allclose(total[0], x.sum(), rtol=1e-12)
    assert (low[0], high[0], count[0]) == (x.min(), x.max(), (n % 7).sum())
    np.testing.assert_allclose(diff[0], -0.5 * x.sum(), rtol=1e-12)
    first = total.copy()
    total[:] = 0
    reductions(x, n, total, low, high, count, diff)
    assert total[0] == first[0]  # folded per division in division order: the same bits on the same threads


def test_graph_while_runs_its_passes_in_the_emitted_parallel_form(cpu, all_numba_threads):
    x = np.full(N, 1000.0)
    flag = np.ones(1, np.int32)
    halve_until_small(x, flag)
    assert x[0] <= 1.0 and x[0] * 2 > 1.0 and flag[0] == 0
    assert halve_until_small.stats.iterations == (10,)  # 1000 / 2**10 < 1
    launcher, values = halve_until_small.launcher_for((x, flag))
    assert launcher._signatures[launcher.resolve(values)[0]].program.parallel_emitted is None


def test_inspect_shows_each_parallel_loops_chunk_function_and_its_assembly(cpu, tmp_path, monkeypatch):
    monkeypatch.setenv("QGRAPH_CACHE_DIR", str(tmp_path))  # compiled here, so the emitted IR is at hand
    qgraph.init("cpu")
    x, y, _ = _data()
    code = elementwise.inspect(x, y, np.zeros((N, 2)))
    for task in code.tasks:
        assert task.name in task.llvm and "_qg_chunk_" in task.llvm and "numba_parallel_for" in task.llvm
        assert "_qg_chunk_" in task.asm and len(task.asm.splitlines()) > 10
