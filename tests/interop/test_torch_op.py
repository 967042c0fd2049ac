"""A kernel as a PyTorch custom operator (issue 14): eager, under torch.compile and under
torch.compile(mode="reduce-overhead") (PyTorch's CUDA graphs, which capture the kernel).
Needs PyTorch (skipped without it)."""

from __future__ import annotations

import importlib.util
import math
import traceback

import numpy as np
import pytest

import qgraph

if importlib.util.find_spec("torch") is None:
    pytest.skip("PyTorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.torch  # pip install ".[torch]"; the README's third command runs these
torch = None  # imported when this module's first test runs: not by every pytest-xdist worker's collection (3.5 s)


@pytest.fixture(scope="module", autouse=True)
def _import_torch():
    global torch
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


@qgraph.kernel
def sine_mix(x, w, y, scale: float):
    for i in range(x.shape[0]):
        y[i] += scale * math.sin(x[i]) * w[i % 4]


@qgraph.kernel
def scatter_squares(x, idx, y):
    for i in range(x.shape[0]):
        y[idx[i]] += x[i] * x[i]


def _functional(kernel, name):
    if not hasattr(_functional, "made"):
        _functional.made = {}
    if name not in _functional.made:
        _functional.made[name] = qgraph.torch_op(kernel, name=name, functional=True)
    return _functional.made[name]


def _sine_mix_reference(x, w, y0):
    return y0 + 1.5 * torch.sin(x) * w[torch.arange(x.shape[0], device=x.device) % 4]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "torch.compile"])
def test_a_functional_operator_takes_part_in_autograd(arch, compiled):
    """Gradients of a loss through the kernel reach every float tensor, the written one's
    initial value included, as torch computes them for the same formula."""
    op = _functional(sine_mix, "sine_mix_f")
    dev = _device(arch)
    gen = torch.Generator().manual_seed(3)
    values = [torch.randn(n, dtype=torch.float64, generator=gen).to(dev) for n in (32, 4, 32)]
    ours = [v.clone().requires_grad_() for v in values]
    theirs = [v.clone().requires_grad_() for v in values]

    def loss(x, w, y0):
        return (op(x, w, y0, 1.5) ** 2).sum()

    (torch.compile(loss) if compiled else loss)(*ours).backward()
    (_sine_mix_reference(*theirs) ** 2).sum().backward()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_a_functional_operator_returns_a_copy_and_leaves_its_arguments(arch):
    op = _functional(sine_mix, "sine_mix_f")
    dev = _device(arch)
    x, w, y0 = torch.ones(8, dtype=torch.float64, device=dev), torch.ones(4, dtype=torch.float64, device=dev), \
        torch.zeros(8, dtype=torch.float64, device=dev)
    y = op(x, w, y0, 2.0)
    torch.testing.assert_close(y, torch.full_like(y0, 2.0 * math.sin(1.0)))
    assert float(y0.abs().sum()) == 0.0


def test_a_functional_scatter_gives_integer_tensors_no_gradient(arch):
    op = _functional(scatter_squares, "scatter_squares_f")
    dev = _device(arch)
    x = torch.randn(16, dtype=torch.float64, device=dev, requires_grad=True)
    idx = torch.randint(0, 4, (16,), device=dev)
    op(x, idx, torch.zeros(4, dtype=torch.float64, device=dev)).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())
    assert idx.grad is None


def test_a_functional_operator_of_a_kernel_that_writes_nothing_is_an_error():
    @qgraph.kernel
    def reads_only(x, n: int):
        for i in range(x.shape[0]):
            n = n + x[i]

    with pytest.raises(TypeError, match="writes none of its tensors"):
        qgraph.torch_op(reads_only, name="reads_only_f", functional=True)


@pytest.mark.parametrize("name", ["x(): pass\nimport os\ndef y", "two words", "class", 3])
def test_an_operator_name_must_be_an_identifier(name):
    """The name goes into the operator's generated source: anything but an identifier is refused
    before any code is made, and the next good registration works."""
    with pytest.raises(ValueError, match="torch_op name must be a Python identifier"):
        qgraph.torch_op(clip_count, name=name)
    assert _op(clip_count, "clip_count_after_a_bad_name") is not None


def test_the_mutating_operator_under_autograd_names_functional_true(arch):
    """The default operator writes in place and has no backward pass: a call whose tensors require
    grad (under grad mode) would give results without a gradient, and torch would say so only later,
    in words without the fix; the call raises, naming functional=True, and the traceback ends at it.
    Under torch.no_grad() or with detached tensors it runs as before."""
    axpy = _op(axpy_into, "axpy_into_t")
    dev = _device(arch)
    x = torch.arange(4, dtype=torch.float64, device=dev, requires_grad=True)
    y = torch.ones(4, dtype=torch.float64, device=dev)
    with pytest.raises(qgraph.QgraphError, match=r"qgraph::axpy_into_t: .*no backward pass.* 'x' requires grad: "
                                                 r"qgraph\.torch_op\(axpy_into, functional=True\) gives an operator "
                                                 r"that .* takes part in autograd") as info:
        axpy(x, y, 2.0)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f.line for f in frames] == ["axpy(x, y, 2.0)"], frames
    np.testing.assert_array_equal(y.cpu().numpy(), np.ones(4))  # refused before it ran
    with torch.no_grad():
        axpy(x, y, 2.0)
    axpy(x.detach(), y, 1.0)
    if arch == "cuda":
        torch.cuda.synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), 1.0 + 3.0 * np.arange(4))
    assert "qgraph::axpy_into_t" in repr(axpy)  # the operator, reached as `.op`
