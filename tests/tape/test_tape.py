"""qgraph.Tape (tape.py): a simulation written in place has the gradient of the same simulation
written with one array per step (and of central differences); the tape copies an array only
when an adjoint needs values a later call overwrites; intermediate arrays without .grad get
temporary gradients; backward(grads=...), zero(), reset(), accumulation; a tape inside a
@qgraph.graph step (captured on CUDA) gives the values of one outside it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.gradient_kernels import square_into, sum_of_squares

import qgraph

V3 = qgraph.vector(3, qgraph.f64)
RNG = np.random.default_rng(31)
DT, DRAG, STEPS = 0.02, 0.3, 25


@qgraph.kernel
def ballistic(x: V3[:], v: V3[:], g: V3, dt: float, drag: float):
    for i in range(x.shape[0]):
        v[i] += dt * (g - drag * v[i])
        x[i] += dt * v[i]


@qgraph.kernel
def ballistic_to(x0: V3[:], v0: V3[:], x1: V3[:], v1: V3[:], g: V3, dt: float, drag: float):
    for i in range(x0.shape[0]):
        v1[i] = v0[i] + dt * (g - drag * v0[i])
        x1[i] = x0[i] + dt * v1[i]


@qgraph.kernel
def mse(x: V3[:], target: V3[:], loss):
    for i in range(x.shape[0]):
        d = x[i] - target[i]
        loss[0] += qgraph.dot(d, d) / x.shape[0]


@qgraph.kernel
def nonlinear(x, v, dt: float):
    for i in range(x.shape[0]):
        v[i] += dt * math.sin(x[i])
        x[i] += dt * v[i] * v[i]


@qgraph.kernel
def sin_into(b, c):
    for i in range(b.shape[0]):
        c[i] = math.sin(b[i])


GRAVITY = V3(0.0, 0.0, -9.8)


def _state(n: int = 4):
    return RNG.standard_normal((n, 3)), RNG.standard_normal((n, 3)), RNG.standard_normal((n, 3))


def in_place(x0, v0, target, steps: int = STEPS):
    """(x, v, loss, tape) of the simulation written in place, recorded; x0, v0 need gradients."""
    x = qgraph.from_numpy(x0, requires_grad=True)
    v = qgraph.from_numpy(v0, requires_grad=True)
    loss = qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as tape:
        for _ in range(steps):
            ballistic(x, v, GRAVITY, DT, DRAG)
        mse(x, qgraph.from_numpy(target), loss)
    return x, v, loss, tape


def central_differences(f, a: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros(a.shape)
    for idx in np.ndindex(a.shape):
        plus, minus = a.copy(), a.copy()
        plus[idx] += eps
        minus[idx] -= eps
        g[idx] = (f(plus) - f(minus)) / (2 * eps)
    return g


def test_in_place_simulation_equals_one_array_per_step_and_differences(arch):
    x0, v0, target = _state()
    x, v, loss, tape = in_place(x0, v0, target)
    tape.backward(loss)

    xs = [qgraph.from_numpy(x0, requires_grad=True)] + [qgraph.ndarray(V3, (4,)) for _ in range(STEPS)]
    vs = [qgraph.from_numpy(v0, requires_grad=True)] + [qgraph.ndarray(V3, (4,)) for _ in range(STEPS)]
    loss_steps = qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as per_step:
        for t in range(STEPS):
            ballistic_to(xs[t], vs[t], xs[t + 1], vs[t + 1], GRAVITY, DT, DRAG)
        mse(xs[-1], qgraph.from_numpy(target), loss_steps)
    per_step.backward(loss_steps)

    np.testing.assert_allclose(loss.to_numpy(), loss_steps.to_numpy(), rtol=1e-13)
    np.testing.assert_allclose(v.grad.to_numpy(), vs[0].grad.to_numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(x.grad.to_numpy(), xs[0].grad.to_numpy(), rtol=1e-12, atol=1e-14)
    assert per_step.stats.temporary_grads == 2 * STEPS + 1  # the states after step 0 and the loss

    def loss_of(v_start):
        return in_place(x0, v_start, target)[2].to_numpy()[0]

    np.testing.assert_allclose(v.grad.to_numpy(), central_differences(loss_of, v0), rtol=1e-6, atol=1e-9)


def test_a_linear_update_is_never_copied(arch):
    x0, v0, target = _state()
    *_, loss, tape = in_place(x0, v0, target)
    tape.backward(loss)
    assert tape.stats.calls == STEPS + 1
    assert tape.stats.snapshots == 0 and tape.stats.snapshot_bytes == 0
    # the backward pass's gradients of what the calls wrote: x and v (added to their .grad after), the loss
    assert tape.stats.temporary_grads == 3 and tape.stats.temporary_grad_bytes == 8 + 2 * x0.nbytes
    assert tape.stats.extra_bytes == 8 + 2 * x0.nbytes


def test_a_nonlinear_update_is_copied_and_correct(arch):
    x0, v0 = RNG.standard_normal(5), RNG.standard_normal(5)

    def run(x_start, v_start, steps=6):
        x = qgraph.from_numpy(x_start, requires_grad=True)
        v = qgraph.from_numpy(v_start, requires_grad=True)
        loss = qgraph.ndarray(qgraph.f64, (1,))
        with qgraph.Tape() as tape:
            for _ in range(steps):
                nonlinear(x, v, 0.1)
            sum_of_squares(x, loss)
        return x, v, loss, tape

    x, v, loss, tape = run(x0, v0)
    tape.backward(loss)
    assert tape.stats.snapshots > 0 and tape.stats.snapshot_bytes >= 6 * x0.nbytes
    np.testing.assert_allclose(x.grad.to_numpy(), central_differences(lambda a: run(a, v0)[2].to_numpy()[0], x0),
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(v.grad.to_numpy(), central_differences(lambda a: run(x0, a)[2].to_numpy()[0], v0),
                               rtol=1e-6, atol=1e-9)


def _chain(n: int = 6):
    a0 = RNG.uniform(0.2, 0.9, n)
    a = qgraph.from_numpy(a0, requires_grad=True)
    b, c = qgraph.ndarray(qgraph.f64, (n,)), qgraph.ndarray(qgraph.f64, (n,))
    loss = qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as tape:
        square_into(a, b)
        sin_into(b, c)
        sum_of_squares(c, loss)
    return a0, a, b, c, loss, tape


def test_a_chain_through_arrays_without_gradients(arch):
    a0, a, b, c, loss, tape = _chain()
    tape.backward(loss)
    expected = 2 * np.sin(a0 ** 2) * np.cos(a0 ** 2) * 2 * a0
    np.testing.assert_allclose(a.grad.to_numpy(), expected, rtol=1e-12)
    assert b.grad is None and c.grad is None and loss.grad is None  # the tape's own, not the arrays'
    assert tape.stats.temporary_grads == 3 and tape.stats.temporary_grad_bytes == 8 * (6 + 6 + 1)
    assert tape.gradient(b) is not None and tape.gradient(a) is a.grad


def test_backward_with_seeds(arch):
    a0, a, b, c, loss, tape = _chain()
    seed = RNG.standard_normal(6)
    tape.backward(grads={c: seed})  # what `sum_of_squares` did is seeded past: c's gradient is the seed
    np.testing.assert_allclose(a.grad.to_numpy(), seed * np.cos(a0 ** 2) * 2 * a0, rtol=1e-12)
    a.grad.fill(0.0)
    tape.backward(grads={b: 2.0})  # a number fills the gradient
    np.testing.assert_allclose(a.grad.to_numpy(), 2.0 * 2 * a0, rtol=1e-12)
    with pytest.raises(qgraph.QgraphError, match=r"give the loss array \(backward\(loss\)\) or seeds"):
        tape.backward()


def test_a_second_backward_accumulates_and_zero_clears(arch):
    a0, a, b, c, loss, tape = _chain()
    tape.backward(loss)
    first = a.grad.to_numpy()
    tape.backward(loss)
    np.testing.assert_allclose(a.grad.to_numpy(), 2 * first, rtol=1e-12)
    tape.zero()
    assert not a.grad.to_numpy().any() and not tape.gradient(c).to_numpy().any()
    tape.backward(loss)
    np.testing.assert_allclose(a.grad.to_numpy(), first, rtol=1e-12)


def test_reset_forgets_the_recording(arch):
    a0, a, b, c, loss, tape = _chain()
    tape.reset()
    assert tape.stats.calls == 0 and tape.gradient(b) is None
    with pytest.raises(qgraph.QgraphError, match="the tape holds no recorded kernel calls"):
        tape.backward(grads={a: 0.0})  # nothing recorded: an error, never a silent no-op
    assert not a.grad.to_numpy().any()
    with tape:  # the same tape records again
        square_into(a, b)
        sum_of_squares(b, loss)
    tape.backward(loss)
    assert tape.stats.calls == 2
    np.testing.assert_allclose(a.grad.to_numpy(), 2 * a0 ** 2 * 2 * a0, rtol=1e-12)


def test_a_tape_is_entered_once_at_a_time(arch):
    tape = qgraph.Tape()
    with tape:
        with pytest.raises(qgraph.QgraphError, match="this tape is recording already"):
            with tape:
                pass
    with tape:  # after leaving it, again
        pass


@qgraph.graph
def forward_backward(x, v, target, loss):
    with qgraph.Tape() as tape:
        for _ in range(STEPS):
            ballistic(x, v, GRAVITY, DT, DRAG)
        mse(x, target, loss)
    tape.backward(loss)


def test_a_tape_inside_a_graph_step(arch):
    x0, v0, target = _state()
    _, v, loss, tape = in_place(x0, v0, target)
    tape.backward(loss)
    for _ in range(3):  # built once, then replayed (on CUDA) with new arrays
        xg = qgraph.from_numpy(x0, requires_grad=True)
        vg = qgraph.from_numpy(v0, requires_grad=True)
        lg = qgraph.ndarray(qgraph.f64, (1,))
        forward_backward(xg, vg, qgraph.from_numpy(target), lg)
        np.testing.assert_allclose(lg.to_numpy(), loss.to_numpy(), rtol=1e-13)
        np.testing.assert_allclose(vg.grad.to_numpy(), v.grad.to_numpy(), rtol=1e-12, atol=1e-14)
    assert forward_backward.stats.kernel_calls > STEPS + 1
    if arch == "cuda":
        assert forward_backward.stats.replays >= 3


@qgraph.kernel
def triple_in_place(a):
    for i in range(a.shape[0]):
        a[i] = 3.0 * a[i]


@qgraph.kernel
def model_two_tasks(x, y, loss):
    for i in range(x.shape[0]):
        y[i] = math.sin(x[i]) * x[i]
    for i in range(x.shape[0]):
        loss[0] += y[i] * y[i]


def test_a_later_call_overwriting_what_an_earlier_adjoint_reads(arch):
    """square_into's adjoint reads a (its x); triple_in_place then overwrites a (its own adjoint reads
    nothing): the tape copies a before that call. The loss reads both."""
    a0 = RNG.uniform(0.2, 0.9, 5)

    def run(start):
        a = qgraph.from_numpy(start, requires_grad=True)
        b, loss = qgraph.ndarray(qgraph.f64, (5,)), qgraph.ndarray(qgraph.f64, (1,))
        with qgraph.Tape() as tape:
            square_into(a, b)
            triple_in_place(a)
            sum_of_squares(b, loss)
            sum_of_squares(a, loss)
        return a, loss, tape

    a, loss, tape = run(a0)
    tape.backward(loss)
    assert tape.stats.snapshots == 1 and tape.stats.snapshot_bytes == a0.nbytes
    np.testing.assert_allclose(a.grad.to_numpy(), central_differences(lambda s: run(s)[1].to_numpy()[0], a0),
                               rtol=1e-6, atol=1e-9)


def test_an_intermediate_array_overwritten_by_the_next_call_of_the_same_kernel(arch):
    """The second task's adjoint reads y as the first task left it; the next call overwrites y."""
    x0 = RNG.uniform(0.2, 0.9, 5)

    def run(start):
        x = qgraph.from_numpy(start, requires_grad=True)
        y, loss = qgraph.ndarray(qgraph.f64, (5,)), qgraph.ndarray(qgraph.f64, (1,))
        with qgraph.Tape() as tape:
            model_two_tasks(x, y, loss)
            triple_in_place(x)
            model_two_tasks(x, y, loss)
        return x, loss, tape

    x, loss, tape = run(x0)
    tape.backward(loss)
    assert tape.stats.snapshots >= 1
    np.testing.assert_allclose(x.grad.to_numpy(), central_differences(lambda s: run(s)[1].to_numpy()[0], x0),
                               rtol=1e-6, atol=1e-9)


