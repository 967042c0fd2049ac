"""A kernel as a PyTorch custom operator (issue 14): eager, under torch.compile and under
torch.compile(mode="reduce-overhead") (PyTorch's CUDA graphs, which capture the kernel).
Needs PyTorch (skipped without it)."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph

torch = pytest.importorskip("torch")


@qgraph.kernel
def axpy_into(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] += a * x[i]


@qgraph.kernel
def clip_count(x, lo: float, count):
    for i in range(x.shape[0]):
        if x[i] < lo:
            x[i] = lo
            qgraph.atomic_add(count, 0, 1)


def _op(kernel, name):
    if not hasattr(_op, "made"):
        _op.made = {}
    if name not in _op.made:
        _op.made[name] = qgraph.torch_op(kernel, name=name)
    return _op.made[name]


def _device(arch):
    return "cuda" if arch == "cuda" else "cpu"


def test_the_operator_runs_the_kernel(arch):
    axpy = _op(axpy_into, "axpy_into_t")
    x = torch.arange(8, dtype=torch.float64, device=_device(arch))
    y = torch.ones(8, dtype=torch.float64, device=_device(arch))
    axpy(x, y, 2.0)
    if arch == "cuda":
        torch.cuda.synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), 1.0 + 2.0 * np.arange(8))


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_the_operator_under_torch_compile(cuda, mode):
    axpy = _op(axpy_into, "axpy_into_t")
    clip = _op(clip_count, "clip_count_t")

    def step(x, y, count):
        y.mul_(0.5)
        axpy(x, y, 3.0)
        clip(y, 1.0, count)
        return y.sum()

    compiled = torch.compile(step, mode=mode) if mode else torch.compile(step)
    xs = (np.arange(64) - 32) / 16  # exact in binary: the clip count is exact too
    x = torch.tensor(xs, dtype=torch.float64, device="cuda")
    y = torch.zeros(64, dtype=torch.float64, device="cuda")
    count = torch.zeros(1, dtype=torch.int64, device="cuda")
    ref_y, ref_count = np.zeros(64), 0
    for _ in range(4):
        total = compiled(x, y, count)
        ref_y = ref_y * 0.5 + 3.0 * xs
        ref_count += int((ref_y < 1.0).sum())
        ref_y = np.maximum(ref_y, 1.0)
    torch.cuda.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), ref_y, rtol=1e-12)
    assert count.item() == ref_count
    assert abs(total.item() - ref_y.sum()) < 1e-9


def test_what_cannot_be_an_operator():
    with pytest.raises(TypeError, match="qgraph.torch_op takes a @qgraph.kernel"):
        qgraph.torch_op(print)
