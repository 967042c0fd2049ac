"""Where a graph's changing number can come from, measured with hand-written kernels and the raw driver.

    python benchmarks/number_sources.py [--n 4096] [--calls 20000] [--rounds 7]

The workload of `changing_scalars.py`'s 2-task kernel (v -= dt * u; u += dt * v over n float32
elements, two kernel nodes) written in CUDA C++ (NVRTC) and launched as one CUDA graph from
Python through cuda.bindings, with no qgraph call path in between, `dt` new on every call where
the row says so. Each row is a way the new value can reach the kernels:
- by value, fixed: the floor of a replay (`cuGraphLaunch`);
- by value, two node updates + launch (`cuGraphExecKernelNodeSetParams` per node): qgraph's way;
- a device word read by both kernels, fixed: the cost of the load alone;
- the device word written by `cuMemcpyHtoDAsync` from pinned memory before each launch;
- the device word written by `cuStreamWriteValue32` before each launch;
- a memcpy node at the graph's head copying a pinned host word into the device word (the host
  writes the word, then launches: racy when launches queue, a ring of instances would be needed);
- both kernels reading the pinned host word through its mapped device address (racy alike).
The ratios to the first row bound what any qgraph design can reach for a changing number.
"""

from __future__ import annotations

import argparse
import ctypes
import struct
import time

import numpy as np

import qgraph

SOURCE = r"""
extern "C" __global__ void adv_v(const float* u, float* v, float dt, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) v[i] -= dt * u[i]; }
extern "C" __global__ void adv_u(float* u, const float* v, float dt, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) u[i] += dt * v[i]; }
extern "C" __global__ void adv_v_p(const float* u, float* v, const volatile float* dtp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; float dt = *dtp; if (i < n) v[i] -= dt * u[i]; }
extern "C" __global__ void adv_u_p(float* u, const float* v, const volatile float* dtp, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; float dt = *dtp; if (i < n) u[i] += dt * v[i]; }
"""
BLOCK = 256


