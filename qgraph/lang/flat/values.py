"""Values of flattened code (for lang.flat.flatten and lang.flat.calls): a lowered value's
type and parts, and the small helpers both modules share."""

from __future__ import annotations

import ast
import math

import numpy as np

from ..front import ast_clone
from ..types import vector_types as vt
from ..types.vector_types import VectorType, is_vector_kind
from . import vector_algebra as alg

ROW = "row"  # the type of a plain array indexed partially (a numba array view, not a vector)
ELEMENTWISE_MATH = frozenset(getattr(math, n) for n in (
    "sqrt", "exp", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "floor", "ceil", "trunc", "fabs", "erf", "erfc", "atan2", "pow", "copysign",
    "hypot", "fmod")) | {np.floor, np.ceil, np.trunc}
SWIZZLE = {"x": 0, "y": 1, "z": 2, "w": 3}
VECTOR_METHODS = {"dot", "cross", "norm", "norm_sqr", "normalized", "outer", "trace", "transpose", "determinant",
            "inverse"}


def is_struct(t: object) -> bool:
    return getattr(t, "is_struct", False)


def element_type(t: object) -> VectorType | None:
    """The vector type of an array kind's elements (None for a plain array or a non-array)."""
    shape = getattr(t, "element", None)
    if not shape:
        return None
    return vt.vector(shape[0], t.dtype) if len(shape) == 1 else vt.matrix(shape[0], shape[1], t.dtype)


def by_value_type(t: object) -> object:
    """The VectorType of a vector argument's kind (`g: qgraph.vec2`, a struct field), else `t`."""
    return shaped(t.shape, t.dtype) if is_vector_kind(t) else t


def leaves(prefix: str, t: object) -> list[tuple[str, object]]:
    """(flat name, type) of each scalar or array a value of type `t` is passed as."""
    if isinstance(t, VectorType):
        return [(f"{prefix}__{k}", None) for k in range(t.size)]
    if is_vector_kind(t):  # a vector argument: one scalar parameter per component
        return [(f"{prefix}__{k}", t.component) for k in range(t.size)]
    if is_struct(t):
        return [leaf for field, ft in t.fields for leaf in leaves(f"{prefix}__{field}", ft)]
    return [(prefix, t)]


def unshared(tree: ast.AST) -> ast.AST:
    """`tree` with every node that appears twice copied (later passes rewrite nodes in place)."""

    seen: set[int] = set()

    class _Copier(ast.NodeTransformer):
        def visit(self, node):
            if id(node) in seen:
                return ast_clone.clone(node)
            seen.add(id(node))
            return self.generic_visit(node)

    return _Copier().visit(tree)


class Val:
    """A lowered value: its type (a VectorType, an array or struct kind, ROW or None) and parts."""

    __slots__ = ("type", "comps")

    def __init__(self, type_: object, comps: list[ast.expr]) -> None:
        self.type = type_
        self.comps = comps

    @property
    def vec(self) -> VectorType | None:
        return self.type if isinstance(self.type, VectorType) else None

    @property
    def expr(self) -> ast.expr:
        return self.comps[0]


def subscript_parts(index: ast.expr) -> list[ast.expr]:
    if isinstance(index, ast.Tuple):
        return list(index.elts)
    if isinstance(index, ast.Constant) and index.value is None:
        return []
    return [index]


def subscript_of(parts: list[ast.expr], at: ast.AST) -> ast.expr:
    return parts[0] if len(parts) == 1 else alg.loc(ast.Tuple(parts, ast.Load()), at)


def constant_int(e: ast.expr) -> int | None:
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return e.value
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) and isinstance(e.operand, ast.Constant) \
            and type(e.operand.value) is int:
        return -e.operand.value
    return None


def result_dtype(a: VectorType | None, b: VectorType | None) -> np.dtype:
    dts = [t.dtype for t in (a, b) if t is not None]
    if len(dts) == 2 and dts[0] != dts[1]:
        floats = [d for d in dts if d.kind == "f"]
        return max(floats, key=lambda d: d.itemsize) if floats else np.result_type(*dts)
    return dts[0]


def shaped(shape: tuple, dtype: np.dtype) -> VectorType | None:
    if not shape:
        return None
    return vt.vector(shape[0], dtype) if len(shape) == 1 else vt.matrix(shape[0], shape[1], dtype)


def no_keywords(fl, node: ast.Call) -> None:
    if node.keywords:
        raise fl.error(f"{ast.unparse(node.func)}() takes no keyword arguments", node)


def component_indices(fl, parts: list[ast.expr], shape: tuple[int, ...], at: ast.AST) -> list[ast.expr]:
    """The full index of each component of a `shape` element at the leading indices `parts`
    (non-trivial ones moved into temporaries first, so each is computed once)."""
    parts = [p if alg.is_simple(p) else fl.temp(p) for p in parts]
    return [subscript_of(parts + [alg.const(int(i), at) for i in np.unravel_index(k, shape)], at)
            for k in range(int(np.prod(shape)))]