@qgraph.kernel(cuda_graph=True)
def ballistic_graphed(x: V3[:], v: V3[:], g: V3, dt: float, drag: float):
    for i in range(x.shape[0]):
        v[i] += dt * (g - drag * v[i])
        x[i] += dt * v[i]


def test_a_cuda_graph_kernel_on_a_tape(arch):
    """Its adjoint is a cuda_graph=True kernel too (a graph replay per call on CUDA)."""
    x0, v0, target = _state()
    _, v, loss, tape = in_place(x0, v0, target)
    tape.backward(loss)
    x = qgraph.from_numpy(x0)
    vg = qgraph.from_numpy(v0, requires_grad=True)
    lg = qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as graphed:
        for _ in range(STEPS):
            ballistic_graphed(x, vg, GRAVITY, DT, DRAG)
        mse(x, qgraph.from_numpy(target), lg)
    graphed.backward(lg)
    np.testing.assert_allclose(vg.grad.to_numpy(), v.grad.to_numpy(), rtol=1e-12, atol=1e-14)
    if arch == "cuda":
        from qgraph.autodiff.adjoint_calls import adjoint_kernel

        assert adjoint_kernel(ballistic_graphed, ("x", "v")).stats.used_graph


def _simulation(x, v, target, loss):
    for _ in range(STEPS):
        ballistic(x, v, GRAVITY, DT, DRAG)
    mse(x, target, loss)


simulation_step = qgraph.graph(_simulation)


def test_a_graph_step_called_under_a_tape_gets_a_captured_backward(arch):
    """A @qgraph.graph call on a tape: its calls are recorded (the same-arguments replay does
    not hide them), and their adjoints run as one step of their own, built once and replayed."""
    from qgraph.tape.tape import _backward_step

    x0, v0, target = _state()
    _, v, loss, tape = in_place(x0, v0, target)
    tape.backward(loss)
    t = qgraph.from_numpy(target)
    for _ in range(3):
        xg = qgraph.from_numpy(x0, requires_grad=True)
        vg = qgraph.from_numpy(v0, requires_grad=True)
        lg = qgraph.ndarray(qgraph.f64, (1,))
        with qgraph.Tape() as steps_tape:
            simulation_step(xg, vg, t, lg)
        assert steps_tape.stats.calls == STEPS + 1
        steps_tape.backward(lg)
        np.testing.assert_allclose(vg.grad.to_numpy(), v.grad.to_numpy(), rtol=1e-12, atol=1e-14)
    backward = _backward_step(_simulation)
    assert backward.stats.kernel_calls == STEPS + 1
    if arch == "cuda":
        assert backward.stats.builds == 1 and backward.stats.replays == 3
