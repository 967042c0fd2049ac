"""`qgraph.report(name, value)`: values out of a running device loop, into a ring the host reads.

Each report statement becomes plain code over two implicit float64 array parameters, so
every backend (CPU runner, device loop, host fallback) runs the same code and results do not
depend on whether a kernel reports. A report is a serial, single-thread store: it belongs in a
serial statement of a device loop body.

`_qg_report_state` (device memory on CUDA, read and written by the kernel):
  word k < counters     the pass counter of the k-th reporting task: +1 each time it starts
  word counters + j     the number of reports of name j so far
`_qg_report` (the ring; on CUDA pinned host memory the device only writes, through its
mapping, so a report costs no read across the bus; runtime.history reads it), per name j
from `base(j)`: [count] [POWERS (pass, value) pairs] [latest (pass, value) pairs].
Report number w (0-based) goes into latest pair w % latest, and also into power pair
bit_length(w) when w is 0 or a power of two. The ring's count is published after a
system-wide fence (so a reader that reads the count first never sees an entry it does not
cover), for the first PUBLISH reports and then every PUBLISH-th only: the fence waits for the
writes to reach host memory, the dearest part of a report. A live reader allows for up to
PUBLISH reports written past the published count; once the call is over it reads the exact
count from the counters.
"""

from __future__ import annotations

import ast
import dataclasses

from .. import roles
from ..roles import role_of
from . import builtins as lang
from .parse import KernelSource, Param, Task
from .regions import DeviceLoop, RepeatLoop, control_regions, leaf_tasks

RING = "_qg_report"  # the implicit parameters of kernels that report: the ring
STATE = "_qg_report_state"  # and the counters
FENCE = "_qg_report_fence"  # each backend's fence (compiler: numba_adapter, cpu_math)
POWERS = 64  # pairs for reports 0, 1, 2, 4, ... 2^62
LATEST = 4096  # pairs for the latest reports
PUBLISH = 16  # the ring's count (and its fence) is stored for the first reports and every 16th


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
        """The ring's count word of name `k`; its pairs follow."""
        return k * self.stride

    @property
    def size(self) -> int:
        """Words of the ring."""
        return self.base(len(self.names))

    @property
    def state_size(self) -> int:
        """Words of the counters' array."""
        return self.counters + len(self.names)


def _reporting_tasks(src: KernelSource) -> list[Task]:
    return [t for t in src.tasks if any(_is_report(src, n) for s in t.body for n in ast.walk(s))]


def _reject_host_calls(src: KernelSource) -> None:
    """qgraph.host_call (a host node of a @qgraph.graph step) and a qgraph.distributed collective (a
    step's call between kernels) have no place in a kernel's device code, nor in the @qgraph.funcs it
    calls (followed, each once; the error names the line where the call is written)."""
    pending = [(src, [s for task in src.tasks for s in task.body])]
    followed: set[int] = set()
    while pending:
        owner, body = pending.pop()
        for node in (n for s in body for n in ast.walk(s) if isinstance(n, ast.Call)):
            callee = owner.resolve(node.func)
            kind = role_of(callee)
            if kind == roles.FUNC and id(callee) not in followed:
                followed.add(id(callee))
                pending.append((callee.source, callee.source.fn_def.body))
            if kind == roles.HOST_CALL:
                raise owner.error(
                    "qgraph.host_call runs Python on the host, between the kernel calls of a "
                    "@qgraph.graph step; a kernel's code runs on the device (and CUDA allows no host "
                    "node inside a device loop): get values out of a loop with qgraph.report(name, "
                    "value) and kernel.history, and call host_call in the step around the kernel",
                    node,
                )
            if kind == roles.COLLECTIVE:
                raise owner.error(
                    f"{ast.unparse(node.func)} is a collective between the ranks of a qgraph.distributed.Group, "
                    "not kernel code: call it in a @qgraph.graph step between kernel calls (a graph_while "
                    "step keeps it inside its device loop), with the kernel's work split around it",
                    node,
                )


def _is_report(src: KernelSource, node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and src.resolve(node.func) is lang.report


def with_reports(src: KernelSource, ring_source: str, state_source: str) -> tuple[KernelSource, ReportLayout | None]:
    """`src` with its report statements rewritten into ring stores and the two parameters (read by
    the binder through `ring_source` and `state_source`), and the layout; (src, None) without reports."""
    _reject_host_calls(src)
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
        task.body = [_located(f"{STATE}[{counter}] = {STATE}[{counter}] + 1.0", task.lineno)[0], *body]
        task.loaded = {**task.loaded, RING: task.lineno, STATE: task.lineno, FENCE: task.lineno}
    layout = ReportLayout(tuple(names), len(tasks))
    for task in tasks:  # the bases depend on the number of counters: filled in now
        task.body = [_Bases(layout).visit(stmt) for stmt in task.body]
    params = src.params + (Param(RING, None, False, ring_source), Param(STATE, None, False, state_source))
    return dataclasses.replace(src, params=params, reports=layout), layout


class _ReportRewriter(ast.NodeTransformer):
    """A report statement -> the ring stores (bases as `_qg_base_<k>` placeholders until the layout is known)."""

    def __init__(self, src: KernelSource, names: list[str], counter: int) -> None:
        self.src, self.names, self.counter = src, names, counter
        self.reports = 0  # in this task so far: each report's value gets a local of its own

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
        self.reports += 1
        value = ast.unparse(call.args[1])
        return _report_stores(self.names.index(name), self.counter, value, f"_qg_rv{self.reports}", node.lineno)

    def visit_Call(self, node: ast.Call):
        if _is_report(self.src, node):
            raise self.src.error(
                "qgraph.report is a statement of its own (it returns nothing): "
                'write `qgraph.report("name", value)` on its own line',
                node,
            )
        return self.generic_visit(node)


def _report_stores(k: int, counter: int, value: str, local: str, line: int) -> list[ast.stmt]:
    """The code of one report of name `k` (see the module docstring): reads only the counters."""
    ring, state, base = RING, STATE, f"_qg_base_{k}"
    code = f"""
{local} = ({value})
_qg_rw = int({state}[_qg_count_{k}])
_qg_rp = {state}[{counter}]
_qg_rs = {base} + {1 + 2 * POWERS} + 2 * (_qg_rw % _qg_latest)
{ring}[_qg_rs] = _qg_rp
{ring}[_qg_rs + 1] = {local}
if (_qg_rw & (_qg_rw - 1)) == 0:
    _qg_rk = 0
    _qg_rt = _qg_rw
    while _qg_rt > 0:
        _qg_rk = _qg_rk + 1
        _qg_rt = _qg_rt >> 1
    {ring}[{base} + 1 + 2 * _qg_rk] = _qg_rp
    {ring}[{base} + 2 + 2 * _qg_rk] = {local}
{state}[_qg_count_{k}] = _qg_rw + 1
if _qg_rw < {PUBLISH} or (_qg_rw + 1) % {PUBLISH} == 0:
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
        if node.id.startswith("_qg_count_"):
            k = int(node.id[len("_qg_count_") :])
            return ast.copy_location(ast.Constant(self.layout.counters + k), node)
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
