"""fast_math=: approximate division and square root, FMA contraction; results within bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

import qgraph

EPS = np.float32(1e-2)
ONE = np.float32(1.0)


def _forces(px, py, m, ax, ay):
    for i in range(px.shape[0]):
        fx = px[i] - px[i]
        fy = fx
        for j in range(px.shape[0]):
            dx = px[j] - px[i]
            dy = py[j] - py[i]
            r2 = dx * dx + dy * dy + EPS
            s = m[j] * (ONE / (r2 * math.sqrt(r2)))
            fx += dx * s
            fy += dy * s
        ax[i] = fx
        ay[i] = fy


strict_forces = qgraph.kernel(fast_math=False)(_forces)
fast_forces = qgraph.kernel(fast_math=True)(_forces)


def _reference(px, py, m):
    dx = px[None, :].astype(np.float64) - px[:, None]
    dy = py[None, :].astype(np.float64) - py[:, None]
    r2 = dx * dx + dy * dy + np.float64(EPS)
    s = m[None, :] / (r2 * np.sqrt(r2))
    return (dx * s).sum(axis=1), (dy * s).sum(axis=1)


@pytest.mark.parametrize("kernel", [strict_forces, fast_forces], ids=["strict", "fast"])
def test_fast_math_stays_within_its_documented_bound(arch, kernel):
    rng = np.random.default_rng(12)
    px, py, m = (rng.random(1024, dtype=np.float32) for _ in range(3))
    ax, ay = qgraph.ndarray(qgraph.f32, (1024,)), qgraph.ndarray(qgraph.f32, (1024,))
    kernel(qgraph.from_numpy(px), qgraph.from_numpy(py), qgraph.from_numpy(m), ax, ay)
    rx, ry = _reference(px, py, m)
    scale = np.abs(np.concatenate([rx, ry])).max()
    error = np.abs(np.concatenate([ax.to_numpy() - rx, ay.to_numpy() - ry])).max() / scale
    assert error < 1e-4  # the bound docs/kernel-language.md states for float32 with and without fast math


def test_fast_math_changes_the_cuda_code(cuda_compiler):
    from helpers.cuda_offline import A, compile_with

    key = (A("f4", 1), A("f4", 1), A("f4", 1), A("f4", 1), A("f4", 1))
    strict = "".join(compile_with(strict_forces, key, fast_math=False))
    fast = "".join(compile_with(fast_forces, key, fast_math=True))
    assert ("div.rn.f32" in strict or "rcp.rn.f32" in strict) and "sqrt.rn.f32" in strict
    assert "div.approx" in fast and "sqrt.approx" in fast and ".ftz" in fast


def test_fast_math_option_is_checked():
    with pytest.raises(TypeError, match="fast_math must be True, False or None"):
        qgraph.kernel(fast_math=1)


@qgraph.kernel(fast_math=True)
def count_nans(x, count):
    for i in range(x.shape[0]):
        if math.isnan(x[i]):
            count[0] += 1


def test_fast_math_keeps_nan_checks(arch):
    x = np.ones(1000)
    x[::7] = np.nan
    count = qgraph.from_numpy(np.zeros(1, np.int64))
    count_nans(qgraph.from_numpy(x), count)
    assert count.to_numpy()[0] == np.isnan(x).sum()
