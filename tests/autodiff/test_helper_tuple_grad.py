"""Gradients through @qgraph.func helpers that return tuples of vectors and numbers (issue 49):
`kernel.grad` of one call and a tape over a nonlinear repeat loop, on both backends, against
central differences in float64."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph

N = 9
H = 1e-6


@qgraph.func
def drag_step(p, v, c, dt):
    """Quadratic drag: nonlinear in v, so the adjoint needs the values it saw."""
    v = v - c * v * qgraph.norm(v) * dt
    return p + v * dt, v, qgraph.dot(v, v)


@qgraph.func
def two_steps(p, v, c, dt):
    p, v, e1 = drag_step(p, v, c, dt)
    q, w, e2 = drag_step(p, v, c, dt)
    return q, w, e1 + e2


@qgraph.kernel
def fly(pos, vel, c, out_p, out_v, energy, dt: float):
    for i in range(pos.shape[0]):
        out_p[i], out_v[i], energy[i] = two_steps(pos[i], vel[i], c[i], dt)


@qgraph.kernel
def fly_steps(pos, vel, c, steps: int, dt: float):
    for _ in qgraph.repeat(steps):
        for i in range(pos.shape[0]):
            p, v, e = drag_step(pos[i], vel[i], c[i], dt)
            pos[i] = p
            vel[i] = v


@qgraph.kernel
def weighted(pos, vel, wp, wv, loss):
    for i in range(pos.shape[0]):
        loss[()] += qgraph.dot(pos[i], wp[i]) + qgraph.dot(vel[i], wv[i])


def _vectors(values, grad=True):
    return qgraph.ndarray(qgraph.vec3d, (values.shape[0],), requires_grad=grad).from_numpy(values)


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, 3)), rng.standard_normal((N, 3)), rng.random(N) + 0.5


def _fly(p0, v0, c0, wp, wv, we):
    out = [_vectors(np.zeros((N, 3))), _vectors(np.zeros((N, 3))), qgraph.from_numpy(np.zeros(N), requires_grad=True)]
    fly(_vectors(p0), _vectors(v0), qgraph.from_numpy(c0), *out, 0.1)
    return (out[0].to_numpy() * wp).sum() + (out[1].to_numpy() * wv).sum() + (out[2].to_numpy() * we).sum()


def _central(loss, values, k):
    flat = values.reshape(-1)
    out = []
    for j in k:
        up, down = flat.copy(), flat.copy()
        up[j] += H
        down[j] -= H
        out.append((loss(up.reshape(values.shape)) - loss(down.reshape(values.shape))) / (2 * H))
    return np.array(out)


def test_kernel_grad_through_nested_tuple_helpers(arch):
    p0, v0, c0 = _inputs(1)
    rng = np.random.default_rng(2)
    wp, wv, we = rng.standard_normal((N, 3)), rng.standard_normal((N, 3)), rng.standard_normal(N)
    pos, vel, c = _vectors(p0), _vectors(v0), qgraph.from_numpy(c0, requires_grad=True)
    out_p, out_v = _vectors(np.zeros((N, 3))), _vectors(np.zeros((N, 3)))
    energy = qgraph.from_numpy(np.zeros(N), requires_grad=True)
    fly(pos, vel, c, out_p, out_v, energy, 0.1)
    out_p.grad.from_numpy(wp)
    out_v.grad.from_numpy(wv)
    energy.grad.from_numpy(we)
    fly.grad(pos, vel, c, out_p, out_v, energy, 0.1)
    k = [0, 4, 13, 26]
    np.testing.assert_allclose(
        pos.grad.to_numpy().reshape(-1)[k], _central(lambda p: _fly(p, v0, c0, wp, wv, we), p0, k), rtol=1e-6, atol=1e-8
    )
    np.testing.assert_allclose(
        vel.grad.to_numpy().reshape(-1)[k], _central(lambda v: _fly(p0, v, c0, wp, wv, we), v0, k), rtol=1e-6, atol=1e-8
    )
    np.testing.assert_allclose(
        c.grad.to_numpy()[[0, 5, 8]],
        _central(lambda cc: _fly(p0, v0, cc, wp, wv, we), c0, [0, 5, 8]),
        rtol=1e-6,
        atol=1e-8,
    )


def _run_steps(p0, v0, c0, wp, wv, backward):
    pos, vel, c = _vectors(p0), _vectors(v0), qgraph.from_numpy(c0, requires_grad=True)
    loss = qgraph.from_numpy(np.zeros(()), requires_grad=True)
    with qgraph.Tape() as tape:
        fly_steps(pos, vel, c, 6, 0.05)
        weighted(pos, vel, _vectors(wp, False), _vectors(wv, False), loss)
    if backward:
        tape.backward(loss)
        return pos.grad.to_numpy(), vel.grad.to_numpy(), c.grad.to_numpy()
    return float(loss.to_numpy())


@pytest.mark.parametrize("which", ["pos", "vel", "c"])
def test_a_tape_over_a_repeat_loop_calling_a_tuple_helper(arch, which):
    p0, v0, c0 = _inputs(3)
    rng = np.random.default_rng(4)
    wp, wv = rng.standard_normal((N, 3)), rng.standard_normal((N, 3))
    grads = dict(zip(["pos", "vel", "c"], _run_steps(p0, v0, c0, wp, wv, True)))
    values = {"pos": p0, "vel": v0, "c": c0}

    def loss(x):
        args = {**values, which: x}
        return _run_steps(args["pos"], args["vel"], args["c"], wp, wv, False)

    k = [0, 7, 20] if which != "c" else [1, 6]
    np.testing.assert_allclose(grads[which].reshape(-1)[k], _central(loss, values[which], k), rtol=1e-6, atol=1e-8)
