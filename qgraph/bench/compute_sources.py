"""The compute benchmark's kernels, three ways: qgraph, hand-written CUDA C++, hand-written numba.

Each workload is written the way its users write it: the qgraph kernels with Python float
literals and `ndrange` (as ported from Taichi), the CUDA C++ with 2-D blocks and `int`
index math, the numba twins with `prange` over the outer index.
"""

from __future__ import annotations

KERNELS_SOURCE = '''
import math

import numpy as np

import qgraph


@qgraph.kernel(cuda_graph=True)
def stencil2d(u, out):
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


@qgraph.kernel(cuda_graph=True)
def stencil3d(u, out):
    for i, j, k in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1), (1, u.shape[2] - 1)):
        out[i, j, k] = (1.0 / 6.0) * (u[i - 1, j, k] + u[i + 1, j, k] + u[i, j - 1, k] + u[i, j + 1, k]
                                      + u[i, j, k - 1] + u[i, j, k + 1])


def _forces(px, py, pz, vx, vy, vz, m, dt, eps2):
    for i in range(px.shape[0]):
        xi = px[i]
        yi = py[i]
        zi = pz[i]
        ax = 0.0
        ay = 0.0
        az = 0.0
        for j in range(px.shape[0]):
            dx = px[j] - xi
            dy = py[j] - yi
            dz = pz[j] - zi
            inv = 1.0 / math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
            s = m[j] * inv * inv * inv
            ax += s * dx
            ay += s * dy
            az += s * dz
        vx[i] += dt * ax
        vy[i] += dt * ay
        vz[i] += dt * az


nbody = qgraph.kernel(cuda_graph=True)(_forces)
nbody_fast = qgraph.kernel(cuda_graph=True, fast_math=True)(_forces)


# Taichi's 2-D N-body example (compute_force) ported line by line: module-level ints, float
# literals, a helper with `(1.0 / r) ** 3`, accumulators started from 0.0; beside it the same
# forces hand-tuned (float32 constants, one reciprocal cubed by hand). The code generator should
# make the two the same machine code.
G = 1
M = 5
GRAVITY = np.float32(-G * M * M)
SOFTENING = np.float32(1e-5)


@qgraph.func
def gravity(dx, dy):
    r = math.sqrt(dx * dx + dy * dy + 1e-5)
    s = -G * M * M * (1.0 / r) ** 3
    return s * dx, s * dy


@qgraph.func
def gravity_tuned(dx, dy):
    r = math.sqrt(dx * dx + dy * dy + SOFTENING)
    ir = np.float32(1.0) / r
    s = GRAVITY * ir * ir * ir
    return s * dx, s * dy


def _taichi_forces(pos, force):
    for i in range(pos.shape[0]):
        px = pos[i, 0]
        py = pos[i, 1]
        fx = 0.0
        fy = 0.0
        for j in range(pos.shape[0]):
            if i != j:
                gx, gy = gravity(px - pos[j, 0], py - pos[j, 1])
                fx += gx
                fy += gy
        force[i, 0] = fx
        force[i, 1] = fy


def _taichi_forces_tuned(pos, force):
    for i in range(pos.shape[0]):
        px = pos[i, 0]
        py = pos[i, 1]
        fx = np.float32(0.0)
        fy = np.float32(0.0)
        for j in range(pos.shape[0]):
            if i != j:
                gx, gy = gravity_tuned(px - pos[j, 0], py - pos[j, 1])
                fx += gx
                fy += gy
        force[i, 0] = fx
        force[i, 1] = fy


taichi_nbody = qgraph.kernel(cuda_graph=True)(_taichi_forces)
taichi_nbody_fast = qgraph.kernel(cuda_graph=True, fast_math=True)(_taichi_forces)
taichi_nbody_tuned = qgraph.kernel(cuda_graph=True)(_taichi_forces_tuned)
taichi_nbody_tuned_fast = qgraph.kernel(cuda_graph=True, fast_math=True)(_taichi_forces_tuned)


@qgraph.kernel(cuda_graph=True)
def saxpy(x, y, a):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]
'''

