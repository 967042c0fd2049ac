"""The reduction workloads: qgraph kernels, and the same algorithms in hand-written CUDA C++.

Reductions (float32, 2^26 elements): sum, max and dot, each reset + reduce. The README's
`relax` (float64 Jacobi sweep with the max change, a copy back, a convergence check) run
for a fixed number of iterations in a device loop. The CUDA C++ twins use what a careful
engineer writes: grid-stride loops over a grid of one wave, warp shuffles, one shared-memory
step and one atomic per block; 2-D blocks for the stencil; griddepcontrol.wait at each
kernel's entry so graph nodes can be joined by programmatic edges.
"""

from __future__ import annotations

KERNELS_SOURCE = '''
import qgraph


@qgraph.kernel(cuda_graph=True)
def rsum(x, out):
    out[0] = 0.0
    for i in range(x.shape[0]):
        out[0] += x[i]


@qgraph.kernel(cuda_graph=True)
def rmax(x, out):
    out[0] = -3.0e38
    for i in range(x.shape[0]):
        qgraph.atomic_max(out, 0, x[i])


@qgraph.kernel(cuda_graph=True)
def rdot(x, y, out):
    out[0] = 0.0
    for i in range(x.shape[0]):
        out[0] += x[i] * y[i]


@qgraph.kernel
def rsum_cpu(x, out):
    for i in range(x.shape[0]):
        out[0] += x[i]


@qgraph.kernel(graph_while="flag")
def relax(u, un, change, flag, it, tol: float, cap: int):
    change[0] = 0.0
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        un[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        qgraph.atomic_max(change, 0, abs(un[i, j] - u[i, j]))
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        u[i, j] = un[i, j]
    it[0] += 1
    flag[0] = 1 if change[0] > tol and it[0] < cap else 0
'''

CUDA_SOURCE = r"""
typedef unsigned long long cudaGraphConditionalHandle;
#ifndef CUDARTAPI
#define CUDARTAPI
#endif
extern "C" __device__ __cudart_builtin__ void CUDARTAPI cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

#define WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")

template <typename T> __device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ T warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

// one block-reduced value per block, in lane 0 of warp 0 (returns it there)
template <typename T, bool MAX> __device__ T block_reduce(T v, T identity) {
    __shared__ T shared[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = identity;
    if (warp == 0) {
        v = lane < (int)((blockDim.x + 31) >> 5) ? shared[lane] : identity;
        v = MAX ? warp_max(v) : warp_sum(v);
    }
    return v;
}

__device__ void atomic_max_float(float* out, float v) {
    if (v >= 0.0f) atomicMax((int*)out, __float_as_int(v));
    else atomicMin((unsigned int*)out, __float_as_uint(v));
}

extern "C" __global__ void set_value(float* out, float v) { WAIT(); out[0] = v; }

extern "C" __global__ void hsum(const float* __restrict__ x, long long n, float* out) {
    WAIT();
    float s = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        s += x[i];
    s = block_reduce<float, false>(s, 0.0f);
    if (threadIdx.x == 0) atomicAdd(out, s);
}

extern "C" __global__ void hmax(const float* __restrict__ x, long long n, float* out) {
    WAIT();
    float m = -3.0e38f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        m = fmaxf(m, x[i]);
    m = block_reduce<float, true>(m, -3.0e38f);
    if (threadIdx.x == 0) atomic_max_float(out, m);
}

extern "C" __global__ void hdot(const float* __restrict__ x, const float* __restrict__ y, long long n, float* out) {
    WAIT();
    float s = 0.0f;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        s += x[i] * y[i];
    s = block_reduce<float, false>(s, 0.0f);
    if (threadIdx.x == 0) atomicAdd(out, s);
}

// relax: 2-D blocks of 32 x 8 over the interior, the max change as the bits of a non-negative double
extern "C" __global__ void jacobi(const double* __restrict__ u, double* __restrict__ un, int n,
                                  unsigned long long* change) {
    WAIT();
    int j = blockIdx.x * blockDim.x + threadIdx.x + 1;
    int i = blockIdx.y * blockDim.y + threadIdx.y + 1;
    double d = 0.0;
    if (i < n - 1 && j < n - 1) {
        long long k = (long long)i * n + j;
        double v = 0.25 * (u[k - n] + u[k + n] + u[k - 1] + u[k + 1]);
        un[k] = v;
        d = fabs(v - u[k]);
    }
    // flatten the 2-D block for the reduction
    __shared__ double shared[32];
    int t = threadIdx.y * blockDim.x + threadIdx.x, lane = t & 31, warp = t >> 5;
    d = warp_max(d);
    if (lane == 0) shared[warp] = d;
    __syncthreads();
    if (warp == 0) {
        d = lane < (int)((blockDim.x * blockDim.y + 31) >> 5) ? shared[lane] : 0.0;
        d = warp_max(d);
        if (lane == 0) atomicMax(change, (unsigned long long)__double_as_longlong(d));
    }
}

extern "C" __global__ void copy_back(double* __restrict__ u, const double* __restrict__ un, int n) {
    WAIT();
    int j = blockIdx.x * blockDim.x + threadIdx.x + 1;
    int i = blockIdx.y * blockDim.y + threadIdx.y + 1;
    if (i < n - 1 && j < n - 1) { long long k = (long long)i * n + j; u[k] = un[k]; }
}

extern "C" __global__ void check(cudaGraphConditionalHandle handle, unsigned long long* change, int* it,
                                 double tol, int cap) {
    WAIT();
    it[0] += 1;
    double c = __longlong_as_double((long long)change[0]);
    unsigned int go = (c > tol && it[0] < cap) ? 1u : 0u;
    change[0] = 0ull;  // ready for the next sweep
    cudaGraphSetConditional(handle, go);
}
"""
