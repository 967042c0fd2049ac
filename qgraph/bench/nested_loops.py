"""Nested device loops against a raw CUDA graph with the same nested WHILE nodes.

A 2-level solver shape: an outer loop (its own counter as the convergence check) around an
inner smoother of 4 tasks (256 elements each) and a countdown. qgraph's kernel uses
`while qgraph.loop(...)` twice; the raw twin is hand-written CUDA C++ (NVRTC) in a graph
built with the driver: a counter kernel arms each WHILE node's handle, the task kernels
wait in their first instruction behind programmatic edges, a condition kernel ends each
body. Both run OUTER x INNER inner iterations per call; the figure is time per inner
iteration, timed in interleaved rounds.
"""

from __future__ import annotations

import ctypes

import qgraph

from ..driver.device import check, driver
from ..driver.nodes import add_conditional_node, add_edge, conditional_handle
from ..tools.timing import interleaved_spreads, put_figure
from .baselines import KernelArgs, node_params_of

SIZE, OUTER, INNER = 256, 20, 50

RAW_SOURCE = r"""
typedef unsigned long long cudaGraphConditionalHandle;
#ifndef CUDARTAPI
#define CUDARTAPI
#endif
extern "C" __device__ __cudart_builtin__ void CUDARTAPI cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

extern "C" __global__ void arm(int* counter, int* flag, int n, cudaGraphConditionalHandle handle)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    counter[0] = n;
    flag[0] = n > 0 ? 1 : 0;
    cudaGraphSetConditional(handle, n > 0 ? 1u : 0u);
}

extern "C" __global__ void smooth(float* x, long long n, float a, float c)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + c;
}

extern "C" __global__ void countdown(int* counter, int* flag)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    counter[0] -= 1;
    flag[0] = counter[0] > 0 ? 1 : 0;
}

extern "C" __global__ void condition(cudaGraphConditionalHandle handle, const int* flag)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    cudaGraphSetConditional(handle, *flag != 0 ? 1u : 0u);
}
"""


@qgraph.kernel
def two_level(x0, x1, x2, x3, counts, outer, inner, outer_iters: int, inner_iters: int, a: float):
    counts[0] = outer_iters
    outer[0] = 1 if outer_iters > 0 else 0
    while qgraph.loop(outer):
        counts[1] = inner_iters
        inner[0] = 1 if inner_iters > 0 else 0
        while qgraph.loop(inner):
            for i in range(x0.shape[0]):
                x0[i] = x0[i] * a + 1.0
            for i in range(x1.shape[0]):
                x1[i] = x1[i] * a + 2.0
            for i in range(x2.shape[0]):
                x2[i] = x2[i] * a + 3.0
            for i in range(x3.shape[0]):
                x3[i] = x3[i] * a + 4.0
            counts[1] -= 1
            inner[0] = 1 if counts[1] > 0 else 0
        counts[0] -= 1
        outer[0] = 1 if counts[0] > 0 else 0


