"""graph_while: the device WHILE loop, its condition kernel and pointer slot, and the fallback.

Device loop (compute capability 9.0+, driver for CUDA 12.4+):

    [store flag address -> slot] -> WHILE(handle) { task nodes ... -> condition kernel }

The handle's default value is 1 and is re-armed on every launch (CU_GRAPH_COND_ASSIGN_DEFAULT),
so each call runs the body at least once: do-while. The condition kernel reads the flag
through the device pointer slot (`**slot != 0`). The slot is written by a kernel node ahead
of the loop whose parameter is the flag's address: a different flag array changes that
node's parameter bytes, updated in place like any task node, so it needs no rebuild and
stays ordered with earlier launches of the same graph.

Host loop (everything else): replay the body, copy the flag to pinned memory, wait on an
event, repeat while non-zero.
"""

from __future__ import annotations

import ctypes

from .compile_cache import CodeCache, entry_key
from .cuda_device import CudaDevice, check, driver
from .errors import QgraphError
from .graph_cache import _Node, add_edge, kernel_node_params
from .param_buffers import ParamBuffer

MIN_COMPUTE_CAPABILITY = (9, 0)
MIN_DRIVER_VERSION = 12040  # CUDA 12.4


def while_strategy(compute_capability: tuple[int, int], driver_version: int, *, graphs: bool,
                   force_host: bool) -> tuple[str, str | None]:
    """('device', None) or ('host', why): where a graph_while loop runs. Pure, for testing."""
    if force_host:
        return "host", "QGRAPH_GRAPH_WHILE=host is set"
    if not graphs:
        return "host", "CUDA graphs are off (QGRAPH_GRAPHS=0 or cuda_graph disabled)"
    if tuple(compute_capability) < MIN_COMPUTE_CAPABILITY:
        cc = ".".join(map(str, compute_capability))
        return "host", f"the GPU's compute capability {cc} is below 9.0 (conditional graph nodes need Hopper or newer)"
    if driver_version < MIN_DRIVER_VERSION:
        major, minor = driver_version // 1000, (driver_version % 1000) // 10
        return "host", f"the driver supports CUDA {major}.{minor}; conditional graph nodes need CUDA 12.4 or newer"
    return "device", None


HELPER_SOURCE = r"""
typedef unsigned long long cudaGraphConditionalHandle;
#ifndef CUDARTAPI
#define CUDARTAPI
#endif
extern "C" __device__ __cudart_builtin__ void CUDARTAPI cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

extern "C" __global__ void qgraph_store_flag_address(unsigned long long* slot, unsigned long long address)
{
    *slot = address;
}

extern "C" __global__ void qgraph_while_condition(cudaGraphConditionalHandle handle, const int* const* slot)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");  // behind a programmatic edge: the body has finished
    cudaGraphSetConditional(handle, **slot != 0 ? 1u : 0u);
}
"""


