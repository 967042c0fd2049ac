"""The stable-fluids pressure solve as hand-written CUDA C++: issue 32's baseline for the fluids row.

Warp's stable-fluids example captures its 100 Jacobi sweeps as 100 launches in one CUDA graph,
swapping p and p_new between launches. `UnrolledSweeps` builds that graph by hand: one kernel node
per sweep (2-D blocks of 32 x 8, `j` along the contiguous axis), the buffers alternating as in
`qgraph.examples.stable_fluids_kernels.pressure_scalar`, joined by programmatic edges on compute
capability 9.0+ (the kernel waits with griddepcontrol.wait at entry), as the other baselines are.
"""

from __future__ import annotations

import ctypes

BLOCK = (32, 8)  # threads along j (contiguous), along i

CUDA_SOURCE = r"""
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define WAIT()
#define LAUNCH_DEPENDENTS()
#endif

// One Jacobi sweep of laplace(p) = div on an nx x ny float32 grid (row-major): a clamped
// neighbour is the cell itself (dp/dn = 0 at the walls), the sum in the example's order.
#define SWEEP_BODY                                                             \
    int j = blockIdx.x * blockDim.x + threadIdx.x;                             \
    int i = blockIdx.y * blockDim.y + threadIdx.y;                             \
    if (i >= nx || j >= ny) return;                                            \
    float pl = p[max(i - 1, 0) * ny + j];                                      \
    float pr = p[min(i + 1, nx - 1) * ny + j];                                 \
    float pb = p[i * ny + max(j - 1, 0)];                                      \
    float pt = p[i * ny + min(j + 1, ny - 1)];                                 \
    p_new[i * ny + j] = 0.25f * (pl + pr + pb + pt - div[i * ny + j]);

__device__ __forceinline__ void sweep(const float* __restrict__ p, float* __restrict__ p_new,
                                      const float* __restrict__ div, int nx, int ny) {
    SWEEP_BODY
}

// Without __restrict__: plain ld.global loads, as qgraph's tasks (p and p_new may alias there).
__device__ __forceinline__ void sweep_aliased(const float* p, float* p_new, const float* div, int nx, int ny) {
    SWEEP_BODY
}

extern "C" __global__ void pressure_sweep(const float* __restrict__ p, float* __restrict__ p_new,
                                          const float* __restrict__ div, int nx, int ny) {
    WAIT();
    sweep(p, p_new, div, nx, ny);
}

// The same sweep letting the next node's blocks be scheduled at once (they still wait for this
// grid to finish and its writes to be visible in their own griddepcontrol.wait).
extern "C" __global__ void pressure_sweep_early(const float* __restrict__ p, float* __restrict__ p_new,
                                                const float* __restrict__ div, int nx, int ny) {
    LAUNCH_DEPENDENTS();
    WAIT();
    sweep(p, p_new, div, nx, ny);
}

// The trigger after the wait: the successor launches once every block of this grid has passed
// its wait (its predecessor done), so at most one grid waits ahead instead of a cascade of them.
extern "C" __global__ void pressure_sweep_late(const float* __restrict__ p, float* __restrict__ p_new,
                                               const float* __restrict__ div, int nx, int ny) {
    WAIT();
    LAUNCH_DEPENDENTS();
    sweep(p, p_new, div, nx, ny);
}

// Diagnostics for the gap to qgraph's task (docs/benchmarks.md, "Unrolled device loops"):
// the same sweep with plain loads, and the same sweep taking qgraph's 256-byte parameter block
// (5 bounds, then each array as numba's 2-D array struct) instead of 32 bytes.
extern "C" __global__ void pressure_sweep_aliased(const float* p, float* p_new, const float* div, int nx, int ny) {
    WAIT();
    sweep_aliased(p, p_new, div, nx, ny);
}

struct NumbaArray2 {
    void* meminfo; void* parent; long long nitems, itemsize; float* data; long long shape[2], strides[2];
};

extern "C" __global__ void pressure_sweep_qgraph_params(long long s0, long long s1, long long c0, long long c1,
                                                        long long n, NumbaArray2 p, NumbaArray2 p_new,
                                                        NumbaArray2 div) {
    WAIT();
    sweep(p.data, p_new.data, div.data, (int)c0, (int)c1);
}
"""

ENTRIES = ("pressure_sweep", "pressure_sweep_early", "pressure_sweep_aliased", "pressure_sweep_qgraph_params",
           "pressure_sweep_late")
