"""Kernels of general shape (the results tests in test_kernels.py; compiled to PTX by test_cuda_codegen.py),
and an axpy for tests about calls rather than kernels (test_input_errors.py, test_step.py)."""

from __future__ import annotations

import math

import qgraph

SCALE = 3.0


@qgraph.kernel
def saxpy(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


@qgraph.kernel(cuda_graph=True)
def stencil(u, out):
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


@qgraph.kernel
def mixed(x, total, out, n):
    total[0] = 0.0
    for i in range(n):
        x[i] = x[i] * 2.0
    for i in range(n):
        qgraph.atomic_add(total, 0, x[i])
    s = total[0]
    out[0] = s + 1.0
    out[1] = math.sqrt(s)


@qgraph.kernel
def strided_range(out, start, stop, step):
    for i in range(start, stop, step):
        out[i] = i + 100


@qgraph.func
def lerp(a, b, t):
    return a + (b - a) * clamp01(t)


@qgraph.func
def clamp01(t):
    return min(max(t, 0.0), 1.0)


@qgraph.kernel
def with_funcs(a, b, t, out):
    for i in range(out.shape[0]):
        out[i] = lerp(a[i], b[i], t[i]) * SCALE


@qgraph.kernel
def cube(out):
    for i, j, k in qgraph.ndrange(out.shape[0], out.shape[1], out.shape[2]):
        out[i, j, k] = i * 100 + j * 10 + k


@qgraph.kernel
def skip_odd(out):
    for i in range(out.shape[0]):
        if i % 2 == 1:
            continue
        out[i] = 1


@qgraph.kernel
def scalar_types(out, a, b, flag):
    out[0] = a + b
    if flag:
        out[1] = 1.0


@qgraph.kernel
def zero_d(x, y):
    y[()] = x[()] * 2


@qgraph.kernel
def zero_d_in_parallel_loop(total, scale, out):
    for i in range(out.shape[0]):
        out[i] = scale[()] * i
        qgraph.atomic_add(total, (), 1)


@qgraph.func
def twice_value(a):
    return a[()] * 2.0


@qgraph.kernel
def zero_d_to_func(scale, out):
    out[0] = twice_value(scale)


@qgraph.kernel
def signed_indices(a, out, grid):
    for i in range(a.shape[0]):
        out[i] = a[min(i, 3)] + (i - 5)
    for i, j in qgraph.ndrange(grid.shape[0], grid.shape[1]):
        grid[i, j] = max(i - j, -1) * 10 + a[max(j - 1, 0)]


@qgraph.kernel
def serial_range_forms(out, a, b, step):
    for i in range(out.shape[0]):
        total = 0
        for j in range(a, b):  # a counted loop on CUDA (lang.cuda.loops.CountedLoops)
            if j % 3 == 0:
                continue
            total += j
        for j in range(b, a, -2):  # a negative step stays numba's range
            total += 1000 * j
        for j in range(0, b, step):  # a runtime step too
            total += 7 + 0 * j
        last = -1
        for j in range(i):
            last = j
        out[i] = total + 100000 * last


@qgraph.kernel
def axpy(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] += a * x[i]
