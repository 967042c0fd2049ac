"""kernel(..., progress=...): a bar or a callback fed from host memory while a device loop runs,
its last update the call's final passes and reported values; a callback returning False cancels."""

from __future__ import annotations

import numpy as np
import pytest
from test_cancel import cuda_loop, spin  # noqa: F401 (the fixture)

import qgraph


@qgraph.kernel(graph_while="flag")
def halve(x, flag, tol: float):
    x[0] = 0.5 * x[0]
    qgraph.report("x", x[0])
    flag[0] = 1 if x[0] > tol else 0


def test_the_last_update_is_the_calls_passes_and_latest_values(loop_arch):
    x, flag = qgraph.from_numpy(np.array([1.0])), qgraph.from_numpy(np.ones(1, np.int32))
    seen = []
    halve(x, flag, 1e-3, progress=lambda passes, values: seen.append((passes, values)))
    assert seen[-1] == (10, {"x": 0.5**10})  # 2^-10 < 1e-3 after ten passes
    assert all(passes <= 10 for passes, _ in seen)
    x.fill(1.0)
    halve(x, flag, 1e-3, progress=True)  # a tqdm bar (off here: stderr is no terminal)
    assert halve.stats.iterations == (10,)


def test_kernels_without_loops_take_no_progress_argument():
    @qgraph.kernel
    def scale(x):
        for i in range(x.shape[0]):
            x[i] *= 2.0

    with pytest.raises(TypeError, match="progress"):
        scale(np.ones(3), progress=True)


def test_a_callback_returning_false_cancels_the_loop(cuda_loop):  # noqa: F811
    count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.from_numpy(np.ones(1, np.int32))
    spin(count, flag, 2)
    qgraph.sync()
    with pytest.raises(qgraph.LoopCancelled, match="kernel spin"):
        spin(count, flag, 1 << 62, progress=lambda passes, values: passes < 1000)
    count.fill(0)
    spin(count, flag, 3, progress=True)
    assert count.to_numpy()[0] == 3
