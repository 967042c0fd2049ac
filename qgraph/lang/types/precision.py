"""Weak literals: Python numbers take the precision of what they combine with (NEP 50).

numba types `x[i] * 0.5` as float64 when `x` is float32, and `i * x[i]` too (int64 and
float32 make float64), so a float32 kernel silently computes in float64. This pass types a
task's statements for one signature and inserts float32 casts where the rules below say
the arithmetic is float32, before numba sees the code:

- Python int and float literals, `float(...)`, `int(...)`, `i / n` of ints, Python scalar
  globals and parameters passed as plain Python numbers are *weak*: combined with a
  float32 value they become float32, with a float64 value float64.
- An integer combined with a float takes the float's precision (float32 stays float32).
- float32 with float64 gives float64; explicit casts (`np.float32(v)`) are left alone.
- Where nothing decides (all operands weak or integer), floats take the kernel's
  `default_float` (float64 unless set), as do weak locals.

The types come from lang.types.weak_types (a lattice: integer < weak float < float32 < float64, and
unknown, around which nothing is rewritten); `@qgraph.func` calls are typed by lang.types.func_precision."""
from __future__ import annotations

import ast

from ..front import ast_clone
from ..front import builtins as lang
from ..front.parse import KernelSource
from ..lower.math_calls import FLOAT_MATH, FLOAT_NUMPY, SAME_AS_ARGS
from .weak_types import (
    F32,
    F64,
    FLOATS,
    INT,
    RESULTS,
    UNKNOWN,
    WEAK,
    Typer,
    infer_locals,
    is_pair,
    is_results,
    join,
    negative_int_power,
)

F32_CAST = "_qg_f32"