def _nvrtc_cubin(source: str, cc: tuple[int, int]) -> bytes:
    from cuda.bindings import nvrtc

    def ok(result, what):
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise QgraphError(f"NVRTC {what} failed: {result[0]}")
        return result[1] if len(result) > 1 else None

    prog = ok(nvrtc.nvrtcCreateProgram(source.encode(), b"qgraph_while.cu", 0, [], []), "create")
    try:
        opts = [f"-arch=sm_{cc[0]}{cc[1]}".encode()]
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = ok(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise QgraphError(f"compiling the graph_while condition kernel failed:\n{log.decode(errors='replace')}")
        size = ok(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = b" " * size
        ok(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    result = nvrtc.nvrtcVersion()
    return f"{result[1]}.{result[2]}"


class _Helpers:
    """The slot-writer and condition kernels, loaded once per device."""

    def __init__(self, device: CudaDevice, cache: CodeCache) -> None:
        cc = device.info.compute_capability
        key = entry_key("while-helpers", HELPER_SOURCE, f"sm_{cc[0]}{cc[1]}")
        cached = cache.load(key)
        if cached is not None:
            cubin = cached[1]
        else:
            cubin = _nvrtc_cubin(HELPER_SOURCE, cc)
            cache.store(key, {"nvrtc": _nvrtc_version()}, cubin)
        module = device.load_module(cubin)
        self.store = device.function(module, "qgraph_store_flag_address")
        self.condition = device.function(module, "qgraph_while_condition")


def helpers(device: CudaDevice, cache: CodeCache) -> _Helpers:
    found = getattr(device, "_while_helpers", None)
    if found is None:
        found = device._while_helpers = _Helpers(device, cache)
    return found


class WhileLoop:
    """The WHILE-node part of a graph_while TaskGraph: slot, handle, condition kernel."""

    kernel_nodes = 2  # the slot writer and the condition kernel

    def __init__(self, device: CudaDevice, cache: CodeCache, flag_index: int) -> None:
        self._device = device
        self._helpers = helpers(device, cache)
        self._flag = flag_index
        self.slot = device.alloc(8)
        device.sync_stream()
        self._buffers: list[ParamBuffer] = []
        # the slot writer's parameters: (slot address, flag address from the flag's array bytes)
        self.slot_expr = f"_slot + p[{flag_index}][32:40]"

    def build_prologue(self, graph, block: bytes):
        """Add the slot writer and the WHILE node; returns (body graph, body deps, slot node)."""
        d = driver()
        store = ParamBuffer(16)
        store.data[:] = block
        store_params = kernel_node_params(self._helpers.store, 1, 1, store)
        store_node = check(d.cuGraphAddKernelNode(graph, [], 0, store_params), "adding the flag-slot node")
        self._buffers.append(store)
        self.handle = check(d.cuGraphConditionalHandleCreate(
            graph, self._device.context, 1, d.CU_GRAPH_COND_ASSIGN_DEFAULT), "cuGraphConditionalHandleCreate")
        params = d.CUgraphNodeParams()
        params.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = self.handle
        params.conditional.type = d.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
        params.conditional.size = 1
        params.conditional.ctx = self._device.context
        check(d.cuGraphAddNode(graph, [store_node], None, 1, params), "adding the WHILE node")
        body = params.conditional.phGraph_out[0]
        slot_node = _Node(self.slot_expr, "1", store, store_params, store_node)
        return body, [], slot_node

    def build_condition(self, body, deps: list, programmatic: bool) -> None:
        d = driver()
        cond = ParamBuffer(16)
        cond.data[:] = int(self.handle).to_bytes(8, "little") + self.slot.to_bytes(8, "little")
        params = kernel_node_params(self._helpers.condition, 1, 1, cond)
        node = check(d.cuGraphAddKernelNode(body, [], 0, params), "adding the condition kernel")
        if deps:
            add_edge(body, deps[0], node, programmatic)
        self._buffers.append(cond)

    def constants(self) -> dict:
        return {"_slot": self.slot.to_bytes(8, "little")}

    def close(self) -> None:
        if self.slot:
            self._device.free(self.slot)
            self.slot = 0


class HostLoop:
    """graph_while without a WHILE node: run the body, read the flag back, repeat."""

    def __init__(self, device: CudaDevice, first_run, graph, flag_index: int, stats) -> None:
        d = driver()
        self._device = device
        self._first_run = first_run
        self._graph = graph  # a TaskGraph of the body, or None when the body runs eagerly
        self._flag = flag_index
        self._stats = stats
        self._host = check(d.cuMemHostAlloc(4, 0), "cuMemHostAlloc")
        self._value = ctypes.c_int32.from_address(int(self._host))
        self._event = device.event()
        self._copy = d.cuMemcpyDtoHAsync
        self._record = d.cuEventRecord
        self._wait = d.cuEventSynchronize

    def run(self, args: tuple, packs: tuple, stream: int) -> None:
        flag = int.from_bytes(packs[self._flag][32:40], "little")
        self._first_run(args, packs, stream)
        graph = self._graph
        exec_handle = graph.exec_for(packs) if graph is not None else None
        while self._read(flag, stream):
            if graph is not None:
                graph.relaunch(exec_handle, stream)
            else:
                self._first_run(args, packs, stream)

    def _read(self, flag: int, stream: int) -> bool:
        check(self._copy(self._host, flag, 4, stream), "reading the graph_while flag")
        check(self._record(self._event, stream), "cuEventRecord")
        check(self._wait(self._event), "waiting for the graph_while flag")
        return self._value.value != 0

    def __del__(self) -> None:
        try:
            driver().cuMemFreeHost(self._host)
        except Exception:
            pass
