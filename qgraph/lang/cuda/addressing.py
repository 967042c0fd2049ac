"""32-bit element offsets for 2-D and 3-D arrays on CUDA, as `int` index math gives in C++.

numba addresses `u[i, j]` as `data + (i * shape[1] + j) * 4` in 64-bit arithmetic: a 64-bit
multiply per row (three instructions in SASS) and every offset held in a register pair,
which doubled a stencil's instructions and registers against the same kernel in CUDA C++.
For C-contiguous arrays below 2**31 elements (the argument kind says so: larger ones are
a key text of their own) subscripts become `_qg_ld2/3` and `_qg_st2/3`, which compute the
offset with one 32-bit multiply-add (compiler.numba_addressing).
"""

from __future__ import annotations

import ast

from ..front.parse import collect_names
from ..lower.lowering import call, name_node


def _pure(expr: ast.expr) -> bool:
    """Names, constants and arithmetic on them: safe to evaluate twice (for `a[i, j] += v`)."""
    return all(isinstance(n, (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop,
                              ast.expr_context)) for n in ast.walk(expr))


def loop_floors(task) -> dict[str, int]:
    """The parallel loop variables of `task` that its body never assigns, with the least value
    each takes: a literal start (0 without one) and no step or a positive literal one."""
    floors = {}
    assigned = collect_names(task.body).stored  # task.stored counts the loop variables themselves
    for var, dim in zip(task.loop_vars, task.dims):
        start = 0 if dim.start is None else _literal(dim.start)
        step = 1 if dim.step is None else _literal(dim.step)
        if start is not None and start >= 0 and step is not None and step > 0 and var not in assigned:
            floors[var] = start
    return floors


def _literal(expr: ast.expr) -> int | None:
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        value = _literal(expr.operand)
        return None if value is None else -value
    return None


class Addressing32(ast.NodeTransformer):
    """Subscripts of the arrays in `arrays` (name -> ndim) with a full index as offset calls.

    A subscript whose every index is a loop variable of `floors` plus or minus a literal that
    keeps it non-negative (`u[i - 1, j, k + 1]`, no wraparound possible), or a non-negative
    literal (a vector's component, `x[i, 2]`), becomes `_qg_ldd/_qg_std`: all such neighbours
    of one array share the offset of `i, j, k`, as `c - plane`, `c + 1` do in hand-written
    CUDA C++ (a 3-D stencil's addressing halves; a vec3 update's loads are not repeated after
    its stores, since LLVM sees the components' addresses differ)."""

    def __init__(self, arrays: dict[str, int], floors: dict[str, int] | None = None) -> None:
        self.arrays = arrays
        self.floors = floors or {}

    def _shifted(self, elts: list[ast.expr]) -> tuple[list[ast.expr], list[ast.expr]] | None:
        """(bases, literal deltas) when every index is a loop variable of `floors` plus a delta
        that keeps it non-negative; else None."""
        bases, deltas = [], []
        for e in elts:
            constant = _literal(e)
            if constant is not None and constant >= 0:  # a vector's component: x[i, 1] is x[i, 0] + 1
                bases.append(ast.copy_location(ast.Constant(0), e))
                deltas.append(ast.copy_location(ast.Constant(constant), e))
                continue
            delta = 0
            if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)) and _literal(e.right) is not None:
                delta = _literal(e.right) * (1 if isinstance(e.op, ast.Add) else -1)
                e = e.left
            if not isinstance(e, ast.Name) or e.id not in self.floors or self.floors[e.id] + delta < 0:
                return None
            bases.append(name_node(e.id, e))
            deltas.append(ast.copy_location(ast.Constant(delta), e))
        return bases, deltas

    def _access(self, kind: str, name: str, elts: list[ast.expr], at: ast.AST, value=None) -> ast.Call:
        """`_qg_ld/_qg_st` (or their shifted forms) of `name[elts]`."""
        extra = [] if value is None else [value]
        shifted = self._shifted(elts)
        if shifted is not None:
            return call(f"_qg_{kind}d{len(elts)}", [name_node(name, at)] + shifted[0] + shifted[1] + extra, at)
        return call(f"_qg_{kind}{len(elts)}", [name_node(name, at)] + elts + extra, at)

    def _indices(self, node: ast.expr) -> tuple[str, list[ast.expr]] | None:
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            return None
        ndim = self.arrays.get(node.value.id)
        index = node.slice
        if ndim is None or not isinstance(index, ast.Tuple) or len(index.elts) != ndim:
            return None
        if any(isinstance(e, (ast.Slice, ast.Starred)) for e in index.elts):
            return None
        return node.value.id, index.elts

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        found = self._indices(node)
        if found is None or not isinstance(node.ctx, ast.Load):
            return node
        name, elts = found
        return self._access("ld", name, elts, node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if len(node.targets) != 1:
            return self.generic_visit(node)
        target = node.targets[0]
        found = self._indices(target)
        if found is None:
            return self.generic_visit(node)
        name, elts = found
        elts = [self.visit(e) for e in elts]
        value = self.visit(node.value)
        return ast.copy_location(ast.Expr(self._access("st", name, elts, node, value)), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        found = self._indices(node.target)
        if found is None or not all(_pure(e) for e in found[1]):
            return self.generic_visit(node)
        name, elts = found
        elts = [self.visit(e) for e in elts]
        old = self._access("ld", name, elts, node)
        new = ast.copy_location(ast.BinOp(old, node.op, self.visit(node.value)), node)
        return ast.copy_location(ast.Expr(self._access("st", name, elts, node, new)), node)
