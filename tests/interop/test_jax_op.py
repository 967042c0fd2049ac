"""qgraph.jax_op: a kernel as a JAX function, eager and inside jax.jit, its gradient by jax.grad against
the same formula written in JAX, on the CPU (XLA's host buffers) and on CUDA (XLA's stream). Needs JAX
(skipped without it)."""

from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import pytest

import qgraph
from qgraph import QgraphError

pytestmark = pytest.mark.jax  # the README's third command runs these (the test extra has no JAX)
if importlib.util.find_spec("jax") is None:
    pytest.skip("JAX is not installed", allow_module_level=True)
# JAX takes three quarters of a GPU's memory at its first use unless told otherwise; the CUDA suite
# runs one process per GPU slot, so it takes what it uses.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
jax = pytest.importorskip("jax")
jnp = jax.numpy


@pytest.fixture(scope="module", autouse=True)
def _x64():
    was = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", was)


@qgraph.kernel
def quad_into(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] = a * x[i] * x[i] + y[i]


@qgraph.kernel
def spring_steps(p, v, k: float, dt: float, steps: int):
    """A damped spring integrated in place: written arrays read again, a loop per element."""
    for i in range(p.shape[0]):
        pi = p[i]
        vi = v[i]
        for _ in range(steps):
            vi = vi - dt * (k * pi + 0.1 * vi)
            pi = pi + dt * vi
        p[i] = pi
        v[i] = vi


@qgraph.kernel
def gather_scale(x, index, out, a: float):
    for i in range(out.shape[0]):
        out[i] = a * math.sin(x[index[i]])


def _device(arch):
    return jax.devices("gpu")[0] if arch == "cuda" else jax.devices("cpu")[0]


def _put(arch, *arrays):
    found = tuple(jax.device_put(jnp.asarray(a), _device(arch)) for a in arrays)
    return found[0] if len(found) == 1 else found


_OPS: dict = {}


def _op(kernel):
    if kernel not in _OPS:
        _OPS[kernel] = qgraph.jax_op(kernel)
    return _OPS[kernel]


def test_the_function_returns_what_the_kernel_writes_and_leaves_its_arguments(arch):
    rng = np.random.default_rng(1)
    x0, y0 = rng.standard_normal(100), rng.standard_normal(100)
    x, y = _put(arch, x0, y0)
    out = _op(quad_into)(x, y, 2.5)
    np.testing.assert_allclose(np.asarray(out), 2.5 * x0 * x0 + y0, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(y), y0)  # a JAX array is a value: the call changed a copy
    jitted = jax.jit(lambda x, y: _op(quad_into)(x, y, -1.0) * 2.0)
    np.testing.assert_allclose(np.asarray(jitted(x, y)), 2.0 * (-x0 * x0 + y0), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jitted(y, x)), 2.0 * (-y0 * y0 + x0), rtol=1e-12)


def test_numbers_are_static_and_each_traced_value_runs_its_own(arch):
    x, y = _put(arch, np.arange(4.0), np.zeros(4))
    step = jax.jit(lambda x, y, a: _op(quad_into)(x, y, a), static_argnames="a")
    for a in (1.0, 3.0, 1.0):
        np.testing.assert_allclose(np.asarray(step(x, y, a=a)), a * np.arange(4.0) ** 2)
    with pytest.raises(TypeError, match="'a' is a number of the kernel and must be known when JAX traces"):
        jax.jit(lambda x, y, a: _op(quad_into)(x, y, a))(x, y, 2.0)


def test_a_jitted_training_step_has_jax_s_own_gradient(arch):
    """The issue's test: jax.grad through a jitted step that calls the kernel equals jax.grad of the
    same formula in JAX; both written arrays' results feed the loss."""
    rng = np.random.default_rng(2)
    p0, v0, target = rng.standard_normal(64), rng.standard_normal(64), rng.standard_normal(64)
    k, dt, steps = 3.0, 0.01, 40

    def loss_qgraph(p, v):
        p1, v1 = _op(spring_steps)(p, v, k, dt, steps)
        return jnp.sum((p1 - target) ** 2) + 0.5 * jnp.sum(v1 ** 2)

    def loss_jax(p, v):
        for _ in range(steps):
            v = v - dt * (k * p + 0.1 * v)
            p = p + dt * v
        return jnp.sum((p - target) ** 2) + 0.5 * jnp.sum(v ** 2)

    p, v = _put(arch, p0, v0)
    got = jax.jit(jax.value_and_grad(loss_qgraph, argnums=(0, 1)))(p, v)
    want = jax.value_and_grad(loss_jax, argnums=(0, 1))(p, v)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-12)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12)
    lr, params = 0.05, (p, v)  # and a few steps of gradient descent agree
    for _ in range(3):
        grads = jax.jit(jax.grad(loss_qgraph, argnums=(0, 1)))(*params)
        params = tuple(q - lr * g for q, g in zip(params, grads))
    ref = (p, v)
    for _ in range(3):
        grads = jax.grad(loss_jax, argnums=(0, 1))(*ref)
        ref = tuple(q - lr * g for q, g in zip(ref, grads))
    for a, b in zip(params, ref):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_integer_array_gets_no_gradient_and_a_float32_one_keeps_its_type(arch, dtype):
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(50).astype(dtype)
    index0 = rng.integers(0, 50, 20).astype(np.int64)
    x, index, out = _put(arch, x0, index0, np.zeros(20, dtype))

    def loss(x, out):
        return jnp.sum(_op(gather_scale)(x, index, out, 2.0) ** 2)

    value, grads = jax.value_and_grad(loss, argnums=(0, 1))(x, out)
    want = np.zeros(50)
    np.add.at(want, index0, 2 * (2.0 * np.sin(x0[index0].astype(float))) * 2.0 * np.cos(x0[index0].astype(float)))
    assert grads[0].dtype == np.dtype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(np.asarray(grads[0]), want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.asarray(grads[1]), 0.0)  # overwritten: its value never reaches the loss
    ints = jax.grad(lambda x: jnp.sum(_op(gather_scale)(x, index, out, 2.0)), allow_int=True)(x)
    assert ints.shape == x.shape