VARIANTS = {"baseline": ENTRIES[0], "early": ENTRIES[1], "aliased": ENTRIES[2], "qgraph_params": ENTRIES[3],
            "late": ENTRIES[4]}


class NumbaArray2(ctypes.Structure):
    """numba's 2-D array argument as qgraph's parameter block holds it (9 eight-byte fields)."""

    _fields_ = [("meminfo", ctypes.c_uint64), ("parent", ctypes.c_uint64), ("nitems", ctypes.c_int64),
                ("itemsize", ctypes.c_int64), ("data", ctypes.c_uint64), ("shape", ctypes.c_int64 * 2),
                ("strides", ctypes.c_int64 * 2)]


def sweep_buffers(p, p_new, sweeps: int) -> list[tuple]:
    """(source, destination) of each sweep: p -> p_new -> p ..., as the example and Warp swap them."""
    return [(p, p_new) if k % 2 == 0 else (p_new, p) for k in range(sweeps)]


class UnrolledSweeps:
    """`sweeps` Jacobi sweeps of (p, p_new, div) as one CUDA graph of `sweeps` kernel nodes.

    programmatic: programmatic edges between the nodes (compute capability 9.0+; plain edges, what
    a stream capture such as Warp's makes, otherwise); early: each sweep lets its successor launch
    at its entry (griddepcontrol.launch_dependents); variant: another kernel of VARIANTS (the
    diagnostics; "late": the trigger after the wait). The final field is in `result`."""

    def __init__(self, device, p, p_new, div, sweeps: int, programmatic: bool = True, early: bool = False,
                 variant: str = "baseline") -> None:
        from ..driver.device import check, driver
        from ..driver.nvrtc import compile_cubin

        if p.shape != p_new.shape or p.shape != div.shape or len(p.shape) != 2:
            raise ValueError(f"p, p_new and div must be 2-D arrays of one shape, got {p.shape}, {p_new.shape}, "
                             f"{div.shape}")
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        cc = tuple(device.info.compute_capability)
        self.d, self.check, self.stream = driver(), check, device.stream_handle
        self.programmatic = programmatic and cc >= (9, 0)
        module = device.load_module(compile_cubin(CUDA_SOURCE, "qgraph_bench_fluids.cu", cc))
        self.variant = "early" if early else variant
        self.function = device.function(module, VARIANTS[self.variant])
        self.buffers, self.result = (p, p_new), (p if sweeps % 2 == 0 else p_new)
        self._keep: list = []
        graph = check(self.d.cuGraphCreate(0), "cuGraphCreate")
        previous = None
        for src, dst in sweep_buffers(p, p_new, sweeps):
            previous = self._add_sweep(graph, src, dst, div, previous)
        self.exec = check(self.d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        check(self.d.cuGraphUpload(self.exec, self.stream), "cuGraphUpload")
        check(self.d.cuGraphDestroy(graph), "cuGraphDestroy")

    def _add_sweep(self, graph, src, dst, div, previous):
        from ..driver.nodes import add_edge, kernel_node_params

        nx, ny = src.shape
        if self.variant == "qgraph_params":
            bounds = (0, 0, nx, ny, nx * ny)
            values = (*(ctypes.c_int64(b) for b in bounds), *(_numba_array(a) for a in (src, dst, div)))
        else:
            values = (ctypes.c_uint64(src.address), ctypes.c_uint64(dst.address), ctypes.c_uint64(div.address),
                      ctypes.c_int32(nx), ctypes.c_int32(ny))
        pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        self._keep.append((values, pointers))
        grid = ((ny + BLOCK[0] - 1) // BLOCK[0], (nx + BLOCK[1] - 1) // BLOCK[1], 1) + BLOCK
        params = kernel_node_params(self.function, grid, 0, kernel_params=ctypes.addressof(pointers))
        node = self.check(self.d.cuGraphAddKernelNode(graph, [], 0, params), "adding a sweep node")
        if previous is not None:
            add_edge(graph, previous, node, self.programmatic)
        return node

    def launch(self) -> None:
        self.d.cuGraphLaunch(self.exec, self.stream)


def _numba_array(a) -> NumbaArray2:
    nx, ny = a.shape
    return NumbaArray2(0, 0, nx * ny, 4, a.address, (ctypes.c_int64 * 2)(nx, ny), (ctypes.c_int64 * 2)(ny * 4, 4))
