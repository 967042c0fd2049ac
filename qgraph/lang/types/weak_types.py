"""The types weak typing gives a task's expressions (lang.types.precision rewrites from them).

A small lattice: "i" (integer or bool) < "w" (weak float: Python numbers) < "f32" < "f64";
"?" is unknown (tuples, arrays of other shapes, anything not modelled), `("a", dtype, ndim)`
an array and `(RESULTS, type, ...)` a @qgraph.func's tuple result. `Typer` types one
expression from the types of the names it reads; `infer_locals` gives each local the join
of everything assigned to it.
"""
from __future__ import annotations

import ast

import numpy as np

from ..front import builtins as lang
from ..front.parse import UNRESOLVED, KernelSource
from ..lower.math_calls import FLOAT_MATH, FLOAT_NUMPY, INT_RESULT, ROUNDING, SAME_AS_ARGS

INT, WEAK, F32, F64, UNKNOWN = "i", "w", "f32", "f64", "?"
RESULTS = "t"  # (RESULTS, type, ...): the types of a helper's tuple result (lang.types.func_precision)
_ORDER = {INT: 0, WEAK: 1, F32: 2, F64: 3}
FLOATS = (F32, F64)

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


class Typer(ast.NodeVisitor):
    """Types of expressions in one task, given its parameters' and locals' types: a `visit_<Node>`
    method per expression it models (ast.NodeVisitor's dispatch); anything else is UNKNOWN."""

    def __init__(self, src: KernelSource, env: dict, funcs=None) -> None:
        self.src = src
        self.env = env  # name -> type (None while a local is being inferred)
        self.funcs = funcs  # lang.types.func_precision.FuncPrecision: the result types of helper calls

    def of(self, node: ast.expr) -> object:
        return self.visit(node)

    def generic_visit(self, node: ast.AST) -> str:
        return UNKNOWN

    def visit_Constant(self, node: ast.Constant) -> str:
        if isinstance(node.value, (bool, int)):
            return INT
        return WEAK if isinstance(node.value, float) else UNKNOWN

    def visit_Name(self, node: ast.expr) -> object:
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

    visit_Attribute = visit_Name

    def visit_Subscript(self, node: ast.Subscript) -> object:
        if isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                and isinstance(self.of(node.value.value), tuple):
            return INT
        base = self.of(node.value)
        if not isinstance(base, tuple) or base[0] != "a":
            return UNKNOWN if base is not None else None
        index = node.slice
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        if any(isinstance(p, ast.Slice) for p in parts) or len(parts) != base[2]:
            return UNKNOWN
        return element_type(base[1])

    def visit_BinOp(self, node: ast.BinOp) -> object:
        if negative_int_power(node, self):
            return WEAK
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

    def visit_UnaryOp(self, node: ast.UnaryOp) -> object:
        return INT if isinstance(node.op, ast.Not) else self.of(node.operand)

    def visit_Compare(self, node: ast.expr) -> str:
        return INT

    visit_BoolOp = visit_Compare

    def visit_IfExp(self, node: ast.IfExp) -> object:
        return join(self.of(node.body), self.of(node.orelse))

    def callee(self, node: ast.Call) -> object:
        root = node.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in self.env:
            return UNRESOLVED
        return _GENERATED.get(getattr(node.func, "id", None)) or self.src.resolve(node.func)

    def visit_Call(self, node: ast.Call) -> object:
        if self.funcs is not None and isinstance(node.func, ast.Name) and self.funcs.knows(node.func.id):
            return self.funcs.result(node.func.id, tuple(self.of(a) for a in node.args))
        fn = self.callee(node)
        if fn is UNRESOLVED or node.keywords:
            return UNKNOWN
        if fn is float:
            return WEAK
        if fn in INT_RESULT:
            return INT
        if fn in _CASTS:
            return _CASTS[fn]
        if isinstance(fn, type) and issubclass(fn, np.integer):
            return INT
        if fn in FLOAT_MATH or fn in FLOAT_NUMPY or fn in SAME_AS_ARGS:
            result = INT if fn in SAME_AS_ARGS else None
            for arg in node.args:
                t = self.of(arg)
                if t is None:  # an argument not typed yet: so is the call (infer_locals comes back)
                    return None
                result = t if result is None else join(result, t)
            if result == INT and fn not in SAME_AS_ARGS and fn not in (np.floor, np.ceil, np.trunc):
                return WEAK  # math.sqrt(2) is a Python float
            return result if result is not None else UNKNOWN
        return UNKNOWN


def negative_int_power(node: ast.AST, typer: Typer) -> bool:
    """`i ** -2` of an integer `i`: a float, as in Python (numba's integer power gives 0)."""
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Pow) or typer.of(node.left) != INT:
        return False
    exponent = node.right
    if isinstance(exponent, ast.UnaryOp) and isinstance(exponent.op, ast.USub):
        exponent = exponent.operand
        return isinstance(exponent, ast.Constant) and type(exponent.value) is int and exponent.value > 0
    return isinstance(exponent, ast.Constant) and type(exponent.value) is int and exponent.value < 0


def is_results(t: object, n: int | None = None) -> bool:
    """Whether `t` is the type of a helper's tuple result (of `n` values)."""
    return isinstance(t, tuple) and t[0] == RESULTS and (n is None or len(t) == n + 1)


def is_pair(target: ast.expr, value: ast.expr) -> bool:
    return isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts)


def infer_locals(typer: Typer, body: list[ast.stmt], names: set[str]) -> None:
    """Each local's type: the join of everything assigned to it, to a fixed point."""
    env = typer.env
    for name in names:
        env[name] = None
    assigns: list[tuple[str, object]] = []  # (name, how its value is typed)
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if is_pair(target, node.value):
                    assigns += [(t.id, v) for t, v in zip(target.elts, node.value.elts) if isinstance(t, ast.Name)]
                elif isinstance(target, ast.Name):
                    assigns.append((target.id, node.value))
                elif isinstance(target, ast.Tuple) and all(isinstance(t, ast.Name) for t in target.elts):
                    assigns += [(t.id, (node.value, k)) for k, t in enumerate(target.elts)]  # a, b = f(x)
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
            elif isinstance(how, tuple):  # one value of a tuple result
                r = typer.of(how[0])
                t = r if r is None else r[1 + how[1]] if is_results(r) and len(r) > 1 + how[1] else UNKNOWN
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
