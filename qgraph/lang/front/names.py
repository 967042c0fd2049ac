"""Names in kernel source: what a name or dotted name refers to when the kernel is compiled,
and which names a block stores and loads."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator, Mapping
from types import CellType

UNRESOLVED = object()


class Closure(Mapping):
    """The variables a function reads from its enclosing function, read live from its cells:
    compiling sees what they hold then (as Python would), and a cell still empty at
    decoration (a recursive helper's own name) is simply not there yet."""

    def __init__(self, fn) -> None:
        self._cells: dict[str, CellType] = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))

    def cell(self, name: str) -> CellType:
        return self._cells[name]

    def __getitem__(self, name: str) -> object:
        try:
            return self._cells[name].cell_contents
        except ValueError:  # an empty cell: assigned later in the enclosing function, or deleted
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._cells if name in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        try:
            self[name]
        except (KeyError, TypeError):
            return False
        return True


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
