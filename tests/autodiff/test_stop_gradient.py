"""qgraph.stop_gradient: the value in the forward pass, a constant to the adjoint (issue 49). The
README's relax differentiates through its WHILE loop once its convergence measure is marked, on
the CPU, the CUDA WHILE node and the host fallback, against central differences."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.generated import generated_module

import qgraph


@qgraph.kernel(graph_while="flag")
def relax(u, un, change, flag, tol: float):
    change[0] = 0.0
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        un[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        qgraph.atomic_max(change, 0, qgraph.stop_gradient(abs(un[i, j] - u[i, j])))
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        u[i, j] = un[i, j]
    flag[0] = 1 if change[0] > tol else 0


@qgraph.kernel
def weighted_squares(u, w, out):
    for i, j in qgraph.ndrange(u.shape[0], u.shape[1]):
        out[0] += w[i, j] * u[i, j] * u[i, j]


def _solve(u0: np.ndarray, w: np.ndarray, backward: bool):
    u = qgraph.from_numpy(u0.copy(), requires_grad=True)
    un = qgraph.from_numpy(np.zeros_like(u0), requires_grad=True)
    change, flag = qgraph.from_numpy(np.zeros(1)), qgraph.from_numpy(np.ones(1, np.int32))
    out = qgraph.from_numpy(np.zeros(1), requires_grad=True)
    with qgraph.Tape() as tape:
        relax(u, un, change, flag, 1e-3)
        weighted_squares(u, qgraph.from_numpy(w), out)
    passes = relax.stats.iterations
    if backward:
        tape.backward(out)
        return out.to_numpy()[0], u.grad.to_numpy(), passes
    return out.to_numpy()[0], None, passes


def test_the_readme_relax_differentiates_through_its_while_loop(loop_arch):
    rng = np.random.default_rng(3)
    u0, w = rng.random((12, 12)), rng.random((12, 12))
    loss, grad, passes = _solve(u0, w, backward=True)
    assert passes[0] > 10
    h = 1e-6
    for i, j in [(0, 4), (3, 5), (6, 6), (11, 2)]:  # boundary cells feed the interior; interior ones are relaxed
        up, um = u0.copy(), u0.copy()
        up[i, j] += h
        um[i, j] -= h
        (fp, _, pp), (fm, _, pm) = _solve(up, w, False), _solve(um, w, False)
        assert pp == pm == passes  # the same passes: the difference is smooth
        np.testing.assert_allclose(grad[i, j], (fp - fm) / (2 * h), rtol=1e-6, atol=1e-9)


@qgraph.kernel
def times_itself_stopped(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] * qgraph.stop_gradient(x[i])


@qgraph.kernel
def dot_with_stopped_copy(x, y):
    for i in range(x.shape[0]):
        p = qgraph.vec2(x[i], 2.0 * x[i])
        y[i] = qgraph.dot(p, qgraph.stop_gradient(p))


@pytest.mark.parametrize("kernel,forward,slope", [(times_itself_stopped, 1.0, 1.0), (dot_with_stopped_copy, 5.0, 5.0)],
                         ids=["scalar", "vector"])
def test_a_stopped_value_is_a_constant_to_the_gradient(arch, kernel, forward, slope):
    """x * stop_gradient(x) is x² with the gradient x (not 2x), as jax.lax.stop_gradient; per
    component for vectors: p . stop_gradient(p), p = (x, 2x), is 5x² with the gradient 5x."""
    values = np.random.default_rng(5).standard_normal(64).astype(np.float32)
    x = qgraph.from_numpy(values, requires_grad=True)
    y = qgraph.from_numpy(np.zeros(64, np.float32), requires_grad=True)
    with qgraph.Tape() as tape:
        kernel(x, y)
    np.testing.assert_allclose(y.to_numpy(), forward * values * values, rtol=1e-6)
    tape.backward(y)
    np.testing.assert_allclose(x.grad.to_numpy(), slope * values, rtol=1e-6)


def test_stop_gradient_takes_one_value(cpu):  # (host arrays: the syntax error comes on any backend)
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"qgraph\.stop_gradient takes one value"):
        @qgraph.kernel
        def two(x, y):
            for i in range(x.shape[0]):
                y[i] = qgraph.stop_gradient(x[i], 2.0)

        two(np.ones(3), np.zeros(3))


def test_the_atomic_max_error_names_stop_gradient():
    @qgraph.kernel
    def largest(x, best):
        for i in range(x.shape[0]):
            qgraph.atomic_max(best, 0, x[i] * x[i])

    x = qgraph.from_numpy(np.ones(4), requires_grad=True)
    best = qgraph.from_numpy(np.zeros(1), requires_grad=True)
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"qgraph\.stop_gradient\(value\) to atomic_max"):
        with qgraph.Tape():
            largest(x, best)


# The family: where users put stop_gradient (the body of a parallel loop, a repeat region, after an inner
# loop, inside a helper, a vector value, a 0-d reduction target) x float64 and float32 (with a float32
# literal). Each kernel computes y from x with part of it stopped; (source of the loop body, the
# gradient of sum(y) with respect to x as a function of x and the literal c).
STOP_CONTEXTS = {
    "plain": ("    for i in range(x.shape[0]):\n        y[i] = x[i] * qgraph.stop_gradient(x[i] * C) + x[i]\n",
              lambda x, c: x * c + 1),
    "in a repeat": ("    for _ in qgraph.repeat(k):\n        for i in range(x.shape[0]):\n"
                    "            y[i] = x[i] * qgraph.stop_gradient(x[i] * C) + x[i]\n",
                    lambda x, c: x * c + 1),
    "after an inner loop": ("    for i in range(x.shape[0]):\n        s = x[i] * C\n        for m in range(3):\n"
                            "            s = s + x[i]\n        y[i] = x[i] * qgraph.stop_gradient(s) + s\n",
                            lambda x, c: x * c + 3 * x + c + 3),
    "in a helper": ("    for i in range(x.shape[0]):\n        y[i] = damped(x[i]) + x[i]\n",
                    lambda x, c: x * c + 1),
    "vector": ("    for i in range(x.shape[0]):\n        p = V(x[i], 2 * x[i])\n"
               "        y[i] = qgraph.dot(p, qgraph.stop_gradient(p * C)) + x[i]\n",
               lambda x, c: 5 * x * c + 1),
    "0-d target": ("    for i in range(x.shape[0]):\n        y[()] += x[i] * qgraph.stop_gradient(x[i] * C)\n",
                   lambda x, c: x * c),
}
STOP_SOURCE = """import numpy as np
import qgraph

