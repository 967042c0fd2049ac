"""The partial derivatives of one three-address operation, as expressions over its atoms.

`partials(value, result, resolve)` gives, for each operand of `value` (an operation over
atoms whose value is the name `result`), the expression of d result / d operand, or ONE /
MINUS_ONE, so the adjoint adds or subtracts without a product. None: the operation has
no rule (the reverse sweep then names it, with its line, if a gradient must pass it).
Operations whose result carries no gradient (comparisons, `int`, `//`, rounding) give [].
A function called in a kernel gets its rule from one table (`CALL_RULES`, filled by
`register_rule`), as JAX keys its rules by primitive: a function without one is named.
"""

from __future__ import annotations

import ast
import builtins
import math
from collections.abc import Callable

import numpy as np

from ..flat.vector_algebra import MATH

ONE, MINUS_ONE = "one", "minus_one"


def _m(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Name(MATH, ast.Load()), name, ast.Load()), list(args), [])


def _c(value: float) -> ast.Constant:
    return ast.Constant(value)


def _bin(a: ast.expr, op: ast.operator, b: ast.expr) -> ast.BinOp:
    return ast.BinOp(a, op, b)


def _neg(a: ast.expr) -> ast.UnaryOp:
    return ast.UnaryOp(ast.USub(), a)


def _sq(a: ast.expr) -> ast.BinOp:
    return _bin(a, ast.Mult(), a)


def _pick(test: ast.expr, yes: float, no: float) -> ast.IfExp:
    return ast.IfExp(test, _c(yes), _c(no))


def _lt(a: ast.expr, b: ast.expr) -> ast.Compare:
    return ast.Compare(a, [ast.Lt()], [b])


def _gt(a: ast.expr, b: ast.expr) -> ast.Compare:
    return ast.Compare(a, [ast.Gt()], [b])


def _sign(a: ast.expr) -> ast.IfExp:
    return ast.IfExp(_gt(a, _c(0.0)), _c(1.0), _pick(_lt(a, _c(0.0)), -1.0, 0.0))


# one argument: d f(x) / dx from x and the result r
_UNARY = {
    "sin": lambda x, r: _m("cos", x),
    "cos": lambda x, r: _neg(_m("sin", x)),
    "tan": lambda x, r: _bin(_c(1.0), ast.Add(), _sq(r)),
    "exp": lambda x, r: r,
    "expm1": lambda x, r: _bin(r, ast.Add(), _c(1.0)),
    "exp2": lambda x, r: _bin(r, ast.Mult(), _c(math.log(2.0))),
    "log": lambda x, r: _bin(_c(1.0), ast.Div(), x),
    "log2": lambda x, r: _bin(_c(1.0 / math.log(2.0)), ast.Div(), x),
    "log10": lambda x, r: _bin(_c(1.0 / math.log(10.0)), ast.Div(), x),
    "log1p": lambda x, r: _bin(_c(1.0), ast.Div(), _bin(x, ast.Add(), _c(1.0))),
    "sqrt": lambda x, r: _bin(_c(0.5), ast.Div(), r),
    "sinh": lambda x, r: _m("cosh", x),
    "cosh": lambda x, r: _m("sinh", x),
    "tanh": lambda x, r: _bin(_c(1.0), ast.Sub(), _sq(r)),
    "asin": lambda x, r: _bin(_c(1.0), ast.Div(), _m("sqrt", _bin(_c(1.0), ast.Sub(), _sq(x)))),
    "acos": lambda x, r: _bin(_c(-1.0), ast.Div(), _m("sqrt", _bin(_c(1.0), ast.Sub(), _sq(x)))),
    "atan": lambda x, r: _bin(_c(1.0), ast.Div(), _bin(_c(1.0), ast.Add(), _sq(x))),
    "asinh": lambda x, r: _bin(_c(1.0), ast.Div(), _m("sqrt", _bin(_sq(x), ast.Add(), _c(1.0)))),
    "acosh": lambda x, r: _bin(_c(1.0), ast.Div(), _m("sqrt", _bin(_sq(x), ast.Sub(), _c(1.0)))),
    "atanh": lambda x, r: _bin(_c(1.0), ast.Div(), _bin(_c(1.0), ast.Sub(), _sq(x))),
    "fabs": lambda x, r: _sign(x),
    "abs": lambda x, r: _sign(x),
    "erf": lambda x, r: _bin(_c(2.0 / math.sqrt(math.pi)), ast.Mult(), _m("exp", _neg(_sq(x)))),
    "erfc": lambda x, r: _bin(_c(-2.0 / math.sqrt(math.pi)), ast.Mult(), _m("exp", _neg(_sq(x)))),
    "degrees": lambda x, r: _c(180.0 / math.pi),
    "radians": lambda x, r: _c(math.pi / 180.0),
}
_NUMPY_NAMES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
                "arctanh": "atanh", "absolute": "abs", "rad2deg": "degrees", "deg2rad": "radians"}
UNARY = {getattr(math, n): f for n, f in _UNARY.items() if hasattr(math, n)}
UNARY.update({getattr(np, n): f for n, f in _UNARY.items() if hasattr(np, n)})
UNARY.update({getattr(np, n): _UNARY[m] for n, m in _NUMPY_NAMES.items()})
UNARY[builtins.abs] = _UNARY["abs"]
CASTS = (float, np.float32, np.float64)
NO_GRADIENT = (int, bool, len, math.floor, math.ceil, math.trunc, np.floor, np.ceil, np.trunc, math.isnan,
               math.isinf, math.isfinite, np.isnan, np.isinf, np.isfinite, np.sign)


