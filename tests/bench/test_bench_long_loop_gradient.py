"""The long run of issue 33 scaled down (qgraph/bench/long_loop_gradient.py): 1,000 passes of the
nested drag loop under a checkpoint budget far below its all-states bytes give the gradient of
the flat loop that keeps every state; the budget holds."""

from __future__ import annotations

import numpy as np

from qgraph.bench import long_loop_gradient as long


def test_budgeted_nested_schedule_against_every_state_kept(arch):
    n, outer, inner = 8, 10, 100
    state = n * 12 * 2  # x and v, vec3 float32
    budget = 40 * state  # every state of the 1,000 passes: 1,000 x state
    budgeted = long.gradient(n, outer, inner, budget)
    reference = long.gradient(n, outer, inner, None, flat_every=1)
    assert budgeted["bytes"] <= budget < reference["bytes"] and reference["bytes"] >= 1000 * state
    for name in ("x", "v", "k"):
        np.testing.assert_allclose(budgeted["grads"][name], reference["grads"][name], rtol=2e-5, atol=1e-6)
    assert np.abs(budgeted["grads"]["x"]).max() > 0.5  # d sum(x) / d x0 is about 1: the gradient is there