class _Rewriter:
    """Inserts the float32 casts the rules call for (see the module docstring)."""

    def __init__(self, typer: Typer, default: str, result: object = UNKNOWN) -> None:
        self.t = typer
        self.default = default  # F32 or F64
        self.result = result  # a helper's result type: its return values are made that type

    def cast(self, node: ast.expr) -> ast.expr:
        return ast.copy_location(ast.Call(ast.Name(F32_CAST, ast.Load()), [node], []), node)

    def to(self, node: ast.expr, target: str) -> ast.expr:
        """`node`, computing in `target` (F32/F64) wherever it is weak or integer."""
        t = self.t.of(node)
        if target != F32 or t not in (INT, WEAK):
            return self.expr(node)
        if t == INT:
            return self.cast(self.expr(node))
        if isinstance(node, ast.BinOp):
            node.left = self.to(node.left, target)
            if isinstance(node.op, ast.Pow) and self.t.of(node.right) == INT:
                node.right = self.expr(node.right)
            else:
                node.right = self.to(node.right, target)
            return node
        if isinstance(node, ast.UnaryOp):
            node.operand = self.to(node.operand, target)
            return node
        if isinstance(node, ast.IfExp):
            node.test = self.expr(node.test)
            node.body, node.orelse = self.to(node.body, target), self.to(node.orelse, target)
            return node
        if isinstance(node, ast.Call) and not node.keywords:
            fn = self.t.callee(node)
            if fn is float and len(node.args) == 1:
                arg = node.args[0]
                return self.to(arg, target) if self.t.of(arg) in (INT, WEAK) else self.cast(self.expr(arg))
            if fn in FLOAT_MATH or fn in FLOAT_NUMPY or fn in SAME_AS_ARGS:
                node.args = [self.to(a, target) for a in node.args]
                return node
        return self.cast(self.plain(node, t))

    def expr(self, node: ast.expr) -> ast.expr:
        """`node` on its own: children are rewritten in the context their operation gives."""
        t = self.t.of(node)
        if t == WEAK and self.default == F32:
            return self.to(node, F32)
        return self.plain(node, t)

    def plain(self, node: ast.expr, t) -> ast.expr:
        """`node` in its own type `t`; its children in the contexts `node` gives them."""
        if t == WEAK and negative_int_power(node, self.t):  # float64 here; `to` casts the base for float32
            node.left = ast.copy_location(ast.Call(ast.Name("float", ast.Load()), [self.expr(node.left)], []), node)
            return node
        if isinstance(node, ast.BinOp) and t in FLOATS:
            node.left = self.to(node.left, t)
            pow_int = isinstance(node.op, ast.Pow) and self.t.of(node.right) == INT
            node.right = self.expr(node.right) if pow_int else self.to(node.right, t)
            return node
        if isinstance(node, ast.Compare):
            common = self.t.of(node.left)
            for c in node.comparators:
                common = join(common, self.t.of(c))
            if common == WEAK:
                common = self.default
            if common in FLOATS:
                node.left = self.to(node.left, common)
                node.comparators = [self.to(c, common) for c in node.comparators]
                return node
        if isinstance(node, ast.IfExp) and t in FLOATS:
            node.test = self.expr(node.test)
            node.body, node.orelse = self.to(node.body, t), self.to(node.orelse, t)
            return node
        if isinstance(node, ast.Call):
            return self.call(node, t)
        for field, value in ast.iter_fields(node):
            if isinstance(value, ast.expr):
                setattr(node, field, self.expr(value))
            elif isinstance(value, list):
                setattr(node, field, [self.expr(v) if isinstance(v, ast.expr) else v for v in value])
        return node

    def call(self, node: ast.Call, t) -> ast.expr:
        fn = self.t.callee(node)
        if t in FLOATS and (fn in FLOAT_MATH or fn in FLOAT_NUMPY or fn in SAME_AS_ARGS):
            node.args = [self.to(a, t) for a in node.args]
        elif fn in lang.ATOMICS.values() and len(node.args) == 3:
            element = ast.Subscript(node.args[0], node.args[1], ast.Load())
            target = self.t.of(element)
            self.stored(element, self.t.of(node.args[2]), node)
            node.args = [self.expr(node.args[0]), self.expr(node.args[1]), self.value(node.args[2], target)]
        else:
            node.args = [self.expr(a) for a in node.args]
        for kw in node.keywords:
            kw.value = self.expr(kw.value)
        return node

    def value(self, node: ast.expr, target) -> ast.expr:
        """A value stored into (or combined with) something of type `target`."""
        if target == WEAK:
            target = self.default
        return self.to(node, target) if target in FLOATS else self.expr(node)

    def stmts(self, body: list[ast.stmt]) -> None:
        for node in body:
            self.stmt(node)

    def stored(self, target: ast.expr, value, node: ast.AST) -> None:
        """A float value stored into an element of an integer (or bool) array is an error, as NumPy's
        `same_kind` casting has it: the fraction would go silently. Within a kind (float64 into float32,
        int64 into int32) and integer into float are stores as written."""
        if value not in (WEAK, F32, F64) or not isinstance(target, ast.Subscript) or self.t.of(target) != INT:
            return
        array = self.t.of(target.value)
        dtype = array[1].name if isinstance(array, tuple) and array[0] == "a" else "integers"
        name = ast.unparse(target.value).replace("__", ".")  # a struct's field as written (lang.flat)
        src = self.t.src
        what = f"kernel {src.name}" if src.body is not None else f"@qgraph.func {src.name}"
        hint = "; `//=` divides integers" if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div) else ""
        shown = {WEAK: "float", F32: "float32", F64: "float64"}[value]
        raise src.error(f"{what}: a {shown} value is stored into '{name}', an array of {dtype}, which would drop "
                        f"its fraction silently (qgraph follows NumPy's same_kind casting: no float to integer "
                        f"or bool). Convert it where that is meant: {_conversions(dtype)}{hint}; "
                        f"or make '{name}' a float array", node)

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if len(node.targets) == 1 and is_pair(target, node.value):
                    for t, v in zip(target.elts, node.value.elts):
                        self.stored(t, self.t.of(v), node)
                else:
                    self.stored(target, self.t.of(node.value), node)
            if len(node.targets) == 1 and is_pair(node.targets[0], node.value):
                node.value.elts = [self.value(v, self.target_type(tg))
                                   for tg, v in zip(node.targets[0].elts, node.value.elts)]
            elif len(node.targets) == 1:
                node.value = self.value(node.value, self.target_type(node.targets[0]))
            else:
                node.value = self.expr(node.value)
            for target in node.targets:
                self.target(target)
        elif isinstance(node, ast.AugAssign):
            self.stored(node.target, self.t.binop(self.t.of(node.target), node.op, self.t.of(node.value)), node)
            node.value = self.value(node.value, self.target_type(node.target))
            self.target(node.target)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.stored(node.target, self.t.of(node.value), node)
            node.value = self.value(node.value, self.target_type(node.target))
        elif isinstance(node, (ast.For, ast.While, ast.If)):
            if isinstance(node, ast.For):
                node.iter = self.expr(node.iter)
            else:
                node.test = self.expr(node.test)
            self.stmts(node.body + node.orelse)
        elif isinstance(node, ast.Return) and node.value is not None:
            node.value = self.returned(node.value)
        elif isinstance(node, ast.Expr):
            node.value = self.expr(node.value)

    def returned(self, value: ast.expr) -> ast.expr:
        """A helper's return value, of its result type (every return the same, as callers type it)."""
        result = self.result
        if isinstance(value, ast.Tuple) and is_results(result, len(value.elts)):
            value.elts = [self.value(v, t) for v, t in zip(value.elts, result[1:])]
            return value
        return self.value(value, result) if result in (INT, WEAK) + FLOATS else self.expr(value)

    def target_type(self, target: ast.expr) -> object:
        if isinstance(target, ast.Name):
            return self.t.env.get(target.id, UNKNOWN)
        return self.t.of(target) if isinstance(target, ast.Subscript) else UNKNOWN

    def target(self, target: ast.expr) -> None:
        if isinstance(target, ast.Subscript):  # the index expressions, on their own
            target.slice = self.expr(target.slice)


