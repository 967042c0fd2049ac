"""What the adjoint cannot differentiate says so, naming the kernel's file and line and the
fix (each message has a row in docs/troubleshooting.md), and leaves nothing half built: the
next good call works. Gradients that an error could hide are checked to be right."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from helpers.gradients import check_gradients, uniform

import qgraph

HERE = __file__


def _arrays(*shapes):
    return [qgraph.from_numpy(np.random.default_rng(3).uniform(0.2, 0.8, s), requires_grad=True) for s in shapes]


def _raises(kernel, args, message: str, line_of: str):
    """kernel.grad(*args) after a forward call raises QgraphSyntaxError naming this file, the
    line holding `line_of` and `message`; a second try raises the same (nothing half built)."""
    kernel(*args)
    for _ in range(2):
        with pytest.raises(qgraph.QgraphSyntaxError) as raised:
            kernel.grad(*args)
        text = str(raised.value)
        assert f"kernel {kernel.__name__}: cannot differentiate: " in text and re.search(message, text), text
        with open(HERE) as f:
            line = next(k for k, s in enumerate(f, 1) if line_of in s)
        assert f"{HERE}:{line}" in text, text
    kernel(*args)  # the forward pass still runs


@qgraph.kernel
def through_while(x, y):
    for i in range(x.shape[0]):
        s = x[i]
        k = 0
        while k < 3:  # while-loop line
            s = s * s
            k += 1
        y[i] = s


@qgraph.kernel
def through_atomic_max(x, out):
    for i in range(x.shape[0]):
        qgraph.atomic_max(out, 0, x[i] * 2.0)  # atomic_max line


@qgraph.kernel
def through_atomic_min(x, out):
    for i in range(x.shape[0]):
        qgraph.atomic_min(out, 0, x[i] * 2.0)  # atomic_min line


@qgraph.kernel
def with_random(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] * qgraph.random()  # random line


@qgraph.kernel
def strided(x, y, step: int):
    for i in range(x.shape[0]):
        s = 0.0
        for k in range(0, x.shape[1], step):  # strided line
            s += x[i, k] * x[i, k]
        y[i] = s


@qgraph.kernel
def product(x, y):
    for i in range(x.shape[0]):
        p = 1.0
        for k in range(x.shape[1]):  # product line
            p *= x[i, k]
        y[i] = p


@qgraph.kernel
def read_after_write(x, y, z):
    for i in range(x.shape[0]):
        y[i] = x[i] * 2.0
        z[i] = y[(i + 1) % y.shape[0]] * x[i]  # read-after-write line


def test_a_gradient_through_a_while_loop(arch):
    _raises(through_while, _arrays(4, 4), r"a gradient through a while loop in a task "
            r"\(write it as a for loop over range\)", "# while-loop line")


@pytest.mark.parametrize("kernel, line", [(through_atomic_max, "# atomic_max line"),
                                          (through_atomic_min, "# atomic_min line")])
def test_atomic_min_max(arch, kernel, line):
    name = "max" if "max" in line else "min"
    _raises(kernel, _arrays(4, 1), rf"a gradient through qgraph.atomic_{name} \(only atomic_add and atomic_sub",
            line)


def test_random_draws(arch):
    with_random(*_arrays(4, 4))
    with pytest.raises(qgraph.QgraphSyntaxError, match="kernel with_random: cannot differentiate a kernel that "
                                                       "draws random numbers; draw them in a kernel of their own"):
        with_random.grad(*_arrays(4, 4))


def test_a_loop_with_a_non_constant_step(arch):
    x, y = _arrays((3, 6), 3)
    _raises(strided, [x, y, 2], "a gradient through a loop whose step is not a constant", "# strided line")


def test_a_product_over_a_loop_needs_its_carried_value(arch):
    _raises(product, _arrays((3, 4), 3), r"the gradient needs `p` from every pass of this loop \(it changes from "
            r"pass to pass\); compute it in a separate loop or store it in an array", "# product line")


def test_a_value_read_after_the_task_wrote_the_array(arch):
    _raises(read_after_write, _arrays(4, 4, 4), r"the gradient needs `y\[\(i \+ 1\) % y.shape\[0\]\]`, read "
            r"after this task wrote `y` \(it cannot be read back; split the task or keep the value in a local\)",
            "# read-after-write line")


def test_flag_loops_need_a_tape(arch):
    @qgraph.kernel(graph_while="flag")
    def solve(x, flag):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5
        flag[()] = 0

    @qgraph.kernel
    def looped(x, flag):
        while qgraph.loop(flag):
            for i in range(x.shape[0]):
                x[i] = x[i] * 0.5
            flag[()] = 0

    x = _arrays(4)[0]
    for kernel, title in ((solve, "graph_while loop"), (looped, "qgraph.loop loop")):
        flag = qgraph.from_numpy(np.array(1, np.int32))
        kernel(x, flag)
        with pytest.raises(qgraph.QgraphError, match=rf"kernel {kernel.__name__}.grad: the gradient of its {title} "
                                                     r"\(line \d+\) needs the number of passes it ran; record the "
                                                     "call under qgraph.Tape"):
            kernel.grad(x, flag)


def test_branches_on_written_flags_need_the_tape(arch):
    @qgraph.kernel
    def branched(x, flag):
        if qgraph.cond(flag):  # cond line
            for i in range(x.shape[0]):
                x[i] = x[i] * x[i]
        flag[()] = 0

    x = qgraph.from_numpy(np.full(4, 1.5), requires_grad=True)
    flag = qgraph.from_numpy(np.array(1, np.int32))
    branched(x, flag)
    with open(HERE) as f:
        number = next(k for k, s in enumerate(f, 1) if "# cond line" in s)
    with pytest.raises(qgraph.QgraphError, match=rf"kernel branched.grad: the gradient of its qgraph.cond branch "
                                                 rf"\(line {number}\) needs the branch taken; record the call under "
                                                 "qgraph.Tape"):
        branched.grad(x, flag)
    x.from_numpy(np.full(4, 1.5))
    flag.from_numpy(np.array(1, np.int32))
    with qgraph.Tape() as tape:  # the recording keeps the flag as the branch read it (1), not as left (0)
        branched(x, flag)
    tape.backward(grads={x: 1.0})
    np.testing.assert_allclose(x.grad.to_numpy(), 3.0)


def test_loops_that_keep_states_nested_or_beside_tasks_writing_their_arrays(arch):
    @qgraph.kernel
    def nested(x, steps: int):
        for _ in qgraph.repeat(steps):
            for _ in qgraph.repeat(steps):
                for i in range(x.shape[0]):
                    x[i] = math.sin(x[i])

    @qgraph.kernel
    def clobbered(x, steps: int):
        for _ in qgraph.repeat(steps):
            for i in range(x.shape[0]):
                x[i] = math.sin(x[i])
        for i in range(x.shape[0]):
            x[i] += x[i] * x[i]  # after the loop, writing what it carries

    check_gradients(nested, uniform(4), 2, tape=True, rtol=1e-6, atol=1e-8)
    check_gradients(clobbered, uniform(4), 3, tape=True, rtol=1e-6, atol=1e-8)


def test_no_argument_with_a_gradient(arch):
    @qgraph.kernel
    def double(x, y):
        for i in range(x.shape[0]):
            y[i] = 2.0 * x[i]

    x, y = qgraph.from_numpy(np.ones(3)), qgraph.ndarray(qgraph.f64, (3,))
    double(x, y)
    with pytest.raises(qgraph.QgraphError, match=r"kernel double.grad: no argument has a gradient; make the arrays "
                                                 r"to differentiate with qgraph.ndarray\(..., requires_grad=True\)"):
        double.grad(x, y)
    x.requires_grad = y.requires_grad = True  # the same call, now with gradients
    y.grad.fill(1.0)
    double.grad(x, y)
    np.testing.assert_array_equal(x.grad.to_numpy(), 2.0)


def test_a_good_call_after_each_error_works(arch):
    for kernel, args in ((through_while, _arrays(4, 4)), (product, _arrays((3, 4), 3)),
                         (read_after_write, _arrays(4, 4, 4))):
        kernel(*args)
        with pytest.raises(qgraph.QgraphSyntaxError):
            kernel.grad(*args)
    check_gradients(through_while_free, uniform(4), np.zeros(4))


@qgraph.kernel
def through_while_free(x, y):
    """A while loop the gradient does not pass through (it only counts)."""
    for i in range(x.shape[0]):
        k = 0
        while k * 0.25 < x[i]:
            k += 1
        y[i] = x[i] * k


def test_a_gather_in_a_deterministic_kernel(arch):
    @qgraph.kernel(deterministic=True)
    def gather(x, idx, y):
        for i in range(y.shape[0]):  # gather line
            y[i] = x[idx[i]] * 2.0

    x, y = _arrays(4, 4)
    idx = qgraph.from_numpy(np.array([0, 1, 1, 3], np.int32))
    gather(x, idx, y)
    message = r"deterministic mode: '_qg_adj_x' is updated with a float atomic add whose element depends on the loop"
    with pytest.raises(qgraph.QgraphSyntaxError, match=message + r" variables \(a scatter\)"):
        gather.grad(x, idx, y)


@qgraph.kernel
def with_break(x, y):
    for i in range(x.shape[0]):
        s = 0.0
        for k in range(x.shape[1]):  # break line
            if s > 0.7:  # decided by what the loop carries: the adjoint cannot take it again pass by pass
                break
            s += x[i, k] * 2.0
        y[i] = s


@qgraph.kernel
def with_gamma(x, y):
    for i in range(x.shape[0]):
        y[i] = math.gamma(x[i] + 1.0)  # gamma line


@qgraph.kernel
def uses_the_old_value(x, total, y):
    for i in range(x.shape[0]):
        old = qgraph.atomic_add(total, 0, x[i])
        y[i] = old * x[i]  # old-value line


def test_a_gradient_through_a_loop_with_break(arch):
    _raises(with_break, _arrays((3, 4), 3), "the gradient needs `s` from every pass of this loop", "# break line")


def test_a_function_without_a_derivative_rule(arch):
    _raises(with_gamma, _arrays(4, 4), "`math.gamma` has no derivative rule", "# gamma line")


def test_the_value_an_atomic_returned(arch):
    _raises(uses_the_old_value, _arrays(4, 1, 4), "the gradient needs the value qgraph.atomic_add returned",
            "old = qgraph.atomic_add")


@qgraph.struct
class Body:
    pos: object
    scale: float


def test_a_loop_writing_a_struct_array(arch):
    @qgraph.kernel
    def move(b: Body, v, steps: int):
        for _ in qgraph.repeat(steps):
            for i in range(v.shape[0]):
                b.pos[i] += v[i] * b.scale

    v = _arrays(4)[0]
    body = Body(qgraph.from_numpy(np.zeros(4)), 0.5)
    with qgraph.Tape(), pytest.raises(qgraph.QgraphError, match=r"kernel move: the task at line \d+ inside the "
                                                                r"qgraph.repeat loop at line \d+ writes `b.pos`, an "
                                                                "array inside a struct"):
        move(body, v, 3)

