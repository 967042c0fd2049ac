"""Units whose code is the same up to names share one numba function.

An adjoint kernel replays its forward pass and copies checkpoints in and out in several places of
its region tree; each of those units was a numba compile of its own (about a second for a parallel
one on the CPU) although only the arrays it is given differ. Two unit functions are the same when
they are equal after renaming their parameters and locals in order of appearance: the runner then
calls the first one with each call's own arguments, and numba compiles it once per argument types.
"""

from __future__ import annotations

import ast

from ..front import ast_clone


def shared_units(defs: list[ast.FunctionDef]) -> dict[str, str]:
    """{name of each unit function in `defs`: name of the first one with the same code}."""
    first: dict[str, str] = {}
    return {d.name: first.setdefault(canonical_code(d), d.name) for d in defs}


def canonical_code(fdef: ast.FunctionDef) -> str:
    """`fdef`'s code with its name, parameters and locals renamed by order of appearance (names it
    only reads are globals, which keep theirs: the same name is the same object in one module)."""
    names = [a.arg for a in fdef.args.args]
    names += [n.id for n in _in_order(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    canonical = {name: f"_v{k}" for k, name in enumerate(dict.fromkeys(names))}
    clone = ast_clone.clone(fdef)
    clone.name = "_unit"
    for node in ast.walk(clone):
        if isinstance(node, ast.Name):
            node.id = canonical.get(node.id, node.id)
        elif isinstance(node, ast.arg):
            node.arg = canonical.get(node.arg, node.arg)
    return ast.dump(clone, annotate_fields=False, include_attributes=False)


def _in_order(node: ast.AST):
    """`node`'s descendants, depth-first in source order."""
    for child in ast.iter_child_nodes(node):
        yield child
        yield from _in_order(child)
