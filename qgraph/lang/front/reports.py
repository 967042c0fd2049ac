"""`qgraph.report(name, value)`: values out of a running device loop, into a ring the host reads.

Each report statement becomes plain stores into the implicit float64 array parameter
`_qg_report` (the ring; on CUDA pinned host memory the device writes through its mapping,
runtime.history reads it), so every backend (CPU runner, device loop, host fallback) runs
the same code and results do not depend on whether a kernel reports. A report is a serial,
single-thread store: it belongs in a serial statement of a device loop body.

The ring (`ReportLayout`), in float64 words:
  word k < counters   the pass counter of the k-th reporting task: +1 each time it starts
  per name, from base  [count] [POWERS (pass, value) pairs] [latest (pass, value) pairs]
Report number w (0-based) goes into latest pair w % latest, and also into power pair
bit_length(w) when w is 0 or a power of two; the count is stored last, after a fence, so a
reader that reads the count first never sees an entry the count does not cover yet.
"""

from __future__ import annotations

import ast
import dataclasses

from . import builtins as lang
from .parse import KernelSource, Param, Task
from .regions import DeviceLoop, RepeatLoop, control_regions, leaf_tasks

RING = "_qg_report"  # the implicit parameter of kernels that report
FENCE = "_qg_report_fence"  # each backend's fence (compiler: numba_adapter, cpu_math)
POWERS = 64  # pairs for reports 0, 1, 2, 4, ... 2^62
LATEST = 4096  # pairs for the latest reports


@dataclasses.dataclass(frozen=True)
class ReportLayout:
    """Where a kernel's reports live in its ring (see the module docstring)."""

    names: tuple[str, ...]
    counters: int  # reporting tasks, one pass counter each
    latest: int = LATEST

    @property
    def stride(self) -> int:
        return 1 + 2 * (POWERS + self.latest)

    def base(self, k: int) -> int:
        """The count word of name `k`; its pairs follow."""
        return self.counters + k * self.stride

    @property
    def size(self) -> int:
        return self.base(len(self.names))


def _reporting_tasks(src: KernelSource) -> list[Task]:
    return [t for t in src.tasks if any(_is_report(src, n) for s in t.body for n in ast.walk(s))]


def _is_report(src: KernelSource, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and src.resolve(node.func) is lang.report


def with_reports(src: KernelSource, ring_source: str) -> tuple[KernelSource, ReportLayout | None]:
    """`src` with its report statements rewritten into ring stores and the ring parameter
    (read by the binder through `ring_source`), and the ring's layout; (src, None) without reports."""
    tasks = _reporting_tasks(src)
    if not tasks:
        return src, None
    in_loops = {
        id(t) for r in control_regions(src.body) if isinstance(r, (DeviceLoop, RepeatLoop)) for t in leaf_tasks(r)
    }
    names: list[str] = []
    for counter, task in enumerate(tasks):
        line = next(n for s in task.body for n in ast.walk(s) if _is_report(src, n)).lineno
        if task.parallel:
            raise src.error(
                "qgraph.report runs once per pass, in one thread: put it in a serial statement of the "
                "loop body (after the parallel loop, e.g. reduce into a 0-d array and report that), "
                "not inside a parallel for loop",
                line,
            )
        if id(task) not in in_loops:
            raise src.error(
                "qgraph.report belongs in the body of a device loop (graph_while=, `while "
                "qgraph.loop(flag):` or `for _ in qgraph.repeat(k):`): outside one there are no "
                "passes to watch; read the value with to_numpy() after the call instead",
                line,
            )
        rewriter = _ReportRewriter(src, names, counter)
        body = [out for stmt in task.body for out in _as_list(rewriter.visit(stmt))]
        task.body = [_located(f"{RING}[{counter}] = {RING}[{counter}] + 1.0", task.lineno)[0], *body]
        task.loaded = {**task.loaded, RING: task.lineno, FENCE: task.lineno}
    layout = ReportLayout(tuple(names), len(tasks))
    for task in tasks:  # the bases depend on the number of counters: filled in now
        task.body = [_Bases(layout).visit(stmt) for stmt in task.body]
    params = src.params + (Param(RING, None, False, ring_source),)
    return dataclasses.replace(src, params=params, reports=layout), layout


class _ReportRewriter(ast.NodeTransformer):
    """A report statement -> the ring stores (bases as `_qg_base_<k>` placeholders until the layout is known)."""

    def __init__(self, src: KernelSource, names: list[str], counter: int) -> None:
        self.src, self.names, self.counter = src, names, counter

    def visit_Expr(self, node: ast.Expr):
        if not _is_report(self.src, node.value):
            return self.generic_visit(node)
        call = node.value
        if (
            len(call.args) != 2
            or call.keywords
            or not isinstance(call.args[0], ast.Constant)
            or not isinstance(call.args[0].value, str)
        ):
            raise self.src.error(
                'qgraph.report takes a name (a string literal) and a number: qgraph.report("residual", change[0])', node
            )
        name = call.args[0].value
        if name not in self.names:
            self.names.append(name)
        return _report_stores(self.names.index(name), self.counter, ast.unparse(call.args[1]), node.lineno)

    def visit_Call(self, node: ast.Call):
        if _is_report(self.src, node):
            raise self.src.error(
                "qgraph.report is a statement of its own (it returns nothing): "
                'write `qgraph.report("name", value)` on its own line',
                node,
            )
        return self.generic_visit(node)


def _report_stores(k: int, counter: int, value: str, line: int) -> list[ast.stmt]:
    """The stores of one report of name `k` (see the module docstring for the layout)."""
    ring, base = RING, f"_qg_base_{k}"
    code = f"""
_qg_rw = int({ring}[{base}])
_qg_rs = {base} + {1 + 2 * POWERS} + 2 * (_qg_rw % _qg_latest)
{ring}[_qg_rs] = {ring}[{counter}]
{ring}[_qg_rs + 1] = ({value})
if (_qg_rw & (_qg_rw - 1)) == 0:
    _qg_rk = 0
    _qg_rt = _qg_rw
    while _qg_rt > 0:
        _qg_rk = _qg_rk + 1
        _qg_rt = _qg_rt >> 1
    {ring}[{base} + 1 + 2 * _qg_rk] = {ring}[{counter}]
    {ring}[{base} + 2 + 2 * _qg_rk] = {ring}[_qg_rs + 1]
{FENCE}()
{ring}[{base}] = _qg_rw + 1
"""
    return _located(code, line)


class _Bases(ast.NodeTransformer):
    def __init__(self, layout: ReportLayout) -> None:
        self.layout = layout

    def visit_Name(self, node: ast.Name):
        if node.id.startswith("_qg_base_"):
            return ast.copy_location(ast.Constant(self.layout.base(int(node.id[len("_qg_base_") :]))), node)
        if node.id == "_qg_latest":
            return ast.copy_location(ast.Constant(self.layout.latest), node)
        return node


def _located(code: str, line: int) -> list[ast.stmt]:
    body = ast.parse(code.strip()).body
    for stmt in body:
        for node in ast.walk(stmt):
            if "lineno" in node._attributes:
                node.lineno, node.end_lineno, node.col_offset, node.end_col_offset = line, line, 0, 0
    return body


def _as_list(result) -> list[ast.stmt]:
    return result if isinstance(result, list) else [result]
