"""Which arrays a kernel writes, read from its source: the read-only check of NumPy arguments, the
tape's copy-on-write and the adjoint's facts all ask this one question."""

from __future__ import annotations

import ast

from .. import roles
from ..roles import role_of
from . import builtins as lang
from .parse import KernelSource


def written_params(src: KernelSource) -> dict[int, int]:
    """Parameter position -> first line where the kernel writes into that array (a store, an
    update or an atomic, or passing it to a @qgraph.func that does), for the read-only check
    of NumPy arguments. An adjoint kernel (lang.adjoint) writes its gradient arrays only."""
    if src.adjoint is not None:
        return {k: src.lineno for k, p in enumerate(src.params)
                if p.name.startswith("_qg_adj_") or p.name in src.adjoint.writes}
    nodes = [n for task in src.tasks for stmt in task.body for n in ast.walk(stmt)]
    return {src.param_names.index(name): line for name, line in written_names(src, nodes, frozenset()).items()
            if name in src.param_names}


def written_names(src: KernelSource, nodes: list[ast.AST], visiting: frozenset) -> dict[str, int]:
    """Name -> first line among `nodes` where the array it names is written, directly or by
    the @qgraph.funcs it is passed to (`visiting`: the funcs on the way, against recursion)."""
    atomics = tuple(lang.ATOMICS.values())
    found: dict[str, int] = {}
    for node in nodes:
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            targets = [t.value for t in targets if isinstance(t, ast.Subscript)]
        elif isinstance(node, ast.Call):
            callee = src.resolve(node.func)
            if callee in atomics:
                targets = node.args[:1]
            elif role_of(callee) == roles.FUNC and id(callee) not in visiting:
                targets = _arrays_a_func_writes(callee.source, node, visiting | {id(callee)})
        for target in targets:
            if isinstance(target, ast.Name):
                found.setdefault(target.id, node.lineno)
    return found


def _arrays_a_func_writes(func: KernelSource, call: ast.Call, visiting: frozenset) -> list[ast.expr]:
    """The arguments of `call` whose parameters the @qgraph.func `func` writes into."""
    written = written_names(func, list(ast.walk(func.fn_def)), visiting)
    names = func.param_names
    return [arg for k, arg in enumerate(call.args) if k < len(names) and names[k] in written] \
        + [kw.value for kw in call.keywords if kw.arg in written]
