"""Kernels under atomic contention (test_atomics.py; compiled to PTX by test_cuda_codegen.py)."""

from __future__ import annotations

import qgraph


@qgraph.kernel
def histogram(values, bins):
    for i in range(values.shape[0]):
        qgraph.atomic_add(bins, values[i] % bins.shape[0], 1)


@qgraph.kernel
def extremes(values, lo, hi, count):
    for i in range(values.shape[0]):
        qgraph.atomic_min(lo, 0, values[i])
        qgraph.atomic_max(hi, 0, values[i])
        qgraph.atomic_sub(count, 0, 1)


@qgraph.kernel
def grid_counts(out, n):
    for i in range(n):
        qgraph.atomic_add(out, (i % 2, i % 3), 1)
