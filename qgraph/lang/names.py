"""Names in kernel source: what a name or dotted name refers to when the kernel is compiled,
and which names a block stores and loads."""

from __future__ import annotations

import ast
import builtins

UNRESOLVED = object()


def resolve_static(expr: ast.expr, globals_: dict, closure: dict) -> object:
    if isinstance(expr, ast.Name):
        if expr.id in closure:
            return closure[expr.id]
        if expr.id in globals_:
            return globals_[expr.id]
        return getattr(builtins, expr.id, UNRESOLVED)
    if isinstance(expr, ast.Attribute):
        base = resolve_static(expr.value, globals_, closure)
        if base is UNRESOLVED:
            return UNRESOLVED
        return getattr(base, expr.attr, UNRESOLVED)
    return UNRESOLVED


class _NameCollector(ast.NodeVisitor):
    """Names a block stores and loads (with the first line each is read)."""

    def __init__(self) -> None:
        self.stored: set[str] = set()
        self.loaded: dict[str, int] = {}

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.stored.add(node.id)
        else:
            self.loaded.setdefault(node.id, node.lineno)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self.loaded.setdefault(node.target.id, node.lineno)
        self.generic_visit(node)


def collect_names(nodes) -> _NameCollector:
    collector = _NameCollector()
    for node in nodes:
        collector.visit(node)
    return collector
