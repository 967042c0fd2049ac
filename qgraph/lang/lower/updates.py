"""Updates of array elements inside parallel tasks: thread-private, reduction or atomic.

Inside a parallel task, `a[idx] += v` and `a[idx] -= v` and the `qgraph.atomic_*` calls are
classified by their index, at compile time:

- private: `idx` is exactly the task's own loop variables (optionally followed by integer
  constants, such as a vector element's component), so no other iteration touches the
  element: a plain load and store;
- reduction: `idx` uses none of the task's loop variables or locals (it is loop-invariant)
  and the old value is not used: each thread keeps a private partial, combined once per
  block (CUDA) or per thread (CPU) into the target;
- atomic: anything else (a scatter such as `hist[idx[i]] += w`): an atomic read-modify-write.

`*=`, `/=` and the other augmented operators on an element other iterations may touch have
no atomic form: they raise QgraphSyntaxError naming the line. The same classification runs
at decoration (to report errors early) and in each backend's lowering (on its own copy).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..front import ast_clone
from ..front import builtins as lang
from ..front.regions import Task

_AUG_OPS = {ast.Add: "add", ast.Sub: "sub"}
_ATOMIC_OPS = {"atomic_add": "add", "atomic_sub": "sub", "atomic_min": "min", "atomic_max": "max"}
_OP_SYMBOLS = {ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=", ast.Mod: "%=", ast.Pow: "**=",
               ast.BitAnd: "&=", ast.BitOr: "|=", ast.BitXor: "^=", ast.LShift: "<<=", ast.RShift: ">>=",
               ast.MatMult: "@="}


@dataclass(frozen=True)
class Reduction:
    """One reduction of a task: the partial `var` is combined into `target[index]` with `op`."""

    var: str
    target: str
    index: ast.expr
    op: str  # "add", "sub", "min" or "max"
    lineno: int


def _names(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def _updates(body: list[ast.stmt]):
    """(array name, index) of every `a[idx] op= v` and `qgraph.atomic_*(a, idx, v)` in `body`."""
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript) \
                and isinstance(node.target.value, ast.Name):
            yield node.target.value.id, node.target.slice
        elif isinstance(node, ast.Call) and len(node.args) == 3 and isinstance(node.args[0], ast.Name) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in _ATOMIC_OPS:
            yield node.args[0].id, node.args[1]


def _index_elements(index: ast.expr) -> list[ast.expr]:
    return list(index.elts) if isinstance(index, ast.Tuple) else [index]


class _Classifier:
    def __init__(self, task: Task, arrays: set[str], error) -> None:
        self.loop_vars = task.loop_vars
        self.task_locals = set(task.stored) | set(task.loop_vars)
        self.arrays = arrays
        self.error = error
        self.shared: set[str] = set()
        self.shared = {name for name, index in _updates(task.body) if self.kind(ast.Name(name), index) != "private"}

    def kind(self, target: ast.expr, index: ast.expr) -> str | None:
        """'private', 'reduction', 'atomic', or None when `target` is not an array parameter.
        An update at the loop's own index of an array that other updates of the task share is
        atomic too: `a[i] += v` beside `a[i + 1] += w` (a stencil's adjoint) races otherwise."""
        found = self._kind(target, index)
        if found == "private" and target.id in self.shared:
            return "atomic"
        return found

    def _kind(self, target: ast.expr, index: ast.expr) -> str | None:
        if not isinstance(target, ast.Name) or target.id not in self.arrays or target.id in self.task_locals:
            return None
        elements = _index_elements(index)
        n = len(self.loop_vars)
        lead = [e.id if isinstance(e, ast.Name) else None for e in elements[:n]]
        # the loop variables, then constants (a vector element's component): one iteration's own element
        if lead == list(self.loop_vars) and all(isinstance(e, ast.Constant) and type(e.value) is int
                                                for e in elements[n:]):
            return "private"
        if not (_names(index) & self.task_locals):
            return "reduction"
        return "atomic"


class UpdateRewriter(ast.NodeTransformer):
    """Rewrites a parallel task's element updates for one backend (see the module docstring).

    `resolve` maps a call's function expression to the object it names (to find the qgraph
    atomics as the user spelled them); `atomic_path(op)` gives the backend's spelling of an
    atomic; `partial_update(reduction, value)` the backend's statement accumulating `value`
    into the reduction's partial.
    """

    def __init__(self, task: Task, arrays: set[str], resolve, error, atomic_path, partial_update,
                 per_site: bool = False, reductions_atomic: bool = False) -> None:
        self.classifier = _Classifier(task, arrays, error)
        self.per_site = per_site  # a partial per update statement (numba: one reduction variable, one update)
        self.resolve = resolve
        self.error = error
        self.atomic_path = atomic_path
        self.partial_update = partial_update
        self.reductions: dict[tuple, Reduction] = {}
        self.atomics: list[tuple[str, str, int]] = []  # (target, op, line) of every atomic scatter
        # every reduction an atomic instead: numba's reduction analysis of an adjoint task with inner loops
        # follows a partial's value into their loop-carried copies and fails ("unexpected cycle in lookup()")
        self.reductions_atomic = reductions_atomic

    # ------------------------------------------------------------------ statements

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        target = node.target
        if not isinstance(target, ast.Subscript):
            return node
        kind = self.classifier.kind(target.value, target.slice)
        if kind is None or kind == "private":
            return node
        op = _AUG_OPS.get(type(node.op))
        if op is None:
            symbol = _OP_SYMBOLS.get(type(node.op), "this augmented assignment")
            raise self.error(
                f"'{ast.unparse(target)} {symbol} ...' in a parallel loop: other iterations may update the same "
                f"element at the same time and {symbol} has no atomic form; index the element with the loop "
                "variables, or compute the value in a local and store it with '='", node)
        return self._shared_update(kind, target.value.id, target.slice, op, node.value, node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        """`a[k] = f(a[k], ...)` where every iteration writes a[k] (k uses no loop variable or local): a
        read-modify-write race that drops updates silently (a max over a loop came out smaller), so an
        error naming the fix."""
        self.generic_visit(node)
        target = node.targets[0] if len(node.targets) == 1 else None
        # (an index of no loop variable and no local: every iteration's element; others are left alone)
        if not isinstance(target, ast.Subscript) or self.classifier.kind(target.value, target.slice) != "reduction":
            return node
        element = ast.unparse(target)
        if not any(isinstance(n, ast.Subscript) and ast.unparse(n) == element for n in ast.walk(node.value)):
            return node  # a plain store of a value (a flag many iterations set alike)
        array, index = ast.unparse(target.value), ast.unparse(target.slice)
        fix = "write it as an update: `{e} += v`, `{e} -= v`, or `qgraph.atomic_max({a}, {i}, v)` / `atomic_min`"
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("max", "min") \
                and len(value.args) == 2:
            other = next((ast.unparse(v) for v in value.args if ast.unparse(v) != element), "v")
            fix = f"write `qgraph.atomic_{value.func.id}({array}, {index}, {other})`, a {value.func.id} reduction"
        elif isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub)) \
                and ast.unparse(value.left) == element:
            fix = f"write `{element} {'+' if isinstance(value.op, ast.Add) else '-'}= {ast.unparse(value.right)}`, " \
                  "a reduction"
        raise self.error(
            f"'{element} = {ast.unparse(value)}' in a parallel loop reads and writes an element other iterations "
            f"write too: their updates would be lost (the result would vary from run to run); "
            + fix.format(e=element, a=array, i=index), node)

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        call = node.value
        if isinstance(call, ast.Call) and len(call.args) == 3 and not call.keywords:
            op = _ATOMIC_OPS.get(self._atomic_name(call.func))
            if op is not None:
                for arg in call.args:
                    self.visit(arg)
                target, index, value = call.args
                kind = self.classifier.kind(target, index)
                if kind == "private":
                    return _read_modify_write(target, index, op, value, node)
                if kind == "reduction":
                    return self._shared_update(kind, target.id, index, op, value, node)
                if kind == "atomic":
                    self.atomics.append((target.id, op, node.lineno))
                return node
        self.generic_visit(node)
        return node

    def _atomic_name(self, func: ast.expr) -> str | None:
        obj = self.resolve(func)
        for name, fn in lang.ATOMICS.items():
            if obj is fn:
                return name
        return None

    def _shared_update(self, kind: str, target: str, index: ast.expr, op: str, value: ast.expr,
                       at: ast.stmt) -> ast.stmt:
        if kind == "reduction" and self.reductions_atomic:
            kind = "atomic"
        if kind == "atomic":
            self.atomics.append((target, op, at.lineno))
            call = ast.Call(_dotted(self.atomic_path(op), at), [_load(target, at), index, value], [])
            return ast.copy_location(ast.Expr(ast.copy_location(call, at)), at)
        key = (target, ast.dump(index), op) + ((len(self.reductions),) if self.per_site else ())
        reduction = self.reductions.get(key)
        if reduction is None:
            reduction = Reduction(f"_qg_red{len(self.reductions)}", target, index, op, at.lineno)
            self.reductions[key] = reduction
        return self.partial_update(reduction, value, at)


