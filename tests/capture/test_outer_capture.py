"""qgraph calls inside another library's graph capture (issue 14): recorded into their graph as
kernel nodes, never invalidating the capture; replaying their graph re-runs the qgraph work on
the captured arrays. Needs CUDA, and PyTorch / CuPy / cuda.core where installed."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph


@qgraph.kernel(cuda_graph=True)
def scale_add(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@qgraph.kernel
def square(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i]


@qgraph.kernel(graph_while="flag")
def count_up(x, flag, n: int):
    for i in range(x.shape[0]):
        x[i] += 1.0
    flag[0] = 1 if x[0] < n else 0


def test_torch_cuda_graph_records_qgraph_calls(cuda):
    torch = pytest.importorskip("torch")
    x = torch.arange(16, device="cuda", dtype=torch.float64)
    y = torch.zeros(16, device="cuda", dtype=torch.float64)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the warm-up compiles (compiling cannot be captured)
        scale_add(x, y, 2.0, stream=side.cuda_stream)
        square(y, stream=side.cuda_stream)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stream = torch.cuda.current_stream().cuda_stream
        y.add_(1.0)
        scale_add(x, y, 0.5, stream=stream)
        square(y, stream=stream)
        y.sub_(3.0)
    y.zero_()
    expected = np.zeros(16)
    for _ in range(3):
        graph.replay()
        expected = (0.5 * np.arange(16) + expected + 1.0) ** 2 - 3.0
    torch.cuda.synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), expected)


def test_a_first_call_under_capture_raises_and_leaves_the_capture_valid(cuda):
    torch = pytest.importorskip("torch")
    x = torch.zeros(8, device="cuda", dtype=torch.float64)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stream = torch.cuda.current_stream().cuda_stream
        with pytest.raises(qgraph.QgraphError, match="is on a stream that is capturing a graph, and compiling "
                                                     "cannot be captured; call the kernel once before"):
            scale_add(x.to(torch.float32), x.to(torch.float32), 1.0, stream=stream)
        x.add_(2.0)
    graph.replay()
    torch.cuda.synchronize()
    np.testing.assert_array_equal(x.cpu().numpy(), 2.0)


def test_a_graph_while_kernel_records_its_while_node(cuda):
    torch = pytest.importorskip("torch")
    if tuple(qgraph.device_info().compute_capability) < (9, 0):
        pytest.skip("device loops need compute capability 9.0 (elsewhere such a call raises)")
    x = torch.zeros(8, device="cuda", dtype=torch.float64)
    flag = torch.ones(1, device="cuda", dtype=torch.int32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        count_up(x, flag, 3, stream=side.cuda_stream)  # warm-up: compiles
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert x.cpu().numpy().tolist() == [3.0] * 8
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stream = torch.cuda.current_stream().cuda_stream
        x.mul_(2.0)
        count_up(x, flag, 10, stream=stream)  # a WHILE node in torch's graph
        x.add_(0.5)
    for start in (0.0, 4.0, 11.0):  # do-while: at least one pass
        x.fill_(start)
        flag.fill_(1)
        graph.replay()
        torch.cuda.synchronize()
        passes = max(1, int(np.ceil(10 - 2 * start)))
        assert x.cpu().numpy().tolist() == [2 * start + passes + 0.5] * 8


def test_cupy_stream_capture(cuda):
    cp = pytest.importorskip("cupy")
    x = cp.arange(8, dtype=cp.float64)
    y = cp.ones(8, dtype=cp.float64)
    stream = cp.cuda.Stream(non_blocking=True)
    scale_add(x, y, 1.0, stream=stream)
    stream.synchronize()
    stream.begin_capture()
    scale_add(x, y, 1.0, stream=stream)
    graph = stream.end_capture()
    for _ in range(3):
        graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(y), 1.0 + 4 * np.arange(8))


def test_cuda_core_graph_builder(cuda):
    core = pytest.importorskip("cuda.core")
    device = core.Device()
    device.set_current()
    x = qgraph.from_numpy(np.arange(8.0))
    y = qgraph.from_numpy(np.zeros(8))
    stream = device.create_stream()
    scale_add(x, y, 1.0, stream=stream)
    stream.sync()
    builder = stream.create_graph_builder() if hasattr(stream, "create_graph_builder") else \
        device.create_graph_builder()
    builder.begin_building()
    scale_add(x, y, 2.0, stream=builder)
    graph = builder.end_building().complete()
    for _ in range(2):
        graph.launch(stream)
    stream.sync()
    np.testing.assert_array_equal(y.to_numpy(), 5 * np.arange(8.0))
