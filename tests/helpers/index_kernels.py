"""Kernels of index arithmetic and multi-dimensional loops (test_index_ranges.py, test_ndrange_blocks.py;
compiled to PTX by test_cuda_codegen.py)."""

from __future__ import annotations

import qgraph


@qgraph.kernel
def clamped_sweep(p, p_new, div):
    """The stable-fluids Jacobi sweep: a clamped neighbour is the cell itself."""
    for i, j in qgraph.ndrange(p.shape[0], p.shape[1]):
        pl = p[max(i - 1, 0), j]
        pr = p[min(i + 1, p.shape[0] - 1), j]
        pb = p[i, max(j - 1, 0)]
        pt = p[i, min(j + 1, p.shape[1] - 1)]
        p_new[i, j] = 0.25 * (pl + pr + pb + pt - div[i, j])


@qgraph.kernel
def wrapped(u, x, v, out, flipped, out1, out3, odd):
    for i, j in qgraph.ndrange(u.shape[0], u.shape[1]):
        out[i, j] = u[i - 1, j - 2] + 2 * u[u.shape[0] - 1 - i, j] + 3 * u[i, max(j - 1, 0)] + 5 * u[-1, 2 * j // 2]
        flipped[u.shape[0] - 1 - i, j] = u[i, j]
    for i in range(x.shape[0]):
        out1[i] = x[i - 1] + 2 * x[min(i + 1, x.shape[0] - 1)] + 3 * x[max(i - 2, 0)]
    for i, j, k in qgraph.ndrange(v.shape[0], v.shape[1], v.shape[2]):
        out3[i, j, k] = v[max(i - 1, 0), j, k - 1] + 2 * v[i, min(j + 1, v.shape[1] - 1), v.shape[2] - 1 - k]
    for i, j in qgraph.ndrange(4, u.shape[1]):  # i < 4: the product fits 32 bits
        odd[i, j] = u[2 * i + 1, j]


@qgraph.kernel
def offset_rows(u, out, base):
    """`base` is a scalar argument: its range is unknown, so these indices stay 64-bit."""
    for i, j in qgraph.ndrange(u.shape[0], u.shape[1]):
        out[i, j] = u[min(i + base, u.shape[0] - 1), j] + 2 * u[max(i - base, 0), min(j + base, 1)]


@qgraph.kernel
def clamped_locals(p, out, out2):
    """Clamps in locals assigned once (32-bit where they are read as indices) and one assigned twice."""
    for i, j in qgraph.ndrange(p.shape[0], p.shape[1]):
        ip = min(i + 1, p.shape[0] - 1)
        jm = j - 1  # wraps at 0
        out[i, j] = p[ip, j] + 2 * p[max(i - 1, 0), jm] + 3 * p[ip, ip % 3] + 5 * jm
        k = i
        k = k + 1
        out2[i, j] = p[min(k, p.shape[0] - 1), j]


@qgraph.kernel
def laplacian(u, out):
    for i, j, k in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1), (1, u.shape[2] - 1)):
        out[i, j, k] = (u[i - 1, j, k] + u[i + 1, j, k] + u[i, j - 1, k] + u[i, j + 1, k] + u[i, j, k - 1]
                        + u[i, j, k + 1] - 6 * u[i, j, k])


@qgraph.kernel
def three_d(out):
    for a, b, c in qgraph.ndrange(out.shape[0], out.shape[1], out.shape[2]):
        out[a, b, c] = (a * 7 + b) * 11 + c


@qgraph.kernel
def index_code_of_counts(out, n: int, m: int):
    for i, j in qgraph.ndrange(n, m):
        out[i, j] = i * 100003 + j


@qgraph.kernel
def mark_3d(out):
    for a, b, c in qgraph.ndrange(out.shape[0], out.shape[1], out.shape[2]):
        out[a, b, c] += 1
