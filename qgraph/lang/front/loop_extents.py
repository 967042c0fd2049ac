"""The extents a kernel's own loop bounds make certain: where a loop runs `i` over `range(a.shape[k])`
and a statement every iteration runs indexes `b[i]` on axis m, `b.shape[m] >= a.shape[k]` must hold,
or the access is out of bounds (a crash without debug mode). The launchers check these once per call
(backends/extent_checks.py) at the cost of a comparison each.

Only what is certain is kept, decided on the source as written (type-independent): a loop from a
literal start to `a.shape[k]` or `len(a)` plus a literal, step 1, its variable never assigned in the
body; an index that is the variable plus a literal; an access no `if`, `and`/`or`, conditional
expression, earlier `continue` or `break`, or device branch can skip. Each rule keeps the conditions
under which its access runs at all (the loops around it not empty, a repeat count above 0), which
the launcher evaluates only when the comparison fails. Anything else is left to debug mode.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from . import builtins as lang
from .names import collect_names
from .parse import KernelSource
from .regions import DeviceLoop, RepeatLoop, Sequence, Task


@dataclass(frozen=True)
class LoopExtent:
    """A loop variable running from `start` up to `extent.shape[axis] + offset` (exclusive), step 1."""

    extent: str
    axis: int
    offset: int
    start: int
    lineno: int
    bound: str  # the stop as written, for messages


@dataclass(frozen=True)
class CertainExtent:
    """`array.shape[axis] >= extent.shape[extent_axis] + offset` whenever `conditions` hold: `text`
    (line `lineno`) reaches index `extent.shape[extent_axis] + offset - 1` through the loop `loop`.

    `conditions`: ("extent", name, axis, offset, start): that shape plus offset exceeds start (a loop
    around it runs); ("count", name, start): the scalar parameter exceeds start; ("task", index): the
    parallel task's iteration count (from the host bounds function) is above 0."""

    array: str
    axis: int
    extent: str
    extent_axis: int
    offset: int
    lineno: int
    access: str  # "reads", "writes", "updates"
    text: str
    loop: LoopExtent
    conditions: tuple


def certain_extents(src: KernelSource) -> tuple[CertainExtent, ...]:
    """Every extent rule of a kernel's tasks that certainly run (no adjoint kernel: it has none)."""
    if src.body is None or src.adjoint is not None:
        return ()
    found: list[CertainExtent] = []
    _regions(src, src.body, (), found)
    unique = dict.fromkeys(found)  # the first access of each rule, in source order
    return tuple(unique)


def _regions(src: KernelSource, region, conditions: tuple, found: list) -> None:
    """The tasks of `region` that run whenever the kernel does (given `conditions`)."""
    params = set(src.param_names)
    if isinstance(region, Task):
        _task(src, region, conditions, found)
    elif isinstance(region, Sequence):
        for child in region.children:
            _regions(src, child, conditions, found)
    elif isinstance(region, DeviceLoop) and not region.test_first:  # a do-while: its body runs once at least
        _regions(src, region.body, conditions, found)
    elif isinstance(region, RepeatLoop) and region.count in params:
        _regions(src, region.body, conditions + (("count", region.count, 0),), found)
    # a while loop tested first, or a branch: its body may not run


def _task(src: KernelSource, task: Task, conditions: tuple, found: list) -> None:
    accesses = CertainAccesses(src, task, found)
    stored = collect_names(task.body).stored
    if task.parallel:
        conditions += (("task", task.index),)
        for var, dim in zip(task.loop_vars, task.dims):
            loop = accesses.loop_extent(dim.start, dim.stop, dim.step, task.lineno)
            if loop is not None and var not in stored:
                accesses.loops[var] = loop
    accesses.conditions = conditions
    accesses.block(task.body)


