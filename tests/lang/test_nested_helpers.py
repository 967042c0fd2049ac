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
