"""Reductions and scatters in parallel loops (test_reductions.py; compiled to PTX by test_cuda_codegen.py
and test_reports.py)."""

from __future__ import annotations

import qgraph


@qgraph.kernel
def total(x, out):
    for i in range(x.shape[0]):
        out[0] += x[i]


@qgraph.kernel
def total_minus(x, out):
    for i in range(x.shape[0]):
        out[0] -= x[i]


@qgraph.kernel
def smallest(x, out):
    for i in range(x.shape[0]):
        qgraph.atomic_min(out, 0, x[i])


@qgraph.kernel
def largest(x, out):
    for i in range(x.shape[0]):
        qgraph.atomic_max(out, 0, x[i])


@qgraph.kernel
def dot(x, y, out):
    for i in range(x.shape[0]):
        out[()] += x[i] * y[i]


@qgraph.kernel
def largest_change(new, old, err):
    """A convergence check as Taichi code ports it (`err[None]`): a max into a 0-d array."""
    for i in range(new.shape[0]):
        qgraph.atomic_max(err, (), abs(new[i] - old[i]))


@qgraph.kernel
def positive_sum_and_max(x, s, m):
    for i in range(x.shape[0]):
        if x[i] > 0:
            s[0] += x[i]
            qgraph.atomic_max(m, 0, x[i])


@qgraph.kernel
def grid_total(a, out, k: int):
    for i, j in qgraph.ndrange(a.shape[0], a.shape[1]):
        out[k] += a[i, j]


@qgraph.kernel
def histogram(idx, w, h):
    for i in range(idx.shape[0]):
        h[idx[i]] += w[i]


@qgraph.kernel
def private_updates(x, y):
    for i in range(x.shape[0]):
        x[i] += y[i]
        qgraph.atomic_add(x, i, 1)


@qgraph.kernel
def strided_sum(x, out, step: int):
    for i in range(1, x.shape[0], step):
        if i % 3 == 0:
            continue
        out[0] += x[i]


@qgraph.kernel(cuda_graph=True)
def graph_largest_0d(x, err, count, slot):
    """0-d targets written by a serial task, then reduced into (err) and atomically updated
    with the old value used (count); on CUDA the parallel task takes them as one element."""
    err[()] = -1.0
    count[()] = 0
    for i in range(x.shape[0]):
        qgraph.atomic_max(err, (), x[i])
        slot[i] = qgraph.atomic_add(count, (), 1)
