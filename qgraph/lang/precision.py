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

Types form a lattice: "i" (integer or bool) < "w" (weak float) < "f32" < "f64"; "?" is unknown
(tuples, helper results, arrays of other shapes): nothing around it is rewritten."""

from __future__ import annotations

import ast
import copy
import math

import numpy as np

from . import builtins as lang
from .frontend import UNRESOLVED, KernelSource
from .math_calls import ROUNDING

F32_CAST = "_qg_f32"
INT, WEAK, F32, F64, UNKNOWN = "i", "w", "f32", "f64", "?"
_ORDER = {INT: 0, WEAK: 1, F32: 2, F64: 3}
FLOATS = (F32, F64)

# math/NumPy functions whose float result has the precision of their arguments
_FLOAT_MATH = frozenset(getattr(math, n) for n in (
    "sqrt", "exp", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "hypot", "pow", "fabs", "copysign", "erf",
    "erfc", "gamma", "lgamma", "degrees", "radians", "fmod", "remainder"))
_FLOAT_NUMPY = frozenset(getattr(np, n) for n in (
    "sqrt", "exp", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "arcsin", "arccos",
    "arctan", "arctan2", "sinh", "cosh", "tanh", "hypot", "fabs", "abs", "absolute", "floor", "ceil", "trunc",
    "minimum", "maximum", "power", "copysign", "fmin", "fmax"))
_INT_RESULT = frozenset((math.floor, math.ceil, math.trunc, math.isnan, math.isinf, math.isfinite, int, bool,
                         len, np.isnan, np.isinf, np.isfinite))
_SAME_AS_ARGS = frozenset((abs, min, max))
_GENERATED = {name: fn for fn, name in ROUNDING.items() if isinstance(fn, np.ufunc)}  # math.floor(vector)
_CASTS = {np.float32: F32, np.float64: F64}


def join(a: str | None, b: str | None) -> str | None:
    """The type of arithmetic on a and b (None: not typed yet)."""
    if a is None or b is None:
        return None
    if a not in _ORDER or b not in _ORDER:
        return UNKNOWN
    return a if _ORDER[a] >= _ORDER[b] else b


def value_type(value: object) -> str:
    """The type of a Python or NumPy value a kernel reads as a constant (a global)."""
    if isinstance(value, (bool, int, np.bool_, np.integer)):
        return INT
    if isinstance(value, float) and not isinstance(value, np.floating):
        return WEAK
    if isinstance(value, (np.float32, np.float64)):
        return F32 if isinstance(value, np.float32) else F64
    if isinstance(value, np.ndarray):
        return ("a", value.dtype, value.ndim)
    return UNKNOWN


def element_type(dtype: np.dtype) -> str:
    if dtype.kind in "iub":
        return INT
    return {np.dtype(np.float32): F32, np.dtype(np.float64): F64}.get(dtype, UNKNOWN)


def param_type(kind) -> object:
    """The type of a parameter from its argument kind (see args.kinds)."""
    if kind.is_array:
        return ("a", kind.dtype, kind.ndim)
    if getattr(kind, "weak", False):
        return WEAK if kind.dtype.kind == "f" else INT
    return element_type(kind.dtype)


class _Typer:
    """Types of expressions in one task, given its parameters' and locals' types."""

    def __init__(self, src: KernelSource, env: dict) -> None:
        self.src = src
        self.env = env  # name -> type (None while a local is being inferred)

    def of(self, node: ast.expr) -> object:
        method = getattr(self, "t_" + type(node).__name__, None)
        return UNKNOWN if method is None else method(node)

    def t_Constant(self, node: ast.Constant) -> str:
        if isinstance(node.value, (bool, int)):
            return INT
        return WEAK if isinstance(node.value, float) else UNKNOWN

    def t_Name(self, node: ast.expr) -> object:
        """A parameter, loop variable or local; else a global (or a global's attribute)."""
        if isinstance(node, ast.Name) and node.id in self.env:
            return self.env[node.id]
        if isinstance(node, ast.Attribute) and node.attr in ("size", "ndim") and isinstance(self.of(node.value), tuple):
            return INT
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        value = UNRESOLVED if not isinstance(root, ast.Name) or root.id in self.env else self.src.resolve(node)
        return UNKNOWN if value is UNRESOLVED else value_type(value)

    t_Attribute = t_Name

    def t_Subscript(self, node: ast.Subscript) -> object:
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                and isinstance(self.of(node.value.value), tuple):
            return INT
        base = self.of(node.value)
        if not isinstance(base, tuple):
            return UNKNOWN if base is not None else None
        index = node.slice
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        if any(isinstance(p, ast.Slice) for p in parts) or len(parts) != base[2]:
            return UNKNOWN
        return element_type(base[1])

    def t_BinOp(self, node: ast.BinOp) -> object:
        return self.binop(self.of(node.left), node.op, self.of(node.right))

    @staticmethod
    def binop(left, op: ast.operator, right) -> object:
        if left is None or right is None:
            return None
        if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)):
            return INT if left == INT and right == INT else UNKNOWN
        if isinstance(op, ast.Pow) and right == INT and left in _ORDER:
            return left
        result = join(left, right)
        if isinstance(op, ast.Div) and result == INT:
            return WEAK
        return result

    def t_UnaryOp(self, node: ast.UnaryOp) -> object:
        return INT if isinstance(node.op, ast.Not) else self.of(node.operand)

    def t_Compare(self, node: ast.expr) -> str:
        return INT

    t_BoolOp = t_Compare

    def t_IfExp(self, node: ast.IfExp) -> object:
        return join(self.of(node.body), self.of(node.orelse))

    def callee(self, node: ast.Call) -> object:
        root = node.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.env:
            return UNRESOLVED
        return _GENERATED.get(getattr(node.func, "id", None)) or self.src.resolve(node.func)

    def t_Call(self, node: ast.Call) -> object:
        fn = self.callee(node)
        if fn is UNRESOLVED or node.keywords:
            return UNKNOWN
        if fn is float:
            return WEAK
        if fn in _INT_RESULT:
            return INT
        if fn in _CASTS:
            return _CASTS[fn]
        if isinstance(fn, type) and issubclass(fn, np.integer):
            return INT
        if fn in _FLOAT_MATH or fn in _FLOAT_NUMPY or fn in _SAME_AS_ARGS:
            result = INT if fn in _SAME_AS_ARGS else None
            for arg in node.args:
                t = self.of(arg)
                result = t if result is None else join(result, t)
            if result == INT and fn not in _SAME_AS_ARGS and fn not in (np.floor, np.ceil, np.trunc):
                return WEAK  # math.sqrt(2) is a Python float
            return result if result is not None else UNKNOWN
        return UNKNOWN