class TwoKernelGraph:
    """The two nodes (and a memcpy node first, with `copy_from`) as one instantiated graph."""

    def __init__(self, device, functions, u, v, dt, n: int, copy_from=None) -> None:
        from qgraph.driver.device import check, driver
        from qgraph.driver.nodes import kernel_node_params

        d = self.d = driver()
        self._keep, self.nodes, self.params = [], [], []
        graph = check(d.cuGraphCreate(0), "cuGraphCreate")
        deps = []
        if copy_from is not None:  # pinned host word -> device word, read when the node runs
            host, dev = copy_from
            p = d.CUDA_MEMCPY3D()
            p.srcMemoryType, p.srcHost = d.CUmemorytype.CU_MEMORYTYPE_HOST, host
            p.dstMemoryType, p.dstDevice = d.CUmemorytype.CU_MEMORYTYPE_DEVICE, dev
            p.WidthInBytes, p.Height, p.Depth = 4, 1, 1
            ctx = check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
            deps = [check(d.cuGraphAddMemcpyNode(graph, [], 0, p, ctx), "adding the memcpy node")]
        for function in functions:
            third = ctypes.c_float(dt) if isinstance(dt, float) else ctypes.c_uint64(dt)
            values = (ctypes.c_uint64(u), ctypes.c_uint64(v), third, ctypes.c_int32(n))
            pointers = (ctypes.c_void_p * 4)(*(ctypes.addressof(x) for x in values))
            self._keep.append((values, pointers))
            params = kernel_node_params(function, (n + BLOCK - 1) // BLOCK, BLOCK,
                                        kernel_params=ctypes.addressof(pointers))
            node = check(d.cuGraphAddKernelNode(graph, deps, len(deps), params), "adding a kernel node")
            self.nodes.append(node)
            self.params.append((params, values[2]))
            deps = [node]
        self.exec = check(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        self.stream = device.stream_handle
        check(d.cuGraphUpload(self.exec, self.stream), "cuGraphUpload")
        self.launch_fn = d.cuGraphLaunch

    def launch(self) -> None:
        self.launch_fn(self.exec, self.stream)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    from qgraph.driver.device import check, driver
    from qgraph.driver.nvrtc import compile_cubin
    from qgraph.runtime import STATE

    qgraph.init("cuda")
    device = STATE.target.device
    d = driver()
    module = device.load_module(compile_cubin(SOURCE, "number_sources.cu", tuple(device.info.compute_capability)))
    by_value = [device.function(module, name) for name in ("adv_v", "adv_u")]
    by_pointer = [device.function(module, name) for name in ("adv_v_p", "adv_u_p")]
    u = qgraph.from_numpy(np.ones(args.n, np.float32))
    v = qgraph.from_numpy(np.zeros(args.n, np.float32))
    word = qgraph.from_numpy(np.zeros(1, np.float32))
    flags = 0x02  # CU_MEMHOSTALLOC_DEVICEMAP
    host = check(d.cuMemHostAlloc(4, flags), "cuMemHostAlloc")
    host_dev = check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer")
    host_word = ctypes.c_float.from_address(int(host))
    dt = 1e-9
    fixed = TwoKernelGraph(device, by_value, u.address, v.address, dt, args.n)
    updated = TwoKernelGraph(device, by_value, u.address, v.address, dt, args.n)
    word_graph = TwoKernelGraph(device, by_pointer, u.address, v.address, word.address, args.n)
    copy_graph = TwoKernelGraph(device, by_pointer, u.address, v.address, word.address, args.n,
                                copy_from=(int(host), word.address))
    mapped_graph = TwoKernelGraph(device, by_pointer, u.address, v.address, int(host_dev), args.n)
    set_params, stream = d.cuGraphExecKernelNodeSetParams, device.stream_handle
    htod, write32 = d.cuMemcpyHtoDAsync, d.cuStreamWriteValue32
    turn = [0]
    values = (1e-9, 2e-9)
    bits = tuple(struct.unpack("<I", struct.pack("<f", x))[0] for x in values)

    def node_updates():
        turn[0] ^= 1
        for node, (params, dt_value) in zip(updated.nodes, updated.params):
            dt_value.value = values[turn[0]]
            set_params(updated.exec, node, params)
        updated.launch()

    def memcpy_async():
        turn[0] ^= 1
        host_word.value = values[turn[0]]
        htod(word.address, host, 4, stream)
        word_graph.launch()

    def write_value():
        turn[0] ^= 1
        write32(stream, word.address, bits[turn[0]], 0)
        word_graph.launch()

    def memcpy_node():
        turn[0] ^= 1
        host_word.value = values[turn[0]]
        copy_graph.launch()

    def mapped():
        turn[0] ^= 1
        host_word.value = values[turn[0]]
        mapped_graph.launch()

    rows = {"by value, fixed (floor)": fixed.launch,
            "by value, 2 node updates + launch": node_updates,
            "device word, fixed": word_graph.launch,
            "device word, cuMemcpyHtoDAsync + launch": memcpy_async,
            "device word, cuStreamWriteValue32 + launch": write_value,
            "memcpy node at the head (pinned word)": memcpy_node,
            "kernels read the mapped pinned word": mapped}
    times: dict = {name: [] for name in rows}
    for fn in rows.values():
        for _ in range(100):
            fn()
    qgraph.sync()
    for _ in range(args.rounds):
        for name, fn in rows.items():
            qgraph.sync()
            start = time.perf_counter()
            for _ in range(args.calls):
                fn()
            qgraph.sync()
            times[name].append((time.perf_counter() - start) / args.calls * 1e6)
    floor = float(np.median(times["by value, fixed (floor)"]))
    print(f"2 kernel nodes over {args.n} float32 on {device.info.name}: us per call (median of {args.rounds} rounds)")
    for name, t in times.items():
        median = float(np.median(t))
        print(f"  {name:44s} {median:7.2f} us  {median / floor:5.2f}x")
    # per-call device time of the same launches (events around 1000 back-to-back launches of each graph)
    print("device time per launch, 1000 launches between two events:")
    for name, graph in (("by value", fixed), ("device word", word_graph), ("memcpy node", copy_graph),
                        ("mapped word", mapped_graph)):
        start, end = (check(d.cuEventCreate(0), "cuEventCreate") for _ in range(2))
        qgraph.sync()
        d.cuEventRecord(start, stream)
        for _ in range(1000):
            graph.launch()
        d.cuEventRecord(end, stream)
        d.cuEventSynchronize(end)
        ms = check(d.cuEventElapsedTime(start, end), "cuEventElapsedTime")
        print(f"  {name:44s} {ms:7.2f} us")
    d.cuMemFreeHost(host)


if __name__ == "__main__":
    main()