C = {c}
V = {v}


@qgraph.func
def damped(v):
    return v * qgraph.stop_gradient(v * C)


@qgraph.kernel
def stopped(x, y, k: int):
{body}"""


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f8", "f4"])
@pytest.mark.parametrize("context", list(STOP_CONTEXTS))
def test_stop_gradient_in_every_context(arch, tmp_path_factory, context, dtype):
    body, gradient = STOP_CONTEXTS[context]
    f4 = dtype == np.float32
    source = STOP_SOURCE.format(c="np.float32(0.75)" if f4 else "0.75", v="qgraph.vec2" if f4 else "qgraph.vec2d",
                                body=body)
    name = "stopgrad_" + "".join(ch for ch in context if ch.isalnum()) + ("_f4" if f4 else "_f8")
    kernel = generated_module(tmp_path_factory, name, source).stopped
    values = np.random.default_rng(len(context)).standard_normal(32).astype(dtype)
    x = qgraph.from_numpy(values, requires_grad=True)
    y = qgraph.from_numpy(np.zeros(() if context == "0-d target" else 32, dtype), requires_grad=True)
    with qgraph.Tape() as tape:
        kernel(x, y, 2)
    tape.backward(y)
    assert x.grad.to_numpy().dtype == dtype
    np.testing.assert_allclose(x.grad.to_numpy(), gradient(values.astype(np.float64), 0.75),
                               rtol=1e-5 if f4 else 1e-12, atol=1e-5 if f4 else 1e-12)