class _Rewriter:
    """Inserts the float32 casts the rules call for (see the module docstring)."""

    def __init__(self, typer: _Typer, default: str) -> None:
        self.t = typer
        self.default = default  # F32 or F64

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
            if fn in _FLOAT_MATH or fn in _FLOAT_NUMPY or fn in _SAME_AS_ARGS:
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
        if t in FLOATS and (fn in _FLOAT_MATH or fn in _FLOAT_NUMPY or fn in _SAME_AS_ARGS):
            node.args = [self.to(a, t) for a in node.args]
        elif fn in lang.ATOMICS.values() and len(node.args) == 3:
            target = self.t.of(ast.Subscript(node.args[0], node.args[1], ast.Load()))
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

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            if len(node.targets) == 1 and _is_pair(node.targets[0], node.value):
                node.value.elts = [self.value(v, self.target_type(tg))
                                   for tg, v in zip(node.targets[0].elts, node.value.elts)]
            elif len(node.targets) == 1:
                node.value = self.value(node.value, self.target_type(node.targets[0]))
            else:
                node.value = self.expr(node.value)
            for target in node.targets:
                self.target(target)
        elif isinstance(node, ast.AugAssign):
            node.value = self.value(node.value, self.target_type(node.target))
            self.target(node.target)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            node.value = self.value(node.value, self.target_type(node.target))
        elif isinstance(node, (ast.For, ast.While, ast.If)):
            if isinstance(node, ast.For):
                node.iter = self.expr(node.iter)
            else:
                node.test = self.expr(node.test)
            self.stmts(node.body + node.orelse)
        elif isinstance(node, (ast.Return, ast.Expr)) and node.value is not None:
            node.value = self.expr(node.value)

    def target_type(self, target: ast.expr) -> object:
        if isinstance(target, ast.Name):
            return self.t.env.get(target.id, UNKNOWN)
        return self.t.of(target) if isinstance(target, ast.Subscript) else UNKNOWN

    def target(self, target: ast.expr) -> None:
        if isinstance(target, ast.Subscript):  # the index expressions, on their own
            target.slice = self.expr(target.slice)