def _pow(x: ast.expr, y: ast.expr, r: ast.expr) -> list:
    dx = _bin(y, ast.Mult(), _bin(x, ast.Pow(), _bin(y, ast.Sub(), _c(1.0))))
    if isinstance(y, ast.Constant):
        return [(x, dx)]
    return [(x, dx), (y, _bin(r, ast.Mult(), _m("log", x)))]


def _binary(fn, x: ast.expr, y: ast.expr, r: ast.expr) -> list | None:
    if fn in (math.pow, np.power):
        return _pow(x, y, r)
    if fn in (math.atan2, np.arctan2):
        d = _bin(_sq(x), ast.Add(), _sq(y))
        return [(x, _bin(y, ast.Div(), d)), (y, _bin(_neg(x), ast.Div(), d))]
    if fn in (math.hypot, np.hypot):
        return [(x, _bin(x, ast.Div(), r)), (y, _bin(y, ast.Div(), r))]
    if fn in (math.copysign, np.copysign):
        return [(x, _bin(_sign(x), ast.Mult(), _sign(r)))]
    if fn is builtins.min:  # Python's rule: the later value only if strictly smaller
        return [(x, _pick(_lt(y, x), 0.0, 1.0)), (y, _pick(_lt(y, x), 1.0, 0.0))]
    if fn is builtins.max:
        return [(x, _pick(_gt(y, x), 0.0, 1.0)), (y, _pick(_gt(y, x), 1.0, 0.0))]
    if fn in (np.minimum, np.fmin):
        return [(x, _pick(_lt(y, x), 0.0, 1.0)), (y, _pick(_lt(y, x), 1.0, 0.0))]
    if fn in (np.maximum, np.fmax):
        return [(x, _pick(_gt(y, x), 0.0, 1.0)), (y, _pick(_gt(y, x), 1.0, 0.0))]
    if fn in (math.fmod, np.fmod):
        return [(x, ONE), (y, _neg(_m("trunc", _bin(x, ast.Div(), y))))]
    return None


Rule = Callable[[list, ast.expr], "list | None"]  # (the call's argument atoms, the result) -> partials
CALL_RULES: dict = {}  # a function kernels call -> its Rule


def register_rule(fn, rule: Rule) -> None:
    """Give calls of `fn` in kernels their partial derivatives: `rule(args, result)` returns
    [(argument atom, derivative expression)] (ONE / MINUS_ONE allowed), [] for no gradient, None
    where these arguments have none (the reverse sweep then names the call and its line)."""
    CALL_RULES[fn] = rule


def rule_for(fn) -> Rule | None:
    """The rule of a called function, or None."""
    try:
        return CALL_RULES.get(fn)
    except TypeError:  # an unhashable callee has no rule
        return None


def _one_argument(derivative) -> Rule:
    return lambda args, r: [(args[0], derivative(args[0], r))] if len(args) == 1 else None


def _two_arguments(fn) -> Rule:
    return lambda args, r: _binary(fn, args[0], args[1], r) if len(args) == 2 else None


for _fn, _derivative in UNARY.items():
    register_rule(_fn, _one_argument(_derivative))
for _fn in CASTS:
    register_rule(_fn, lambda args, r: [(args[0], ONE)] if len(args) == 1 else None)
for _fn in NO_GRADIENT:
    register_rule(_fn, lambda args, r: [])
for _fn in (math.pow, np.power, math.atan2, np.arctan2, math.hypot, np.hypot, math.copysign, np.copysign,
            builtins.min, builtins.max, np.minimum, np.fmin, np.maximum, np.fmax, math.fmod, np.fmod):
    register_rule(_fn, _two_arguments(_fn))


def partials(value: ast.expr, result: ast.expr, resolve) -> list | None:
    """[(operand atom, derivative)] of `value` (see the module docstring)."""
    if isinstance(value, (ast.Name, ast.Constant, ast.Attribute)):
        return [(value, ONE)]
    if isinstance(value, ast.BinOp):
        x, y, op = value.left, value.right, value.op
        if isinstance(op, ast.Add):
            return [(x, ONE), (y, ONE)]
        if isinstance(op, ast.Sub):
            return [(x, ONE), (y, MINUS_ONE)]
        if isinstance(op, ast.Mult):
            return [(x, y), (y, x)]
        if isinstance(op, ast.Div):
            return [(x, _bin(_c(1.0), ast.Div(), y)), (y, _neg(_bin(result, ast.Div(), y)))]
        if isinstance(op, ast.Pow):
            return _pow(x, y, result)
        if isinstance(op, ast.Mod):
            return [(x, ONE), (y, _neg(_bin(x, ast.FloorDiv(), y)))]
        if isinstance(op, ast.FloorDiv):
            return []
        return None
    if isinstance(value, ast.UnaryOp):
        if isinstance(value.op, ast.USub):
            return [(value.operand, MINUS_ONE)]
        if isinstance(value.op, ast.UAdd):
            return [(value.operand, ONE)]
        return []
    if isinstance(value, (ast.Compare, ast.BoolOp)):
        return []
    if isinstance(value, ast.Call):
        rule = rule_for(resolve(value.func))
        return None if rule is None else rule(value.args, result)
    return None


def callee_name(value: ast.expr) -> str:
    return ast.unparse(value.func) if isinstance(value, ast.Call) else type(value).__name__
