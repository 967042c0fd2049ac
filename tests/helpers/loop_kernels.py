"""graph_while kernels (test_graph_while.py, test_cancel.py, test_progress.py; compiled to PTX by
test_cuda_codegen.py and test_cuda_build.py)."""

from __future__ import annotations

import qgraph


@qgraph.kernel(graph_while="flag")
def countdown(counter, flag, visits):
    for i in range(visits.shape[0]):
        visits[i] += 1
    counter[0] -= 1
    flag[0] = 1 if counter[0] > 0 else 0


@qgraph.kernel(graph_while="done")
def grow_until(x, done, threshold: float):
    for i in range(x.shape[0]):
        x[i] = x[i] * 1.5 + 1.0
    done[()] = 0 if x[0] >= threshold else 1


@qgraph.kernel(graph_while="flag", max_iterations=None)  # a cancel that fails ends at stop_at: no error
def crawl(count, flag, stop_at: int):
    count[0] += 1
    flag[0] = 1 if count[0] < stop_at else 0


@qgraph.kernel(graph_while="flag", max_iterations=None)
def creep(x, count, flag, stop_at):
    """A differentiable flag loop (x's update) that runs stop_at[0] passes: only a cancel ends a long one."""
    for i in range(x.shape[0]):
        x[i] = x[i] * 0.5 + 1.0
    count[0] += 1
    flag[0] = 1 if count[0] < stop_at[0] else 0


@qgraph.kernel(temporal_tiling=3)  # CUDA: each launch runs 3 passes of the stencil over tiles
def smooth(a, b, k: int):  # test_temporal_tiling.py, test_cancel_family.py
    for _ in qgraph.repeat(k):
        for i in range(1, a.shape[0] - 1):
            b[i] = (a[i - 1] + a[i] + a[i + 1]) * 0.25
        for i in range(1, a.shape[0] - 1):
            a[i] = b[i - 1] * 0.25 + b[i] * 0.5 + b[i + 1] * 0.25
