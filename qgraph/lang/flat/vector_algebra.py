"""Vector and matrix operations as per-component scalar expressions (for lang.flat.flatten).

A value is its components, row-major: a list of AST expressions. Operations that read a
component more than once (products, norms, inverses) first pass their operands through
`share`, which keeps names and constants and moves anything else into a temporary, so the
generated code computes each component once.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable

import numpy as np

MATH = "_qg_math"  # the math module, in every generated namespace (lang.flat.flatten.GLOBALS)
NUMPY = "_qg_np"

Temp = Callable[[ast.expr], ast.expr]  # moves an expression into a temporary, returns its name


def loc(node: ast.AST, at: ast.AST) -> ast.AST:
    return ast.copy_location(node, at)


def name(id_: str, at: ast.AST) -> ast.Name:
    return loc(ast.Name(id_, ast.Load()), at)


def const(value, at: ast.AST) -> ast.Constant:
    return loc(ast.Constant(value), at)


def binop(left: ast.expr, op: ast.operator, right: ast.expr, at: ast.AST) -> ast.expr:
    return loc(ast.BinOp(left, op, right), at)


def neg(e: ast.expr, at: ast.AST) -> ast.expr:
    return loc(ast.UnaryOp(ast.USub(), e), at)


def math_call(fn: str, args: list[ast.expr], at: ast.AST) -> ast.expr:
    return loc(ast.Call(loc(ast.Attribute(name(MATH, at), fn, ast.Load()), at), args, []), at)


def literal(value: float | int | bool, at: ast.AST) -> ast.expr:
    """A number as an expression: a constant, or `math.inf` / `math.nan` (no literal spells them)."""
    if isinstance(value, float) and not math.isfinite(value):
        special = loc(ast.Attribute(name(MATH, at), "nan" if math.isnan(value) else "inf", ast.Load()), at)
        return neg(special, at) if value < 0 else special
    return const(value, at)


def cast(dtype: np.dtype, e: ast.expr, at: ast.AST) -> ast.expr:
    """`np.<dtype>(e)`: numba's explicit conversion (lang.types.precision treats it as strong)."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == dtype.name \
            and isinstance(e.func.value, ast.Name) and e.func.value.id == NUMPY:
        return e
    return loc(ast.Call(loc(ast.Attribute(name(NUMPY, at), dtype.name, ast.Load()), at), [e], []), at)


def is_simple(e: ast.expr) -> bool:
    """An expression cheap and safe to repeat: a name or a constant."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        e = e.operand
    return isinstance(e, (ast.Name, ast.Constant))


def share(comps: list[ast.expr], temp: Temp) -> list[ast.expr]:
    return [c if is_simple(c) else temp(c) for c in comps]


def total(terms: list[ast.expr], at: ast.AST) -> ast.expr:
    """terms[0] + terms[1] + ..., left to right (as written by hand)."""
    out = terms[0]
    for t in terms[1:]:
        out = binop(out, ast.Add(), t, at)
    return out


def dot(a: list[ast.expr], b: list[ast.expr], at: ast.AST) -> ast.expr:
    return total([binop(x, ast.Mult(), y, at) for x, y in zip(a, b)], at)


def matmul(a_shape: tuple, a: list, b_shape: tuple, b: list, temp: Temp, at: ast.AST) -> tuple[tuple, list]:
    """(shape, comps) of a @ b for matrix/vector operands whose inner extents agree."""
    a, b = share(a, temp), share(b, temp)
    rows, inner = (1, a_shape[0]) if len(a_shape) == 1 else a_shape
    inner_b, cols = (b_shape[0], 1) if len(b_shape) == 1 else b_shape
    assert inner == inner_b
    comps = [dot([a[r * inner + k] for k in range(inner)], [b[k * cols + c] for k in range(inner)], at)
             for r in range(rows) for c in range(cols)]
    if len(a_shape) == 1 and len(b_shape) == 1:
        return (), comps
    if len(a_shape) == 1:
        return (cols,), comps
    if len(b_shape) == 1:
        return (rows,), comps
    return (rows, cols), comps


def cross(a: list, b: list, temp: Temp, at: ast.AST) -> list:
    a, b = share(a, temp), share(b, temp)

    def term(i, j):
        return binop(binop(a[i], ast.Mult(), b[j], at), ast.Sub(), binop(a[j], ast.Mult(), b[i], at), at)

    if len(a) == 2:
        return [term(0, 1)]
    return [term(1, 2), term(2, 0), term(0, 1)]


def norm(a: list, temp: Temp, at: ast.AST) -> ast.expr:
    a = share(a, temp)
    return math_call("sqrt", [dot(a, a, at)], at)


def normalized(a: list, temp: Temp, at: ast.AST) -> list:
    a = share(a, temp)
    inv = temp(binop(const(1.0, at), ast.Div(), math_call("sqrt", [dot(a, a, at)], at), at))
    return [binop(c, ast.Mult(), inv, at) for c in a]


def outer(a: list, b: list, temp: Temp, at: ast.AST) -> list:
    a, b = share(a, temp), share(b, temp)
    return [binop(x, ast.Mult(), y, at) for x in a for y in b]


def transpose(shape: tuple, comps: list) -> tuple[tuple, list]:
    rows, cols = shape
    return (cols, rows), [comps[r * cols + c] for c in range(cols) for r in range(rows)]


def _det2(m, at):
    return binop(binop(m[0], ast.Mult(), m[3], at), ast.Sub(), binop(m[1], ast.Mult(), m[2], at), at)


def _cofactors3(m: list, at: ast.AST) -> list:
    """The 3x3 cofactor matrix, row-major."""
    def minor(r, c):
        rs = [i for i in range(3) if i != r]
        cs = [j for j in range(3) if j != c]
        sub = [m[i * 3 + j] for i in rs for j in cs]
        d = _det2(sub, at)
        return d if (r + c) % 2 == 0 else neg(d, at)
    return [minor(r, c) for r in range(3) for c in range(3)]


def determinant(n: int, comps: list, temp: Temp, at: ast.AST) -> ast.expr:
    m = share(comps, temp)
    if n == 2:
        return _det2(m, at)
    cof = _cofactors3(m, at)
    return total([binop(m[k], ast.Mult(), cof[k], at) for k in range(3)], at)


def inverse(n: int, comps: list, temp: Temp, at: ast.AST) -> list:
    m = share(comps, temp)
    if n == 2:
        inv = temp(binop(const(1.0, at), ast.Div(), _det2(m, at), at))
        adj = [m[3], neg(m[1], at), neg(m[2], at), m[0]]
        return [binop(c, ast.Mult(), inv, at) for c in adj]
    cof = share(_cofactors3(m, at), temp)
    det = total([binop(m[k], ast.Mult(), cof[k], at) for k in range(3)], at)
    inv = temp(binop(const(1.0, at), ast.Div(), det, at))
    _, adj = transpose((3, 3), cof)
    return [binop(c, ast.Mult(), inv, at) for c in adj]


def select(index: ast.expr, comps: list, at: ast.AST) -> ast.expr:
    """comps[index] for a runtime index: a chain of conditional expressions."""
    out = comps[-1]
    for k in range(len(comps) - 2, -1, -1):
        test = loc(ast.Compare(index, [ast.Eq()], [const(k, at)]), at)
        out = loc(ast.IfExp(test, comps[k], out), at)
    return out
