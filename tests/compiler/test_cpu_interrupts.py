"""Ctrl-C during a plain CPU kernel (compiler.cpu_interrupts, lang.cpu.loops): a lone parallel
loop runs in timed chunks with a check between them, so SIGINT stops it within a chunk, as a
KeyboardInterrupt naming the kernel and the loop's line, and the next call works. The chunked
loop computes what the one loop did, for every loop form."""

from __future__ import annotations

import math

import numpy as np
from helpers.signalled_child import run_signalled

import qgraph

_CHILD = """
import math, signal, sys, time
import numpy as np
import qgraph

signal.signal(signal.SIGINT, signal.default_int_handler)  # a test runner may start us with SIGINT ignored
qgraph.init("cpu")


@qgraph.kernel
def slow(x, y, n: int, steps: int):
    for i in range(n):  # (iterations i and i + 4096 write the same value into the same element)
        v = x[i % x.shape[0]]
        for _ in range(steps):
            v = v * 0.999 + 0.001 * math.sin(v)
        y[i % y.shape[0]] = v


x = np.random.default_rng(0).random(4096)
y = np.zeros_like(x)
qgraph.compile(slow, x[:4], y[:4], 4, 1)  # both forms (the large call below runs the parallel one on several threads)
print("ready", flush=True)
started = time.perf_counter()
try:
    slow(x, y, 1 << 26, 200)  # a minute or more on two cores; the first chunk about 0.3 s
    print("no interrupt", flush=True)
except KeyboardInterrupt as e:
    print(f"interrupted after {time.perf_counter() - started:.1f} s: {e}", flush=True)
slow(x[:4], y[:4], 4, 1)
print("next call:", bool(np.allclose(y[:4], x[:4] * 0.999 + 0.001 * np.sin(x[:4]))), flush=True)
"""


def test_ctrl_c_stops_a_plain_cpu_kernel_within_a_chunk_and_names_it(tmp_path):
    out, after = run_signalled(_CHILD, tmp_path, sigint_after=1.0)
    line = next(k for k, text in enumerate(_CHILD.splitlines(), 1) if text.startswith("    for i in range(n):"))
    assert f"kernel slow was interrupted in the parallel loop at line {line}" in out, out
    assert "next call: True" in out, out
    assert after < 20, f"SIGINT took {after:.1f} s to stop the kernel: {out}"


@qgraph.kernel
def loop_forms(x, out, grid, start: int, stop: int, step: int):
    for i in range(x.shape[0]):
        out[0, i] = x[i] * 2.0
    for i in range(start, stop, step):
        out[1, i] = x[i] + 1.0
    for i, j in qgraph.ndrange((1, grid.shape[0]), grid.shape[1]):
        grid[i, j] = math.sqrt(i) + j


def test_chunked_loops_compute_what_one_loop_does(cpu):
    # one chunk, and several (the first chunk is 262,144 iterations) for each loop form
    cases = ((5, (0, 5, 1)), (200_003, (7, 200_003, 3)), (300_000, (299_999, -1, -2)), (600_000, (1, 600_000, 1)))
    for n, (start, stop, step) in cases:
        x = np.random.default_rng(n).random(n)
        out, grid = np.zeros((2, n)), np.zeros((n // 1000 + 2, 1000))
        loop_forms(x, out, grid, start, stop, step)
        expected = np.zeros((2, n))
        expected[0] = x * 2.0
        expected[1, start:stop if stop >= 0 else None:step] = x[start:stop if stop >= 0 else None:step] + 1.0
        np.testing.assert_array_equal(out, expected)
        rows = np.arange(grid.shape[0])[:, None]
        np.testing.assert_array_equal(grid[1:], (np.sqrt(rows) + np.arange(1000))[1:])
        assert not grid[0].any()


@qgraph.kernel
def reduce_forms(x, totals, extremes, counts):
    for i in range(x.shape[0]):
        totals[0] += x[i]
    for i in range(x.shape[0]):
        qgraph.atomic_max(extremes, 0, x[i])
    for i, j in qgraph.ndrange(x.shape[0], 3):
        counts[0] += i * j + 1


def test_chunked_reductions_sum_what_numpy_does_and_the_same_each_run(cpu):
    """A reduction's parallel loop runs in chunks too (Ctrl-C between them), which double in size
    instead of being timed: its partials fold per chunk, the same way each run. Bit for bit only in
    deterministic mode: by default a busy machine may move a call to one thread (backends.cpu_forms)."""
    deterministic = reduce_forms.variant(deterministic=True)
    for n in (5, 300_000, 1_100_000):  # one chunk, and two to four (the first is 262,144 iterations)
        x = np.random.default_rng(n).random(n) - 0.5
        runs = []
        for _ in range(3):
            totals, extremes, counts = np.zeros(1), np.full(1, -np.inf), np.zeros(1, np.int64)
            deterministic(x, totals, extremes, counts)
            runs.append((totals[0], extremes[0], counts[0]))
        assert runs[0] == runs[1] == runs[2]  # bit for bit
        np.testing.assert_allclose(runs[0][0], x.sum(), rtol=1e-9, atol=1e-9)
        assert runs[0][1] == x.max()
        i = np.arange(n, dtype=np.int64)[:, None]
        assert runs[0][2] == int((i * np.arange(3) + 1).sum())
