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

from .lowering import call, name_node


def _pure(expr: ast.expr) -> bool:
    """Names, constants and arithmetic on them: safe to evaluate twice (for `a[i, j] += v`)."""
    return all(isinstance(n, (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop,
                              ast.expr_context)) for n in ast.walk(expr))


class Addressing32(ast.NodeTransformer):
    """Subscripts of the arrays in `arrays` (name -> ndim) with a full index as offset calls."""

    def __init__(self, arrays: dict[str, int]) -> None:
        self.arrays = arrays

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
        return call(f"_qg_ld{len(elts)}", [name_node(name, node)] + elts, node)

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
        return ast.copy_location(ast.Expr(call(f"_qg_st{len(elts)}", [name_node(name, node)] + elts + [value],
                                               node)), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        found = self._indices(node.target)
        if found is None or not all(_pure(e) for e in found[1]):
            return self.generic_visit(node)
        name, elts = found
        elts = [self.visit(e) for e in elts]
        old = call(f"_qg_ld{len(elts)}", [name_node(name, node)] + elts, node)
        new = ast.copy_location(ast.BinOp(old, node.op, self.visit(node.value)), node)
        return ast.copy_location(ast.Expr(call(f"_qg_st{len(elts)}", [name_node(name, node)] + elts + [new],
                                               node)), node)