def _is_pair(target: ast.expr, value: ast.expr) -> bool:
    return isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts)


def _infer_locals(typer: _Typer, body: list[ast.stmt], names: set[str]) -> None:
    """Each local's type: the join of everything assigned to it, to a fixed point."""
    env = typer.env
    for name in names:
        env[name] = None
    assigns: list[tuple[str, object]] = []  # (name, how its value is typed)
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if _is_pair(target, node.value):
                    assigns += [(t.id, v) for t, v in zip(target.elts, node.value.elts) if isinstance(t, ast.Name)]
                elif isinstance(target, ast.Name):
                    assigns.append((target.id, node.value))
                else:
                    assigns += [(n.id, UNKNOWN) for n in ast.walk(target) if isinstance(n, ast.Name)
                                and isinstance(n.ctx, ast.Store)]
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            assigns.append((node.target.id, node))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            assigns.append((node.target.id, node.value if node.value is not None else UNKNOWN))
        elif isinstance(node, ast.For):
            is_range = isinstance(node.iter, ast.Call) and typer.callee(node.iter) in (range, lang.ndrange)
            assigns += [(n.id, INT if is_range else UNKNOWN) for n in ast.walk(node.target) if isinstance(n, ast.Name)]
        elif isinstance(node, ast.NamedExpr):
            assigns.append((node.target.id, UNKNOWN))
    for _ in range(4 * len(assigns) + 4):  # the lattice is 5 high: this many rounds always settle
        changed = False
        for name, how in assigns:
            if isinstance(how, ast.AugAssign):
                t = typer.binop(env.get(name), how.op, typer.of(how.value))
            elif isinstance(how, ast.expr):
                t = typer.of(how)
            else:
                t = how
            if t is None:
                continue
            old = env.get(name)
            new = t if old is None or old == t else UNKNOWN if tuple in (type(old), type(t)) else join(old, t)
            if new != old:
                env[name] = new
                changed = True
        if not changed:
            break
    for name in names:
        if env.get(name) is None:
            env[name] = UNKNOWN


def weak_typed(src: KernelSource, body: list[ast.stmt], params: dict, loop_vars: tuple[str, ...],
               local_names: set[str], default_float: str = F64, on_typed=None) -> list[ast.stmt]:
    """Copies of `body` with the casts weak literals need (see the module docstring).

    `params` maps parameter names to their types (`param_type`), `default_float` is F32 or
    F64. `on_typed(typer, body)` sees the types first (lang.func_precision records calls).
    """
    body = [copy.deepcopy(s) for s in body]
    env = dict(params)
    for v in loop_vars:
        env[v] = INT
    typer = _Typer(src, env)
    _infer_locals(typer, body, set(local_names) - set(params) - set(loop_vars))
    if on_typed is not None:
        on_typed(typer, body)
    _Rewriter(typer, default_float).stmts(body)
    for stmt in body:
        ast.fix_missing_locations(stmt)
    return body