class CertainAccesses(ast.NodeVisitor):
    """Visits the statements of a task that run in every iteration of its loops (and the parts of
    expressions always evaluated), adding a CertainExtent to `found` for each array index that is a
    bounded loop variable plus a literal."""

    def __init__(self, src: KernelSource, task: Task, found: list) -> None:
        self.src = src
        self.params = set(src.param_names) - collect_names(task.body).stored  # a parameter rebound is a local
        self.found = found
        self.loops: dict[str, LoopExtent] = {}
        self.conditions: tuple = ()
        self.updated: ast.AST | None = None

    # ------------------------------------------------------------------ statements

    def block(self, stmts: list[ast.stmt]) -> None:
        """The statements in order, up to one that may end the iteration (later ones may not run)."""
        for stmt in stmts:
            self.visit(stmt)
            if _jumps(stmt):
                return

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)

    def visit_While(self, node: ast.While) -> None:
        self.visit(node.test)

    def visit_Match(self, node) -> None:
        self.visit(node.subject)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.updated = node.target
        self.generic_visit(node)
        self.updated = None

    def visit_For(self, node: ast.For) -> None:
        """A nested loop: its body runs in full when it is a range loop without a break of its own."""
        self.visit(node.iter)
        it = node.iter
        if not (
            isinstance(node.target, ast.Name)
            and isinstance(it, ast.Call)
            and not it.keywords
            and 1 <= len(it.args) <= 3
            and self.src.resolve(it.func) is range
        ) or any(isinstance(n, ast.Break) for n in _loop_level(node.body)):
            return
        args = it.args
        start = args[0] if len(args) > 1 else ast.Constant(0)
        stop = args[1] if len(args) > 1 else args[0]
        step = args[2] if len(args) == 3 else None
        var, saved = node.target.id, (dict(self.loops), self.conditions)
        loop = self.loop_extent(start, stop, step, node.lineno)
        if loop is not None:
            condition = ("extent", loop.extent, loop.axis, loop.offset, loop.start)
        elif step is None and _int(start) is not None and isinstance(stop, ast.Name) and stop.id in self.params:
            condition = ("count", stop.id, _int(start))
        elif step is None and _int(start) is not None and _int(stop) is not None and _int(stop) > _int(start):
            condition = None
        else:
            return
        self.loops.pop(var, None)
        if loop is not None and var not in collect_names(node.body).stored:
            self.loops[var] = loop
        if condition is not None:
            self.conditions += (condition,)
        self.block(node.body)
        self.loops, self.conditions = saved

    # ------------------------------------------------------------------ expressions

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.visit(node.test)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self.visit(node.values[0])

    def visit_Lambda(self, node) -> None:
        return None

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in self.params:
            access = "updates" if node is self.updated else "writes" if isinstance(node.ctx, ast.Store) else "reads"
            self._index(node.value.id, node.slice, node, access)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        callee = self.src.resolve(node.func)
        if (
            callee in lang.ATOMICS.values()
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in self.params
        ):
            self._index(node.args[0].id, node.args[1], node, "updates")
        self.generic_visit(node)

    def _index(self, array: str, index: ast.expr, node: ast.AST, access: str) -> None:
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        text = f"{array}[{', '.join(ast.unparse(p) for p in parts)}]"
        for axis, part in enumerate(parts):
            var, shift = _shifted(part)
            loop = self.loops.get(var)
            if loop is None or shift is None:
                continue
            offset = loop.offset + shift
            if array == loop.extent and axis == loop.axis and offset <= 0:
                continue  # within the array whose extent bounds the loop: always true
            self.found.append(
                CertainExtent(
                    array, axis, loop.extent, loop.axis, offset, node.lineno, access, text, loop, self.conditions
                )
            )

    # ------------------------------------------------------------------ bounds

    def loop_extent(self, start: ast.expr, stop: ast.expr, step: ast.expr | None, lineno: int) -> LoopExtent | None:
        """The loop's LoopExtent when it runs from a literal by 1 up to an array extent plus a literal."""
        first = _int(start)
        if first is None or (step is not None and _int(step) != 1):
            return None
        extent = self._extent(stop)
        if extent is None:
            return None
        name, axis, offset = extent
        return LoopExtent(name, axis, offset, first, lineno, ast.unparse(stop))

    def _extent(self, expr: ast.expr) -> tuple[str, int, int] | None:
        """(array, axis, offset) of `a.shape[k]`, `len(a)`, either plus or minus a literal."""
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
            right, left = _int(expr.right), _int(expr.left)
            if right is not None:
                inner = self._extent(expr.left)
                shift = right if isinstance(expr.op, ast.Add) else -right
            elif left is not None and isinstance(expr.op, ast.Add):
                inner, shift = self._extent(expr.right), left
            else:
                return None
            return None if inner is None else (inner[0], inner[1], inner[2] + shift)
        if (
            isinstance(expr, ast.Subscript)
            and isinstance(expr.value, ast.Attribute)
            and expr.value.attr == "shape"
            and isinstance(expr.value.value, ast.Name)
            and expr.value.value.id in self.params
        ):
            axis = _int(expr.slice)
            return (expr.value.value.id, axis, 0) if axis is not None and axis >= 0 else None
        if (
            isinstance(expr, ast.Call)
            and len(expr.args) == 1
            and not expr.keywords
            and isinstance(expr.args[0], ast.Name)
            and expr.args[0].id in self.params
            and self.src.resolve(expr.func) is len
        ):
            return expr.args[0].id, 0, 0
        return None


def _int(node: ast.expr) -> int | None:
    """The value of an int literal (`-1` included), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int(node.operand)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _shifted(index: ast.expr) -> tuple[str | None, int | None]:
    """(variable, literal) of an index `i`, `i + 2`, `i - 1`, `1 + i`; (None, None) otherwise."""
    if isinstance(index, ast.Name):
        return index.id, 0
    if isinstance(index, ast.BinOp) and isinstance(index.op, (ast.Add, ast.Sub)):
        if isinstance(index.left, ast.Name) and _int(index.right) is not None:
            return index.left.id, _int(index.right) * (1 if isinstance(index.op, ast.Add) else -1)
        if isinstance(index.right, ast.Name) and _int(index.left) is not None and isinstance(index.op, ast.Add):
            return index.right.id, _int(index.left)
    return None, None


def _loop_level(body: list[ast.stmt]):
    """The statements of `body` and of the blocks in it, not those of loops nested in it."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.For, ast.While)):
            stack.extend(node.orelse)  # the else block belongs to the outer level
        elif isinstance(node, ast.stmt):
            stack.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt))
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.match_case):
                    stack.extend(child.body)


def _jumps(stmt: ast.stmt) -> bool:
    """Whether `stmt` may leave the iteration it is in (a continue or break of this loop, a return)."""
    return any(isinstance(n, (ast.Continue, ast.Break, ast.Return)) for n in _loop_level([stmt]))