def _conversions(dtype: str) -> str:
    """The explicit conversions of a float to an element of `dtype` a kernel can write."""
    if dtype == "bool":
        return "bool(...) or a comparison (x > 0.5)"
    short = dtype.replace("uint", "u").replace("int", "i") if dtype != "integers" else "i64"
    return f"int(...) rounds toward zero, math.floor(...) and round(...) as named, qgraph.{short}(...) converts"


def weak_typed(src: KernelSource, body: list[ast.stmt], params: dict, loop_vars: tuple[str, ...],
               local_names: set[str], default_float: str = F64, funcs=None, result: object = UNKNOWN) -> list[ast.stmt]:
    """Copies of `body` with the casts weak literals need (see the module docstring).

    `params` maps parameter names to their types (`param_type`), `default_float` is F32 or
    F64. `funcs` (a lang.types.func_precision.FuncPrecision) types helper calls and points each at
    the helper's instance for its argument types; `result`: a helper body's result type.
    """
    body = [ast_clone.clone(s) for s in body]
    typer = _typed(src, body, params, loop_vars, local_names, funcs)
    if funcs is not None:
        funcs.instantiate(typer, body)
    _Rewriter(typer, default_float, result).stmts(body)
    for stmt in body:
        ast.fix_missing_locations(stmt)
    return body


def result_type(src: KernelSource, body: list[ast.stmt], params: dict, local_names: set[str], funcs) -> object:
    """The type of what a helper's `body` returns with parameters of `params`' types: the join
    of its return values (per position for tuples), UNKNOWN where they disagree or are missing."""
    typer = _typed(src, body, params, (), local_names, funcs)
    found = []
    for node in (n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Return)):
        value = node.value
        if isinstance(value, ast.Tuple):
            found.append((RESULTS,) + tuple(typer.of(v) for v in value.elts))
        else:
            found.append(UNKNOWN if value is None else typer.of(value))
    out = found[0] if found else UNKNOWN
    for t in found[1:]:
        if is_results(out) and is_results(t, len(out) - 1):
            out = (RESULTS,) + tuple(join(a, b) for a, b in zip(out[1:], t[1:]))
        elif out != t:
            out = UNKNOWN if isinstance(out, tuple) or isinstance(t, tuple) else join(out, t)
    return UNKNOWN if out is None else out


def _typed(src: KernelSource, body: list[ast.stmt], params: dict, loop_vars: tuple[str, ...],
           local_names: set[str], funcs) -> Typer:
    env = dict(params)
    for v in loop_vars:
        env[v] = INT
    typer = Typer(src, env, funcs)
    infer_locals(typer, body, set(local_names) - set(params) - set(loop_vars))
    return typer