_CUDA = r"""
extern "C" __global__ void stencil2d(const float* __restrict__ u, float* __restrict__ out, int n, int m) {
    int j = blockIdx.x * blockDim.x + threadIdx.x + 1;
    int i = blockIdx.y * blockDim.y + threadIdx.y + 1;
    if (i < n - 1 && j < m - 1) {
        int k = i * m + j;
        out[k] = 0.25f * (u[k - m] + u[k + m] + u[k - 1] + u[k + 1]);
    }
}

extern "C" __global__ void stencil3d(const float* __restrict__ u, float* __restrict__ out, int n0, int n1, int n2) {
    int k = blockIdx.x * blockDim.x + threadIdx.x + 1;
    int j = blockIdx.y * blockDim.y + threadIdx.y + 1;
    int i = blockIdx.z + 1;
    if (i < n0 - 1 && j < n1 - 1 && k < n2 - 1) {
        int plane = n1 * n2;
        int c = i * plane + j * n2 + k;
        out[c] = (1.0f / 6.0f) * (u[c - plane] + u[c + plane] + u[c - n2] + u[c + n2] + u[c - 1] + u[c + 1]);
    }
}

// one thread per body, every pair from global memory (not tiled through shared memory)
extern "C" __global__ void nbody(const float* __restrict__ px, const float* __restrict__ py,
                                 const float* __restrict__ pz, float* vx, float* vy, float* vz,
                                 const float* __restrict__ m, int n, float dt, float eps2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float xi = px[i], yi = py[i], zi = pz[i];
    float ax = 0.0f, ay = 0.0f, az = 0.0f;
    for (int j = 0; j < n; j++) {
        float dx = px[j] - xi, dy = py[j] - yi, dz = pz[j] - zi;
        float inv = 1.0f / sqrtf(dx * dx + dy * dy + dz * dz + eps2);
        float s = m[j] * inv * inv * inv;
        ax += s * dx;
        ay += s * dy;
        az += s * dz;
    }
    vx[i] += dt * ax;
    vy[i] += dt * ay;
    vz[i] += dt * az;
}

// the same without __restrict__ (a diagnostic beside the fast-math rows): its loads are plain
// LDG.E, not the read-only path (LDG.E.CONSTANT) that `const __restrict__` selects
extern "C" __global__ void saxpy(const float* __restrict__ x, float* __restrict__ y, float a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

# the same N-body without __restrict__: plain loads, as qgraph's kernels make, not the read-only path
_PLAIN = _CUDA[_CUDA.index('extern "C" __global__ void nbody('):_CUDA.index('extern "C" __global__ void saxpy(')]
CUDA_SOURCE = _CUDA + _PLAIN.replace("void nbody(", "void nbody_plain(").replace(" __restrict__", "")


NUMBA_SOURCE = '''
import math

import numba
import numpy as np


def make(fastmath):
    @numba.njit(parallel=True, fastmath=fastmath)
    def stencil2d(u, out):
        for i in numba.prange(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                out[i, j] = np.float32(0.25) * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])

    @numba.njit(parallel=True, fastmath=fastmath)
    def stencil3d(u, out):
        c = np.float32(1.0 / 6.0)
        for i in numba.prange(1, u.shape[0] - 1):
            for j in range(1, u.shape[1] - 1):
                for k in range(1, u.shape[2] - 1):
                    out[i, j, k] = c * (u[i - 1, j, k] + u[i + 1, j, k] + u[i, j - 1, k] + u[i, j + 1, k]
                                        + u[i, j, k - 1] + u[i, j, k + 1])

    @numba.njit(parallel=True, fastmath=fastmath)
    def nbody(px, py, pz, vx, vy, vz, m, dt, eps2):
        n = px.shape[0]
        for i in numba.prange(n):
            xi, yi, zi = px[i], py[i], pz[i]
            ax = np.float32(0.0)
            ay = np.float32(0.0)
            az = np.float32(0.0)
            for j in range(n):
                dx = px[j] - xi
                dy = py[j] - yi
                dz = pz[j] - zi
                inv = np.float32(1.0) / math.sqrt(dx * dx + dy * dy + dz * dz + eps2)
                s = m[j] * inv * inv * inv
                ax += s * dx
                ay += s * dy
                az += s * dz
            vx[i] += dt * ax
            vy[i] += dt * ay
            vz[i] += dt * az

    return {"stencil2d": stencil2d, "stencil3d": stencil3d, "nbody": nbody}
'''