class RawNested:
    """The same two loops as a raw graph: arm(outer) -> WHILE{ arm(inner) -> WHILE{ 4 x smooth ->
    countdown -> condition } -> countdown -> condition }; programmatic edges where kernels follow
    kernels (every kernel waits in its first instruction)."""

    def __init__(self, device, arrays, counters: tuple[int, int], flags: tuple[int, int], a: float) -> None:
        from ..driver.nvrtc import compile_cubin

        d = driver()
        module = device.load_module(compile_cubin(RAW_SOURCE, "qgraph_nested.cu", device.info.compute_capability))
        self.f = {name: device.function(module, name) for name in ("arm", "smooth", "countdown", "condition")}
        self.stream, self._keep, ctx = device.stream_handle, [], device.context
        graph = check(d.cuGraphCreate(0), "cuGraphCreate")
        body_o = self._loop(graph, ctx, counters[0], flags[0], OUTER)
        body_i = self._loop(body_o[0], ctx, counters[1], flags[1], INNER)
        prev = None
        for k, arr in enumerate(arrays):
            args = KernelArgs(ctypes.c_uint64(arr.address), ctypes.c_int64(SIZE), ctypes.c_float(a),
                              ctypes.c_float(k + 1.0))
            prev = self._kernel(body_i[0], "smooth", (SIZE + 255) // 256, 256, args, [prev] if prev else [])
        self._tail(body_i, counters[1], flags[1], [prev], True)
        self._tail(body_o, counters[0], flags[0], [body_i[2]], False)  # after the inner WHILE node: plain edge
        self.exec = check(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        check(d.cuGraphUpload(self.exec, self.stream), "cuGraphUpload")
        self.graph = graph

    def _loop(self, graph, ctx, counter: int, flag: int, n: int):
        """arm -> WHILE in `graph`: (body graph, handle, WHILE node)."""
        handle = conditional_handle(graph, ctx)
        arm = self._kernel(graph, "arm", 1, 1, KernelArgs(ctypes.c_uint64(counter), ctypes.c_uint64(flag),
                                                     ctypes.c_int32(n), ctypes.c_uint64(int(handle))), [])
        _, node, body = add_conditional_node(graph, ctx, [arm], "WHILE", handle)
        return body, handle, node

    def _tail(self, loop, counter: int, flag: int, deps: list, programmatic: bool) -> None:
        body, handle, _ = loop
        down = self._kernel(body, "countdown", 1, 1, KernelArgs(ctypes.c_uint64(counter), ctypes.c_uint64(flag)), deps,
                            programmatic)
        self._kernel(body, "condition", 1, 1, KernelArgs(ctypes.c_uint64(int(handle)), ctypes.c_uint64(flag)), [down])

    def _kernel(self, graph, name: str, grid: int, block: int, args: KernelArgs, deps: list, programmatic: bool = True):
        d = driver()
        self._keep.append(args)
        node = check(d.cuGraphAddKernelNode(graph, [], 0, node_params_of(self.f[name], grid, block, args)), name)
        for dep in deps:
            add_edge(graph, dep, node, programmatic)
        return node

    def launch(self) -> None:
        driver().cuGraphLaunch(self.exec, self.stream)


def rows(budget: float, repeat: int) -> list[dict]:
    """[{mode, us per inner iteration (with us_min, us_max), ratio to the raw graph}] on CUDA."""
    device = qgraph.runtime.STATE.cuda
    q_arrays = [qgraph.ndarray(qgraph.f32, (SIZE,)) for _ in range(4)]
    counts, outer, inner = qgraph.ndarray(qgraph.i32, (2,)), qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(
        qgraph.i32, (1,))
    raw_arrays = [qgraph.ndarray(qgraph.f32, (SIZE,)) for _ in range(4)]
    raw_counts = qgraph.ndarray(qgraph.i32, (2,))
    raw_flags = qgraph.ndarray(qgraph.i32, (2,))
    count_at, flag_at = raw_counts.address, raw_flags.address
    raw = RawNested(device, raw_arrays, (count_at, count_at + 4), (flag_at, flag_at + 4), 0.5)
    calls = {"raw nested WHILE": raw.launch,
             "qgraph nested loops": lambda: two_level(*q_arrays, counts, outer, inner, OUTER, INNER, 0.5)}
    spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
    base = spreads["raw nested WHILE"].median
    out = []
    for mode, spread in spreads.items():
        row = {"mode": mode}
        put_figure(row, "us", spread, 1e6 / (OUTER * INNER))
        row["ratio"] = spread.median / base
        out.append(row)
    return out


def table(found: list[dict]) -> str:
    if not found:
        return ""
    lines = [f"\nnested device loops: {OUTER} outer x {INNER} inner passes of 4 tasks + countdown, per inner "
             "iteration, us (ratio to the raw graph)"]
    for r in found:
        lines.append(f"  {r['mode']:<24} {r['us']:8.2f} ({r['ratio']:.2f})")
    return "\n".join(lines)