def test_vmap_runs_the_kernel_once_per_batch_member(arch):
    xs, y = _put(arch, np.arange(12.0).reshape(3, 4), np.ones(4))
    out = jax.vmap(lambda x: _op(quad_into)(x, y, 2.0))(xs)
    np.testing.assert_allclose(np.asarray(out), 2.0 * np.arange(12.0).reshape(3, 4) ** 2 + 1.0)


def test_errors_name_the_operator_and_the_fix(arch):
    with pytest.raises(TypeError, match=r"qgraph.jax_op\(quad_into\) takes 3 arguments \(x, y, a\), got 2"):
        _op(quad_into)(*_put(arch, np.ones(3), np.ones(3)))
    with pytest.raises(TypeError, match="takes a @qgraph.kernel"):
        qgraph.jax_op(lambda x: x)
    with pytest.raises(ValueError, match="jax_op name must be a Python identifier"):
        qgraph.jax_op(quad_into, name="not a name")

    @qgraph.kernel
    def reads_only(x, total):
        total[0] = x[0]

    assert qgraph.jax_op(reads_only).param_names == ("x", "total")
    with pytest.raises(TypeError, match="writes none of its arrays"):

        @qgraph.kernel
        def writes_nothing(x, a: float):
            b = x[0] * a  # noqa: F841

        qgraph.jax_op(writes_nothing)


def test_a_nonlinear_device_loop_says_the_tape_keeps_its_states(arch):
    @qgraph.kernel
    def squares(x, out, n: int):
        for _ in qgraph.repeat(n):
            for i in range(x.shape[0]):
                x[i] = x[i] * x[i]
        for i in range(x.shape[0]):
            out[i] = x[i]

    op = qgraph.jax_op(squares)
    x, out = _put(arch, np.full(4, 1.1), np.zeros(4))
    np.testing.assert_allclose(np.asarray(op(x, out, 3)[1]), 1.1 ** 8)
    with pytest.raises(QgraphError, match=r"jax_op\(squares\): the gradient of its device loop .*qgraph.Tape keeps"):
        jax.block_until_ready(jax.grad(lambda x: jnp.sum(op(x, out, 3)[1]))(x))
    np.testing.assert_allclose(np.asarray(op(x, out, 3)[1]), 1.1 ** 8)  # and the next call works


def test_a_program_of_many_calls_replays_with_each_call_s_buffers(arch):
    """XLA records a program holding several such calls into one CUDA graph (a command buffer: the
    handler runs under its capture, once per set of buffers) and replays it; every run with new
    arrays must still give its own result."""

    def chain(x, y):
        for _ in range(8):
            y = _op(quad_into)(x, y, 0.5)
        return y

    jitted = jax.jit(chain)
    rng = np.random.default_rng(4)
    for _ in range(4):
        x0, y0 = rng.standard_normal(256), rng.standard_normal(256)
        want = y0.copy()
        for _ in range(8):
            want = 0.5 * x0 * x0 + want
        np.testing.assert_allclose(np.asarray(jitted(*_put(arch, x0, y0))), want, rtol=1e-12)


@qgraph.func
def rounded(x):
    return math.floor(x + 0.5)


@rounded.adjoint
def _(x, adj_ret):
    return adj_ret  # straight through the rounding


@qgraph.kernel
def quantise(x, y):
    for i in range(x.shape[0]):
        y[i] = rounded(4.0 * x[i]) * x[i]


def test_jax_grad_calls_a_helper_s_custom_adjoint(arch):
    x0 = np.random.default_rng(5).uniform(-2, 2, 40)
    x, y = _put(arch, x0, np.zeros(40))
    grad = jax.jit(jax.grad(lambda x: jnp.sum(_op(quantise)(x, y))))(x)
    np.testing.assert_allclose(np.asarray(grad), 4.0 * x0 + np.floor(4.0 * x0 + 0.5), rtol=1e-12)


def test_a_number_that_changes_every_call_is_told_to_become_an_array(arch, monkeypatch):
    from qgraph.interop import jax_op as jax_op_module

    monkeypatch.setattr(jax_op_module, "MANY_NUMBERS", 3)
    op = qgraph.jax_op(quad_into)
    x, y = _put(arch, np.ones(4), np.zeros(4))
    op(x, y, 1.0)
    op(x, y, 2.0)
    with pytest.warns(RuntimeWarning, match=r"jax_op\(quad_into\): 3 different values of its numbers \(a\)"):
        op(x, y, 3.0)
    np.testing.assert_allclose(np.asarray(op(x, y, 3.0)), 3.0)
