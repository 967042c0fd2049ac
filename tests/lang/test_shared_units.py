"""Units of the same code share one compiled CPU function (lang.cpu.shared_units): the runner calls
it with each unit's arguments, and every call still does its own unit's work."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from helpers.generated import generated_module

import qgraph
from qgraph.lang.cpu.shared_units import canonical_code, shared_units


@qgraph.kernel
def twice_apart(a, b, count):
    for i in range(a.shape[0]):
        a[i] = a[i] * 0.5 + 1.0
    count[0] += 1  # a serial task between them: the two loops are units of their own
    for i in range(b.shape[0]):
        b[i] = b[i] * 0.5 + 1.0
    count[0] += 2
    for i in range(a.shape[0]):
        a[i] = a[i] * 0.5 - 1.0  # not the same code: a function of its own


def test_loops_of_the_same_code_on_other_arrays_do_their_own_work(arch):
    rng = np.random.default_rng(5)
    a0, b0 = rng.random(41), rng.random(23)
    a, b, count = qgraph.from_numpy(a0), qgraph.from_numpy(b0), qgraph.from_numpy(np.zeros(1, np.int64))
    twice_apart(a, b, count)
    np.testing.assert_allclose(a.to_numpy(), (a0 * 0.5 + 1.0) * 0.5 - 1.0)
    np.testing.assert_allclose(b.to_numpy(), b0 * 0.5 + 1.0)
    assert count.to_numpy()[0] == 3


def test_the_cpu_runner_calls_one_function_for_units_of_the_same_code():
    qgraph.init("cpu")
    a, b, count = qgraph.from_numpy(np.ones(8)), qgraph.from_numpy(np.ones(5)), qgraph.from_numpy(np.zeros(1, np.int64))
    names = [task.name for task in twice_apart.inspect(a, b, count).tasks]
    assert len(names) == 5
    assert names[0] == names[2], names  # the two `* 0.5 + 1.0` loops
    assert len(set(names)) == 4, names  # the serial tasks differ (+= 1, += 2), so does the last loop


def _def(code: str) -> ast.FunctionDef:
    return ast.parse(code).body[0]


def test_code_is_the_same_up_to_parameter_and_local_names_only():
    first = _def("def u0(x, y):\n    t = x[0] * 2\n    y[0] = t + g(t)\n")
    renamed = _def("def u7(p, q):\n    s = p[0] * 2\n    q[0] = s + g(s)\n")
    other_global = _def("def u8(p, q):\n    s = p[0] * 2\n    q[0] = s + h(s)\n")  # g and h are other functions
    swapped = _def("def u9(p, q):\n    s = q[0] * 2\n    p[0] = s + g(s)\n")  # reads its second argument
    assert canonical_code(first) == canonical_code(renamed)
    assert canonical_code(first) != canonical_code(other_global)
    assert canonical_code(first) != canonical_code(swapped)
    assert shared_units([first, renamed, other_global, swapped]) == {"u0": "u0", "u7": "u0", "u8": "u8", "u9": "u9"}


# --------------------------------------------------------------------------- a generated family

HEADER = """import qgraph

V3 = qgraph.vector(3, qgraph.f32)


@qgraph.struct
class Acc:
    out: object  # an array of the struct: each pass adds to it
    scale: float


@qgraph.func
def damp(a, b):
    if a > 0.5:
        return a * b
    return a + 0.25 * b
"""

# one update of a 0-d target, a vector array and a struct's array, through a helper, with float32 data and
# Python float literals, repeated in each context so that the CPU generator finds units of the same code:
# twice at the top level around a serial task, twice in a repeat loop around one, and in a repeat loop
# before and after an inner repeat loop
UPDATE = ["for i in range(x.shape[0]):",
          "    v = damp(x[i], w[0]) * 0.5",
          "    total[()] += v",
          "    vout[i] += V3(v, v * v, 1.0)",
          "    acc.out[i] += acc.scale * v"]
CONTEXTS = {
    "top": UPDATE + ["n[0] += 1"] + UPDATE,
    "repeat": ["for _ in qgraph.repeat(k):"] + ["    " + line for line in UPDATE + ["n[0] += 1"] + UPDATE],
    "after_inner": ["for _ in qgraph.repeat(k):"] + ["    " + line for line in UPDATE]
                   + ["    for _ in qgraph.repeat(k):", "        n[0] += 1"] + ["    " + line for line in UPDATE],
}
PASSES = {"top": 2, "repeat": 6, "after_inner": 6}  # updates per call with k = 3


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    parts = [HEADER] + [f"\n\n@qgraph.kernel\ndef shared_{name}(x, w, total, vout: V3[:], acc: Acc, n, k: int):\n"
                        + "".join(f"    {line}\n" for line in lines) for name, lines in CONTEXTS.items()]
    return generated_module(tmp_path_factory, "qgraph_shared_units_family", "".join(parts))


@pytest.mark.parametrize("context", list(CONTEXTS))
def test_units_of_the_same_code_in_every_context(arch, family, context):
    rng = np.random.default_rng(len(context))
    x0, w0 = rng.uniform(0.2, 0.9, 7).astype(np.float32), np.array([0.75], np.float32)
    x, w = qgraph.from_numpy(x0), qgraph.from_numpy(w0)
    total, vout = qgraph.from_numpy(np.zeros((), np.float32)), qgraph.from_numpy(np.zeros((7, 3), np.float32))
    acc, n = family.Acc(qgraph.from_numpy(np.zeros(7, np.float32)), 1.5), qgraph.from_numpy(np.zeros(1, np.int64))
    kernel = getattr(family, f"shared_{context}")
    kernel(x, w, total, vout, acc, n, 3)
    v = np.where(x0 > 0.5, x0 * w0[0], x0 + np.float32(0.25) * w0[0]) * np.float32(0.5)
    passes = PASSES[context]
    np.testing.assert_allclose(total.to_numpy(), passes * v.sum(), rtol=1e-5)
    np.testing.assert_allclose(vout.to_numpy(), passes * np.stack([v, v * v, np.ones_like(v)], axis=1), rtol=1e-5)
    np.testing.assert_allclose(acc.out.to_numpy(), passes * 1.5 * v, rtol=1e-5)
    if arch == "cpu":  # the repeated update is one function, called twice a pass
        names = [task.name for task in kernel.inspect(x, w, total, vout, acc, n, 3).tasks]
        assert len(names) == 3 and names[0] == names[2] != names[1], names
