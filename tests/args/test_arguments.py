"""Kernel arguments: foreign device arrays (CuPy, PyTorch, numba, DLPack), views, streams."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph
from qgraph.args.kinds import array_sig, is_contiguous, numba_abi


@qgraph.kernel(cuda_graph=True)
def scale(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] = a * x[i]


@qgraph.kernel
def add_rows(m, out):
    for i, j in qgraph.ndrange(m.shape[0], m.shape[1]):
        out[i, j] = m[i, j] + i


def test_array_type_strings():
    assert array_sig(np.dtype(np.float32), 1, True) == "float32[1d]"
    assert array_sig(np.dtype(np.int32), 0, True) == "int32[0d]"
    assert array_sig(np.dtype(np.float64), 2, False) == "float64[2d,strided]"


def test_numba_abi_layout():
    abi = numba_abi(0x1000, (3, 4), (32, 8), 8)
    fields = np.frombuffer(abi, np.int64)
    np.testing.assert_array_equal(fields, [0, 0, 12, 8, 0x1000, 3, 4, 32, 8])
    assert is_contiguous((3, 4), (32, 8), 8) and not is_contiguous((3, 4), (64, 8), 8)
    assert is_contiguous((1, 4), (999, 8), 8)


def test_cupy_arrays(cuda):
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(1000, dtype=cupy.float32)
    y = cupy.zeros(1000, dtype=cupy.float32)
    scale(x, y, 3.0)
    np.testing.assert_array_equal(cupy.asnumpy(y), np.arange(1000, dtype=np.float32) * 3)


def test_cupy_non_contiguous_view(cuda):
    cupy = pytest.importorskip("cupy")
    m = cupy.arange(60, dtype=cupy.float64).reshape(6, 10)[:, ::3]
    out = cupy.zeros(m.shape)
    add_rows(m, out)
    np.testing.assert_array_equal(cupy.asnumpy(out), cupy.asnumpy(m) + np.arange(6)[:, None])


def test_torch_tensors_on_the_current_stream(cuda):
    torch = pytest.importorskip("torch")
    x = torch.arange(4096, dtype=torch.float64, device="cuda")
    y = torch.empty_like(x)
    stream = torch.cuda.current_stream()
    x.mul_(2)  # queued by PyTorch on its stream, before our call
    scale(x, y, 0.5, stream=stream)
    y.add_(1)  # after our call, on the same stream
    np.testing.assert_array_equal(y.cpu().numpy(), np.arange(4096) + 1.0)


def test_torch_on_a_side_stream(cuda):
    torch = pytest.importorskip("torch")
    side = torch.cuda.Stream()
    x = torch.ones(100, device="cuda")
    y = torch.zeros(100, device="cuda")
    torch.cuda.synchronize()
    scale(x, y, 4.0, stream=side)
    side.synchronize()
    assert float(y.sum()) == 400.0


def test_numba_device_array(cuda):
    from numba import cuda as nbcuda

    x = nbcuda.to_device(np.arange(10.0))
    y = nbcuda.device_array(10)
    scale(x, y, 2.0)
    np.testing.assert_array_equal(y.copy_to_host(), np.arange(10.0) * 2)


class _DLPackOnly:
    """An object exposing only DLPack (as JAX arrays may)."""

    def __init__(self, tensor):
        self._t = tensor
        self.shape = tuple(tensor.shape)

    def __dlpack__(self, stream=None):
        return self._t.__dlpack__()

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def test_dlpack_only_objects(cuda):
    torch = pytest.importorskip("torch")
    x = torch.arange(8, dtype=torch.float32, device="cuda")
    y = torch.zeros(8, dtype=torch.float32, device="cuda")
    scale(_DLPackOnly(x), _DLPackOnly(y), 1.5)
    np.testing.assert_array_equal(y.cpu().numpy(), np.arange(8) * 1.5)


def test_torch_cpu_tensor_on_cuda_is_refused(cuda):
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"argument 'x' is a PyTorch tensor on cpu"):
        scale(torch.zeros(3), torch.zeros(3), 1.0)


def test_device_array_on_cpu_is_refused(cpu):
    class FakeDevice:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (1, False), "version": 3}

    with pytest.raises(TypeError, match="argument 'x' is a CUDA device array but qgraph runs on cpu"):
        scale(FakeDevice(), np.zeros(2), 1.0)


def test_scalar_annotations_convert(arch):
    x = qgraph.from_numpy(np.ones(4))
    y = qgraph.ndarray(qgraph.f64, (4,))
    scale(x, y, 3)  # an int for `a: float`
    np.testing.assert_array_equal(y.to_numpy(), 3.0)
    with pytest.raises(TypeError, match="argument 'a': expected a float scalar"):
        scale(x, y, "3")


def test_keyword_arguments_and_stream_keyword(arch):
    x = qgraph.from_numpy(np.ones(4))
    y = qgraph.ndarray(qgraph.f64, (4,))
    scale(a=2.0, y=y, x=x)
    np.testing.assert_array_equal(y.to_numpy(), 2.0)
    with pytest.raises(TypeError):
        scale(x, y)
