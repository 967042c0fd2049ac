"""Units of the same code share one compiled CPU function (lang.cpu.shared_units): the runner calls
it with each unit's arguments, and every call still does its own unit's work."""

from __future__ import annotations

import ast

import numpy as np

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
