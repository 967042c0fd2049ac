"""The extents a kernel's loop bounds make certain (lang.front.loop_extents): which accesses give a rule
`b.shape[m] >= a.shape[k] + d`, and which are left to debug mode (guarded, skippable, shifted by
anything but a literal, loops of another form). Decided on the source, without compiling."""

from __future__ import annotations

import pytest

import qgraph
from qgraph.lang.front.loop_extents import certain_extents


def _rules(tmp_path, body: str, graph_while: str | None = None) -> list[tuple]:
    """(text, access, array, axis, extent, extent axis, offset, conditions) of each rule of a kernel
    with `body` (qgraph reads a kernel's source from its file)."""
    path = tmp_path / "extents_kernel.py"
    path.write_text(
        "import qgraph\n\n\ndef kernel(x, y, n: int, flag):\n"
        + "".join(f"    {line}\n" for line in body.strip("\n").split("\n"))
    )
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    kernel = (
        qgraph.kernel(graph_while=graph_while)(namespace["kernel"])
        if graph_while
        else qgraph.kernel(namespace["kernel"])
    )
    return [
        (r.text, r.access, r.array, r.axis, r.extent, r.extent_axis, r.offset, r.conditions)
        for r in certain_extents(kernel.source)
    ]


CERTAIN = {
    "a parallel range loop": (
        "for i in range(x.shape[0]):\n    y[i] = x[i]",
        [("y[i]", "writes", "y", 0, "x", 0, 0, (("task", 0),))],
    ),
    "len() as the bound, an update": (
        "for i in range(len(x)):\n    y[i] += 1.0",
        [("y[i]", "updates", "y", 0, "x", 0, 0, (("task", 0),))],
    ),
    "ndrange over two axes": (
        "for i, j in qgraph.ndrange(x.shape[0], x.shape[1]):\n    y[i, j] = 0.0",
        [
            ("y[i, j]", "writes", "y", 0, "x", 0, 0, (("task", 0),)),
            ("y[i, j]", "writes", "y", 1, "x", 1, 0, (("task", 0),)),
        ],
    ),
    "literal offsets": (
        "for i in range(1, x.shape[0] - 1):\n    y[i + 1] = x[i - 1]",
        [("y[i + 1]", "writes", "y", 0, "x", 0, 0, (("task", 0),))],
    ),
    "its own array one past the end": (
        "for i in range(x.shape[0]):\n    x[i] = x[i + 1]",
        [("x[i + 1]", "reads", "x", 0, "x", 0, 1, (("task", 0),))],
    ),
    "before a continue": (
        "for i in range(x.shape[0]):\n    y[i] = 1.0\n    if x[i] > 0:\n        continue",
        [("y[i]", "writes", "y", 0, "x", 0, 0, (("task", 0),))],
    ),
    "an atomic": (
        "for i in range(x.shape[0]):\n    qgraph.atomic_add(y, i, 1.0)",
        [("y[i]", "updates", "y", 0, "x", 0, 0, (("task", 0),))],
    ),
    "a branch's test": (
        "for i in range(x.shape[0]):\n    if y[i] > 0:\n        x[i] = 0.0",
        [("y[i]", "reads", "y", 0, "x", 0, 0, (("task", 0),))],
    ),
    "a serial loop": (
        "for i in qgraph.serial(range(x.shape[0])):\n    y[i] = 1.0",
        [("y[i]", "writes", "y", 0, "x", 0, 0, (("extent", "x", 0, 0, 0),))],
    ),
    "a nested loop": (
        "for i in range(n):\n    for j in range(x.shape[1]):\n        y[i, j] = 1.0",
        [("y[i, j]", "writes", "y", 1, "x", 1, 0, (("task", 0), ("extent", "x", 1, 0, 0)))],
    ),
    "a repeat loop": (
        "for _ in qgraph.repeat(n):\n    for i in range(x.shape[0]):\n        y[i] = 1.0",
        [("y[i]", "writes", "y", 0, "x", 0, 0, (("count", "n", 0), ("task", 0)))],
    ),
}

LEFT_TO_DEBUG_MODE = {
    "guarded by an if": "for i in range(x.shape[0]):\n    if i < y.shape[0]:\n        y[i] = x[i]",
    "a conditional expression": "for i in range(x.shape[0]):\n    x[i] = y[i] if i < y.shape[0] else 0.0",
    "after and": "for i in range(x.shape[0]):\n    x[i] = float(i < y.shape[0] and y[i] > 0)",
    "after a continue": "for i in range(x.shape[0]):\n    if i >= y.shape[0]:\n        continue\n    y[i] = 1.0",
    "the variable assigned": "for i in range(x.shape[0]):\n    i = i // 2\n    y[i] = 1.0",
    "a scalar offset": "for i in range(x.shape[0]):\n    y[i + n] = 1.0",
    "a step": "for i in range(0, x.shape[0], 2):\n    y[i] = 1.0",
    "a start from a parameter": "for i in range(n, x.shape[0]):\n    y[i] = 1.0",
    "a bound from a parameter": "for i in range(n):\n    y[i] = x[i]",
    "a nested loop with a break": "for i in range(n):\n    for j in range(x.shape[0]):\n        y[j] = 1.0\n"
    "        if x[j] > 0:\n            break",
    "a branch region": "if qgraph.cond(flag):\n    for i in range(x.shape[0]):\n        y[i] = 1.0",
    "a while loop tested first": "while qgraph.loop(flag):\n    for i in range(x.shape[0]):\n        y[i] = 1.0\n"
    "    flag[0] = 0",
    "a parameter rebound": "for i in range(x.shape[0]):\n    y = x\n    y[i] = 1.0",
}


@pytest.mark.parametrize("case", list(CERTAIN))
def test_what_a_loop_makes_certain(case, tmp_path):
    body, expected = CERTAIN[case]
    assert _rules(tmp_path, body) == expected


@pytest.mark.parametrize("case", list(LEFT_TO_DEBUG_MODE))
def test_what_is_left_to_debug_mode(case, tmp_path):
    assert _rules(tmp_path, LEFT_TO_DEBUG_MODE[case]) == []


def test_a_graph_while_body_runs_once_at_least(tmp_path):
    rules = _rules(tmp_path, "for i in range(x.shape[0]):\n    y[i] = 1.0\nflag[0] = 0", graph_while="flag")
    assert rules == [("y[i]", "writes", "y", 0, "x", 0, 0, (("task", 0),))]
