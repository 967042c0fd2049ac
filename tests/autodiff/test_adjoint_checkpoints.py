"""Gradients of kernels that keep states beyond one top-level loop (lang/adjoint/checkpoints.py):
a loop that keeps states nested in a repeat loop and in a flag loop, two loops in sequence with a
task between them writing what they carry, and a branch on a flag the kernel writes (the branch
taken kept per pass); against central differences and the same passes called one by one under
the tape, on the CPU, the CUDA WHILE node and the host fallback; memory reported and bounded."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.gradient_kernels import drag_pass, nested, nested_until, switching
from helpers.gradients import check_gradients, seeds_for, to_qgraph, uniform

import qgraph

N = 4


@qgraph.kernel
def two_loops(x, v, k, steps: int, dt: float):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] -= k[0] * v[i] * abs(v[i]) * dt
            x[i] += v[i] * dt
    for i in range(x.shape[0]):
        v[i] = math.cos(x[i]) * v[i]  # between the loops, writing what both carry
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            x[i] += math.sin(v[i]) * x[i] * dt


@qgraph.kernel
def settle(x, left, flag, outer: int):
    for _ in qgraph.repeat(outer):  # linear, yet around a flag loop, whose count must be kept
        left[()] = 3
        flag[()] = 1
        while qgraph.loop(flag):
            for i in range(x.shape[0]):
                x[i] = 0.5 * x[i] + 1.0
            left[()] -= 1
            if left[()] <= 0:
                flag[()] = 0


@qgraph.kernel
def kick(x, v, dt: float):
    for i in range(x.shape[0]):
        v[i] += dt * math.sin(x[i])


def _xvk() -> list:
    return [uniform(N, lo=-1.0, hi=1.0), uniform(N, lo=-2.0, hi=2.0), uniform(1)]


@pytest.mark.parametrize("outer, inner", [(3, 4), (2, 1), (0, 3)])
def test_a_loop_nested_in_a_repeat_loop(loop_arch, outer, inner):
    args = [*_xvk(), outer, inner, 0.05]
    found = check_gradients(nested, *args, tape=True, rtol=1e-6, atol=1e-8)
    seeds = seeds_for(args)
    x, v, k = to_qgraph(args[:3], True)
    with qgraph.Tape() as unrolled:  # the same passes, one call each
        for _ in range(outer):
            kick(x, v, 0.05)
            for _ in range(inner):
                drag_pass(x, v, k, 0.05)
    if not outer:  # no pass: the gradient is the seed itself (and a tape with no calls refuses a backward)
        for n in range(3):
            np.testing.assert_allclose(found[n], seeds[n], rtol=1e-12, atol=1e-14)
        return
    unrolled.backward(grads={a: seeds[n] for n, a in enumerate((x, v, k))})
    for n, a in enumerate((x, v, k)):
        np.testing.assert_allclose(found[n], a.grad.to_numpy(), rtol=1e-12, atol=1e-14)


def test_a_loop_nested_in_a_flag_loop(loop_arch):
    args = [*_xvk(), np.array(3, np.int64), np.array(1, np.int32), 4, 0.05]
    check_gradients(nested_until, *args, tape=True, rtol=1e-6, atol=1e-8)


def test_a_linear_loop_around_a_flag_loop(arch):
    x = qgraph.from_numpy(uniform(N), requires_grad=True)
    left, flag = qgraph.from_numpy(np.array(0, np.int64)), qgraph.from_numpy(np.array(0, np.int32))
    with qgraph.Tape() as tape:
        settle(x, left, flag, 2)
    tape.backward(grads={x: 1.0})
    np.testing.assert_allclose(x.grad.to_numpy(), 0.5**6)  # 2 x 3 passes of x = 0.5 x + 1


def test_two_loops_and_a_task_between_them(arch):
    check_gradients(two_loops, *_xvk(), 5, 0.05, tape=True, rtol=1e-6, atol=1e-8)


def test_a_branch_on_a_flag_the_kernel_writes(loop_arch):
    """The branch taken changes from pass to pass: the recording keeps the flag per pass."""
    args = [*_xvk()[:2], np.array(0, np.int64), np.array(0, np.int32), 7, 0.05]
    check_gradients(switching, *args, tape=True, rtol=1e-6, atol=1e-8)
    x, v, phase, flag = to_qgraph(args[:4], True)
    with pytest.raises(qgraph.QgraphError, match=r"kernel switching.grad: the gradient of its qgraph.repeat loop "
                                                 r"\(line \d+\) needs the arrays the loop overwrites"):
        switching(x, v, phase, flag, 7, 0.05)
        switching.grad(x, v, phase, flag, 7, 0.05)


def test_nested_memory_is_reported_and_bounded(arch):
    x, v, k = to_qgraph(_xvk(), True)
    with qgraph.Tape(checkpoint_every=2) as tape:
        nested(x, v, k, 5, 4, 0.05)
    state = x.nbytes + v.nbytes  # what both loops carry: working arrays, a checkpoint, an entry state
    outer = 3 * state + 2 * (state + x.nbytes)  # 3 checkpoints; per pass: the inner loop's entry, kick's x
    inner = 2 * state + 2 * v.nbytes  # 2 checkpoints, reused by every outer pass; per pass: v
    assert tape.stats.checkpoint_bytes == state + outer + inner
    before = x.to_numpy()
    with qgraph.Tape(checkpoint_every=2, checkpoint_bytes=tape.stats.checkpoint_bytes - 1) as small:
        with pytest.raises(qgraph.QgraphError, match=r"kernel nested: the gradient of its qgraph.repeat loop \(line "
                                                     r"\d+, 5 passes, a checkpoint every 2\) keeps \d+ bytes, over "):
            nested(x, v, k, 5, 4, 0.05)
    np.testing.assert_array_equal(x.to_numpy(), before)  # raised before the call started
    assert small.stats.calls == 0
