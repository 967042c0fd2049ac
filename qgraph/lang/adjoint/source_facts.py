"""What the three-address builder (lang.adjoint.three_address) asks of source statements:
literal numbers, the arrays a block stores to, and @qgraph.func bodies made single-exit."""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable

from ..front import ast_clone


def constant(node: ast.expr) -> ast.Constant | None:
    """A literal number (`-1` included) as one constant."""
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return ast.Constant(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def arrays_stored(body: list[ast.stmt], arrays: set[str]) -> set[str]:
    found = set()
    for n in (n for s in body for n in ast.walk(s)):
        if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name):
            found.add(n.value.id)
        elif isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Name) \
                and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("atomic_"):
            found.add(n.args[0].id)
    return found & arrays


def result_arity(fdef: ast.FunctionDef) -> int:
    """0 for a single value, else the length of the tuples `fdef` returns."""
    for n in ast.walk(fdef):
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple):
            return len(n.value.elts)
    return 0


def one_exit(stmts: list[ast.stmt], results: list[str], arity: int, error: Callable, fdef) -> list[ast.stmt]:
    """`stmts` with every return turned into assignments to `results` and the code after it
    moved into the branches that do not return (a return inside a loop is an error)."""
    out: list[ast.stmt] = []
    for k, s in enumerate(stmts):
        if isinstance(s, ast.Return):
            if s.value is None:
                raise error(f"{fdef.name} returns no value", s)
            values = s.value.elts if arity else [s.value]
            out += [ast.copy_location(ast.Assign([ast.Name(r, ast.Store())], v), s) for r, v in zip(results, values)]
            return out
        if isinstance(s, ast.If) and _returns(s):
            rest = stmts[k + 1:]
            s.body = one_exit(s.body + ast_clone.clone(rest), results, arity, error, fdef)
            s.orelse = one_exit(s.orelse + ast_clone.clone(rest), results, arity, error, fdef)
            out.append(s)
            return out
        if isinstance(s, (ast.For, ast.While)) and _returns(s):
            raise error(f"a return inside a loop in {fdef.name}", s)
        out.append(s)
    return out


def _returns(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(node))


def dump(atoms: tuple) -> str:
    return "|".join(ast.dump(a) for a in atoms)


def index_expr(atoms: tuple) -> ast.expr:
    return atoms[0] if len(atoms) == 1 else ast.Tuple(list(atoms), ast.Load())


def structured_jumps(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """A loop body (or a parallel task's body) with its own `continue`s turned into structure and
    nothing after its `break`s: the statements after an `if` that may jump move into the paths
    through it that do not, so the adjoint sees which statements a pass ran from the branches
    alone (a `break` stays, last on its path; jumps of nested loops are theirs)."""
    out: list[ast.stmt] = []
    for k, s in enumerate(stmts):
        if isinstance(s, ast.Continue):
            return out
        if isinstance(s, ast.Break):
            out.append(s)
            return out
        if isinstance(s, ast.If) and jumps(s):
            rest = stmts[k + 1:]
            s = copy.copy(s)  # the task's own statements stay as they are
            s.body = structured_jumps(s.body + ast_clone.clone(rest)) or [ast.copy_location(ast.Pass(), s)]
            s.orelse = structured_jumps(s.orelse + ast_clone.clone(rest))
            out.append(s)
            return out
        out.append(s)
    return out


def jumps(node: ast.AST) -> bool:
    """Whether `node` holds a break or continue of the loop around it (not of a loop inside it)."""
    if isinstance(node, (ast.Break, ast.Continue)):
        return True
    if isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.Lambda)):
        return False
    return any(jumps(child) for child in ast.iter_child_nodes(node))
