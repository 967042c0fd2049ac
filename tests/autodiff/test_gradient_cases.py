"""Gradients that were silently wrong where two features meet (issue 44's held-out cases), each on
both backends: break/continue in adjoints, tapes over replays, flag loops and other tapes, arrays
passed twice, NumPy arrays on a tape, arrays changed after recording, races. Each is either right
against central differences in float64 or raises the documented error; none gives a number that
is wrong."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.gradient_kernels import square_into, sum_of_squares
from helpers.gradients import check_gradients, uniform

import qgraph


@qgraph.kernel
def cube_unless_negative(x, y):
    for i in range(x.shape[0]):
        if x[i] < 0:
            continue
        y[i] = x[i] ** 3


def test_continue_in_a_parallel_loop_skips_the_gradient_too(arch):
    x0 = np.array([-1.0, 0.5, -0.2, 1.5])
    for tape in (False, True):
        found = check_gradients(cube_unless_negative, x0, uniform(4), tape=tape)
        seeds = np.random.default_rng(7).standard_normal((2, 4))
        np.testing.assert_allclose(found[0], seeds[0] + np.where(x0 < 0, 0.0, 3 * x0 ** 2 * seeds[1]), rtol=1e-12)


@qgraph.kernel
def segment_scale(x, edges, w, y):
    for i in range(x.shape[0]):
        k = 0
        for s in range(edges.shape[0] - 1):
            if x[i] < edges[s + 1]:
                break
            k += 1
        y[i] = w[k] * x[i]


@qgraph.kernel
def count_below(x, y):
    for i in range(x.shape[0]):
        c = 0
        for s in range(10):
            if s * 0.1 > x[i]:
                continue
            c += 1
        y[i] = c * x[i] * x[i]


@qgraph.kernel
def count_while(x, y):
    for i in range(x.shape[0]):
        m = 0
        while m < 100:
            m += 1
            if m * 0.5 > x[i]:
                break
        y[i] = m * math.sin(x[i])


@qgraph.kernel
def count_while_true(x, y):
    for i in range(x.shape[0]):
        m = 0
        while True:
            m += 1
            if m * 0.5 > x[i]:
                break
        y[i] = m * x[i]


def test_search_and_count_loops_take_the_forward_decisions(arch):
    x = np.array([0.13, 0.42, 0.77, 0.95])
    edges = np.array([0.0, 0.3, 0.6, 1.0])
    found = check_gradients(segment_scale, x, edges, uniform(3), uniform(4))
    assert np.count_nonzero(found[2]) == 3  # every segment's weight used once: not always the last one
    check_gradients(count_below, x, uniform(4))
    big = np.array([1.2, 3.7, 10.1, 0.3])
    check_gradients(count_while, big, uniform(4))
    check_gradients(count_while_true, big, uniform(4))


@qgraph.kernel
def accumulate_until(x, w, y):
    for i in range(x.shape[0]):
        s = 0.0
        for k in range(w.shape[0]):
            if w[k] > 0.7:
                break
            if w[k] < 0.35:
                continue
            s += w[k] * x[i] * x[i]
        y[i] = s


@qgraph.kernel
def nested_break(x, w, y):
    for i in range(x.shape[0]):
        s = 0.0
        for k in range(3):
            t = 0.0
            for m in range(w.shape[0] - 1, -1, -1):
                if w[m] * (k + 1) > 1.5:
                    break
                t = 0.5 * t + w[m] * x[i]
            s += t * t
        y[i] = s


def test_a_gradient_through_loops_with_break_and_continue(arch):
    w = np.array([0.5, 0.2, 0.6, 0.4, 0.9, 0.5])
    check_gradients(accumulate_until, uniform(4), w, uniform(4))
    check_gradients(nested_break, uniform(4), uniform(5), uniform(4))


@qgraph.kernel
def cosine_in_place(x):
    for i in range(x.shape[0]):
        x[i] = math.cos(x[i])


def test_a_second_backward_adds_the_same_gradient_again(arch):
    x0 = np.array([0.3, 0.7, 1.1])
    x = qgraph.from_numpy(x0, requires_grad=True)
    loss = qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as tape:
        cosine_in_place(x)
        sum_of_squares(x, loss)
    expected = 2 * np.cos(x0) * -np.sin(x0)
    for times in (1, 2, 3):
        tape.backward(loss)
        np.testing.assert_allclose(x.grad.to_numpy(), times * expected, rtol=1e-12)
        np.testing.assert_allclose(tape.gradient(loss).to_numpy(), [times * 1.0])


@qgraph.kernel
def times(x, w, y):
    for i in range(x.shape[0]):
        y[i] = x[i] * w[i]


@qgraph.kernel
def add_five(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 5.0


def test_an_array_changed_after_recording_is_an_error(arch):
    x = qgraph.from_numpy(np.array([0.3, 0.7]), requires_grad=True)
    w = qgraph.from_numpy(np.array([2.0, 3.0]), requires_grad=True)
    y = qgraph.ndarray(qgraph.f64, (2,))
    for change in (lambda: add_five(x), lambda: add_five(w), lambda: w.fill(1.0), lambda: x.from_numpy([1.0, 2.0])):
        with qgraph.Tape() as a:
            times(x, w, y)
        with qgraph.Tape():  # another tape's call, or a call or write no tape records
            change()
        with pytest.raises(qgraph.QgraphError, match=r"needs '[xw]' as that call left it, and it was changed since"):
            a.backward(y)
    with qgraph.Tape() as a:
        times(x, w, y)
    a.backward(y)  # unchanged: fine
    np.testing.assert_allclose(x.grad.to_numpy(), w.to_numpy())


@qgraph.struct
class Pair:
    a: object
    b: object


@qgraph.kernel
def square_field(s: Pair, y):
    for i in range(y.shape[0]):
        y[i] = s.a[i] * s.a[i]


def test_struct_fields_with_gradients_raise_under_a_tape_too(arch):
    a = qgraph.from_numpy(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = qgraph.ndarray(qgraph.f64, (3,))
    with pytest.raises(qgraph.QgraphError, match="the struct argument 's' holds an array with a gradient"):
        with qgraph.Tape():
            square_field(Pair(a, a), y)
    square_field(Pair(a, a), y)  # nothing half built: the call itself works
    np.testing.assert_allclose(y.to_numpy(), [1.0, 4.0, 9.0])


@qgraph.kernel(graph_while="flag")
def halve_with_local_flag(x, flag):
    for i in range(x.shape[0]):
        x[i] = x[i] * 0.5


def test_a_graph_while_flag_the_kernel_never_writes(arch):
    x, flag = qgraph.from_numpy(np.array([1.0, 2.0])), qgraph.from_numpy(np.array([1], np.int32))
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"graph_while='flag', but the kernel never writes `flag`"):
        halve_with_local_flag(x, flag)


def test_backward_misuse_raises_clear_errors(arch):
    x = qgraph.from_numpy(np.array([0.5, 1.5]), requires_grad=True)
    with pytest.raises(qgraph.QgraphError, match="the tape holds no recorded kernel calls"):
        qgraph.Tape().backward(x)
    with qgraph.Tape() as tape:
        cosine_in_place(x)
    with pytest.raises(TypeError, match="Tape.backward: a seed is given for"):
        tape.backward(np.ones(2))
    with pytest.raises(ValueError, match=r"the seed for an array of shape \(2,\) has shape \(3,\)"):
        tape.backward(grads={x: np.ones(3)})
    tape.backward(grads={x: np.ones(2)})  # after the errors, a good call works
    np.testing.assert_allclose(x.grad.to_numpy(), -np.sin([0.5, 1.5]))
    tape.reset()
    with pytest.raises(qgraph.QgraphError, match="the tape holds no recorded kernel calls"):
        tape.backward(x)


def test_an_array_passed_twice(arch):
    x0 = np.array([0.5, 1.5, -2.0, 3.0])
    x = qgraph.from_numpy(x0, requires_grad=True)
    for run in (lambda: square_into.grad(x, x), None):
        square_into(x, x) if run else None
        with pytest.raises(qgraph.QgraphError, match="passes one array as both 'x' and 'y', and the kernel writes"):
            if run:
                run()
            else:
                with qgraph.Tape():
                    square_into(x, x)
    np.testing.assert_allclose(x.to_numpy(), x0 ** 2)  # the refused recording did not run the call
    x.from_numpy(x0)
    x.grad.fill(0.0)
    y = qgraph.ndarray(qgraph.f64, (4,))
    with pytest.raises(qgraph.QgraphError, match="passes one array as both 'x' and 'w'"):
        times.grad(x, x, y)
    with qgraph.Tape() as tape:  # read twice: each use its own gradient, added up
        times(x, x, y)
    tape.backward(grads={y: 1.0})
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x0, rtol=1e-12)


def test_numpy_arrays_on_a_tape(cpu):
    x0, w0 = np.array([0.5, 1.5]), np.array([2.0, 3.0])
    x = qgraph.from_numpy(x0, requires_grad=True)
    w, y = w0.copy(), qgraph.ndarray(qgraph.f64, (2,))
    with qgraph.Tape() as tape:
        times(x, w, y)
        add_five(w)  # overwrites the NumPy weight the first adjoint reads: the tape copies it first
    tape.backward(grads={y: 1.0})
    np.testing.assert_allclose(x.grad.to_numpy(), w0)
    assert tape.stats.snapshots == 1
    x.grad.fill(0.0)
    mid, loss = np.zeros(2), qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as tape:  # a NumPy intermediate between two calls: the gradient goes through it
        times(x, qgraph.from_numpy(w0), mid)
        sum_of_squares(mid, loss)
    mid[:] = 0.0  # a host write the tape cannot see: what the adjoint reads was copied as the tape closed
    tape.backward(loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2 * x0 * w0 * w0)
    np.testing.assert_allclose(tape.gradient(mid).to_numpy(), 0.0)  # the first call overwrote what mid held


@qgraph.kernel
def shift_product(x, y):
    for i in range(x.shape[0] - 1):
        y[i + 1] = x[i] * y[i]


def test_a_parallel_task_reading_what_other_iterations_write(arch):
    x = qgraph.from_numpy(np.array([0.5, 1.5, 2.0]), requires_grad=True)
    y = qgraph.from_numpy(np.ones(3), requires_grad=True)
    shift_product(x, y)
    with pytest.raises(qgraph.QgraphSyntaxError, match="reads `y` at one index and writes it at another"):
        shift_product.grad(x, y)


@qgraph.kernel
def decay_reported(x, n: int):
    for _ in qgraph.repeat(n):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5 + 0.1 * x[i] * x[i]
        qgraph.report("first", x[0])


def test_a_repeat_loop_that_reports_differentiates(loop_arch):
    check_gradients(decay_reported, uniform(3), 4, tape=True)


@qgraph.kernel
def sine_step(x, p):
    for i in range(x.shape[0]):
        x[i] = x[i] + 0.1 * math.sin(x[i] * p[0])


@qgraph.kernel
def total(x, loss):
    for i in range(x.shape[0]):
        loss[0] += x[i]


@qgraph.graph
def sine_train(x, p, loss):
    with qgraph.Tape() as tape:
        for _ in range(3):
            sine_step(x, p)
        total(x, loss)
    tape.backward(loss)


def test_a_step_with_a_tape_inside_replayed(arch):
    x0, p0 = np.array([0.3, 0.8, 1.3]), 1.7

    def f(p: float) -> float:
        x = x0.copy()
        for _ in range(3):
            x = x + 0.1 * np.sin(x * p)
        return x.sum()

    expected = (f(p0 + 1e-6) - f(p0 - 1e-6)) / 2e-6
    x, p = qgraph.from_numpy(x0), qgraph.from_numpy(np.array([p0]), requires_grad=True)
    loss = qgraph.ndarray(qgraph.f64, (1,))
    for _ in range(3):  # the second and third calls replay the captured graph on CUDA
        x.from_numpy(x0)
        loss.fill(0.0)
        p.grad.fill(0.0)
        sine_train(x, p, loss)
        np.testing.assert_allclose(p.grad.to_numpy(), [expected], rtol=1e-7)


@qgraph.kernel
def kick(x, v, dt: float):
    for i in range(x.shape[0]):
        v[i] = v[i] - dt * math.sin(x[i])


@qgraph.kernel
def drift(x, v, count, flag, dt: float, n: int):
    for i in range(x.shape[0]):
        x[i] = x[i] + dt * v[i]
    count[0] += 1
    flag[0] = 1 if count[0] < n else 0


@qgraph.graph(graph_while="flag")
def leapfrog(x, v, count, flag, dt: float, n: int):
    kick(x, v, dt)
    drift(x, v, count, flag, dt, n)


def test_a_graph_while_step_on_a_tape(loop_arch):
    x0, v0, dt, n = np.array([0.3, 0.8, 1.3]), np.array([0.1, -0.2, 0.4]), 0.1, 5

    def final_x(x, v):
        for _ in range(n):
            v = v - dt * np.sin(x)
            x = x + dt * v
        return x.sum()

    x, v = qgraph.from_numpy(x0, requires_grad=True), qgraph.from_numpy(v0, requires_grad=True)
    count, flag = qgraph.ndarray(qgraph.i32, (1,)), qgraph.from_numpy(np.array([1], np.int32))
    loss = qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as tape:
        leapfrog(x, v, count, flag, dt, n)
        total(x, loss)
    tape.backward(loss)
    assert tape.stats.calls == 2 * n + 1
    eye = np.eye(3) * 1e-6
    gx = [(final_x(x0 + e, v0) - final_x(x0 - e, v0)) / 2e-6 for e in eye]
    gv = [(final_x(x0, v0 + e) - final_x(x0, v0 - e)) / 2e-6 for e in eye]
    np.testing.assert_allclose(x.grad.to_numpy(), gx, rtol=1e-7)
    np.testing.assert_allclose(v.grad.to_numpy(), gv, rtol=1e-7)


@qgraph.struct
class Outputs:
    y: object


@qgraph.kernel
def square_into_struct(x, out: Outputs):
    for i in range(x.shape[0]):
        out.y[i] = x[i] * x[i]


@qgraph.kernel
def sum_struct(out: Outputs, loss):
    for i in range(out.y.shape[0]):
        loss[0] += out.y[i]


def test_no_gradient_passes_silently_through_an_array_inside_a_struct(arch):
    x = qgraph.from_numpy(np.array([1.0, 2.0]), requires_grad=True)
    out, loss = Outputs(qgraph.ndarray(qgraph.f64, (2,))), qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as tape:
        square_into_struct(x, out)  # an output inside a struct: fine while nothing needs its gradient
        with pytest.raises(qgraph.QgraphError, match=r"it reads `out.y`, an array inside a struct that an earlier"):
            sum_struct(out, loss)
        with pytest.raises(qgraph.QgraphError, match=r"its argument 'x' was written inside a struct \(`out.y`\)"):
            sum_of_squares(out.y, loss)
    with pytest.raises(qgraph.QgraphError, match="a seed is given for `out.y`, an array the recorded calls wrote"):
        tape.backward(out.y)
    with qgraph.Tape() as tape:
        times(x, x, out.y)
        with pytest.raises(qgraph.QgraphError, match=r"it writes `out.y`, an array inside a struct that the recorded"):
            square_into_struct(x, out)


@qgraph.kernel
def decay_counted(x, total, n: int):
    for _ in qgraph.repeat(n):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5 + 0.1 * x[i] * x[i]
        total[0] += x[0]


def test_iterations_of_a_call_recorded_on_a_tape(loop_arch):
    x, total = qgraph.from_numpy(np.array([1.0, 2.0]), requires_grad=True), qgraph.ndarray(qgraph.f64, (1,))
    decay_counted(x, total, 3)
    assert decay_counted.stats.iterations == (3,)
    with qgraph.Tape():  # the tape runs its recording of the call: the kernel's stats report it
        decay_counted(x, total, 4)
    assert decay_counted.stats.iterations == (4,)
    decay_counted(x, total, 2)
    assert decay_counted.stats.iterations == (2,)


@qgraph.kernel
def through_an_unmarked_array(c, y, z):
    for i in range(y.shape[0]):
        y[i] = math.hypot(c[0], 1.2 + i)
    for i in range(y.shape[0]):
        z[i] = y[i] * y[i]


def test_kernel_grad_flows_through_an_array_a_later_task_reads(arch):
    c = qgraph.from_numpy(np.array([0.7]), requires_grad=True)
    y, z = qgraph.ndarray(qgraph.f64, (3,)), qgraph.ndarray(qgraph.f64, (3,), requires_grad=True)
    through_an_unmarked_array(c, y, z)  # y has no .grad: the gradient still flows from z through it to c
    z.grad.fill(1.0)
    through_an_unmarked_array.grad(c, y, z)
    np.testing.assert_allclose(c.grad.to_numpy(), [2 * 0.7 * 3], rtol=1e-12)


def test_a_seed_for_an_array_no_call_passed_is_its_gradient(arch):
    x = qgraph.from_numpy(np.array([0.5, 1.5]), requires_grad=True)
    w = qgraph.from_numpy(np.array([1.0, 2.0]), requires_grad=True)
    with qgraph.Tape() as tape:
        cosine_in_place(x)
    tape.backward(grads={x: 1.0, w: 3.0})
    np.testing.assert_allclose(w.grad.to_numpy(), [3.0, 3.0])
    np.testing.assert_allclose(x.grad.to_numpy(), -np.sin([0.5, 1.5]))


@qgraph.kernel(cpu_serial_below=0)
def branchy_inner_sum(y, w, c, b):
    for i, j in qgraph.ndrange(b.shape[0], b.shape[1]):
        t = math.exp(-y[i] * y[i]) - math.hypot(y[i], 1.2 + math.sin(c[0]))
        s = 0.0
        for k in range(w.shape[0]):
            if w[k] > w[i % w.shape[0]]:
                s += w[k] * math.atan2(t, 1.7)
            else:
                s -= 0.396 * c[0]
        b[i, j] += -0.247 * s


def test_a_parallel_adjoint_with_an_inner_loop_feeding_a_shared_gradient(arch):
    """The fuzzer's seed 611: on the CPU's parallel form, numba's reduction analysis failed on the adjoint."""
    check_gradients(branchy_inner_sum, uniform(4), uniform(5), uniform(1), uniform(4, 3))