def _load(name: str, at: ast.AST) -> ast.Name:
    return ast.copy_location(ast.Name(name, ast.Load()), at)


def _dotted(path: str, at: ast.AST) -> ast.expr:
    parts = path.split(".")
    expr: ast.expr = _load(parts[0], at)
    for attr in parts[1:]:
        expr = ast.copy_location(ast.Attribute(expr, attr, ast.Load()), at)
    return expr


def _read_modify_write(target: ast.Name, index: ast.expr, op: str, value: ast.expr, at: ast.stmt) -> ast.stmt:
    """`x[i] = x[i] + v` (or -, min, max) for an atomic call on a thread-private element."""
    current = ast.copy_location(ast.Subscript(_load(target.id, at), index, ast.Load()), at)
    if op in ("add", "sub"):
        new = ast.BinOp(current, ast.Add() if op == "add" else ast.Sub(), value)
    else:
        new = ast.Call(_load(op, at), [current, value], [])
    store = ast.copy_location(ast.Subscript(_load(target.id, at), index, ast.Store()), at)
    return ast.copy_location(ast.Assign([store], ast.copy_location(new, at)), at)


def combine(reduction: Reduction, at: ast.AST, partial: ast.expr | None = None) -> ast.stmt:
    """`target[index] = target[index] <op> partial`: folding a partial in (no other writer)."""
    partial = partial if partial is not None else _load(reduction.var, at)
    return _read_modify_write(_load(reduction.target, at), reduction.index, reduction.op, partial, at)


def task_updates(src, task: Task) -> tuple[list[Reduction], list[tuple[str, str, int]]]:
    """A parallel task's reductions and atomic scatters (errors name the line)."""
    if not task.parallel:
        return [], []
    rewriter = UpdateRewriter(task, set(src.param_names), src.resolve, src.error, lambda op: f"atomic_{op}",
                              lambda reduction, value, at: ast.Pass())
    for stmt in task.body:
        rewriter.visit(ast_clone.clone(stmt))
    return list(rewriter.reductions.values()), rewriter.atomics


def has_inner_loops(task: Task) -> bool:
    """Whether a task's body holds a loop of its own."""
    return any(isinstance(n, (ast.For, ast.While)) for stmt in task.body for n in ast.walk(stmt))
