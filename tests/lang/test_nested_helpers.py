"""A chain of nested @qgraph.func helpers compiles in time linear in its depth: each helper is
specialised once per argument types (the flattener's learning pass once built each level's callee
twice: 2^depth builds), and numba has the stack it needs to compile 60 levels (one jitted function
calling the next). Values and gradients against NumPy on both backends."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.generated import generated_module

import qgraph
from qgraph.args.kinds import arg_type, array_sig
from qgraph.compiler.compile_depth import room_to_recurse
from qgraph.dtypes import as_dtype
from qgraph.lang.flat.view import flat_source

DEPTH = 60


def _chain_source(depth: int) -> str:
    """f0(x) = x + 1, f_k(x) = 0.5 f_{k-1}(x) + 0.25 x, and a kernel applying f_{depth-1} to each
    element."""
    lines = ["import qgraph", "", "", "@qgraph.func", "def f0(x):", "    return x + 1.0", ""]
    for k in range(1, depth):
        lines += ["", "@qgraph.func", f"def f{k}(x):", f"    return f{k - 1}(x) * 0.5 + 0.25 * x", ""]
    lines += ["", "@qgraph.kernel", "def chain(y, x):", "    for i in range(x.shape[0]):",
              f"        y[i] = f{depth - 1}(x[i])", ""]
    return "\n".join(lines)


def _expected(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chain's value and derivative at `x`, level by level."""
    value, slope = x + 1.0, np.ones_like(x)
    for _ in range(1, DEPTH):
        value, slope = 0.5 * value + 0.25 * x, 0.5 * slope + 0.25
    return value, slope


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return generated_module(tmp_path_factory, "qgraph_nested_helpers", _chain_source(DEPTH)).chain


def test_each_nested_helper_is_specialised_once(chain):
    kinds = [arg_type(array_sig(as_dtype(np.float64), 1, True, 16))] * 2
    with room_to_recurse():  # as the launchers flatten: one level deeper per helper
        flat = flat_source(chain.source, kinds)
    assert len(flat.funcs.defs) == DEPTH  # one specialisation per helper in the kernel's code
    assert flat.funcs.built == DEPTH  # and each built once, the learning pass's builds taken back


def test_a_chain_of_sixty_nested_helpers_compiles_and_computes(arch, chain):
    x = np.linspace(-1.0, 1.0, 16)
    y = qgraph.from_numpy(np.zeros(16))
    chain(y, qgraph.from_numpy(x))
    np.testing.assert_allclose(y.to_numpy(), _expected(x)[0], rtol=1e-12)


def test_the_gradient_through_sixty_nested_helpers(arch, chain):
    values = np.linspace(-1.0, 1.0, 16)
    x = qgraph.from_numpy(values, requires_grad=True)
    y = qgraph.from_numpy(np.zeros(16), requires_grad=True)
    chain(y, x)
    y.grad.fill(1.0)
    chain.grad(y, x)
    np.testing.assert_allclose(x.grad.to_numpy(), _expected(values)[1], rtol=1e-12)


# A family: a three-deep chain whose innermost helper returns a vector (the case the flattener's
# learning pass exists for: a local assigned a helper's vector), used in each context users meet.
FAMILY_HELPERS = '''
vec2d = qgraph.vector(2, qgraph.f64)


@qgraph.func
def inner(a):
    return vec2d(a, 2.0 * a)


@qgraph.func
def middle(a):
    v = inner(a)
    return v.x + 0.5 * v.y


@qgraph.func
def outer(a):
    return middle(a) * 0.25 + a
'''

# context -> (kernel body using outer(), d y / d x per element); outer(a) = 1.5 a; k = 3
FAMILY = {
    "task": ("    for i in range(x.shape[0]):\n        y[i] = outer(x[i])\n", 1.5),
    "repeat_region": ("    for _ in qgraph.repeat(k):\n        for i in range(x.shape[0]):\n"
                      "            y[i] += outer(x[i])\n", 4.5),
    "after_inner_loop": ("    for i in range(x.shape[0]):\n        s = 0.0\n        for j in range(2):\n"
                         "            s += x[i]\n        y[i] = outer(s)\n", 3.0),
    "zero_d_target": ("    for i in range(x.shape[0]):\n        y[i] = outer(x[i])\n    t[()] = outer(x[0])\n", 1.5),
}


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    source = "import qgraph\n\n" + FAMILY_HELPERS
    for name, (body, _) in FAMILY.items():
        source += f"\n\n@qgraph.kernel\ndef {name}(y, x, t, k: int):\n{body}"
    return generated_module(tmp_path_factory, "qgraph_nested_helper_family", source)


@pytest.mark.parametrize("context", sorted(FAMILY))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_vector_helper_chain_in_each_context(arch, family, context, dtype):
    kernel, slope = getattr(family, context), FAMILY[context][1]
    rng = np.random.default_rng(len(context))
    values = rng.random(8).astype(dtype)
    y, x, t = (qgraph.from_numpy(np.zeros(8, dtype)), qgraph.from_numpy(values), qgraph.from_numpy(np.zeros((), dtype)))
    kernel(y, x, t, 3)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(y.to_numpy(), slope * values, rtol=tol)
    if context == "zero_d_target":
        np.testing.assert_allclose(t.to_numpy(), 1.5 * values[0], rtol=tol)
    if dtype == np.float64:  # the gradient through the chain, against its closed form
        x.requires_grad = y.requires_grad = True
        y.fill(0.0)
        kernel(y, x, t, 3)
        y.grad.fill(1.0)
        kernel.grad(y, x, t, 3)
        np.testing.assert_allclose(x.grad.to_numpy(), np.full(8, slope), rtol=1e-12)
