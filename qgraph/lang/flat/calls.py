"""Calls in vector code (for lang.flat.flatten): constructors, vector functions and methods,
elementwise builtins and math, vector atomics and @qgraph.func specialisations."""

from __future__ import annotations

import ast
import math

import numpy as np

from .. import roles
from ..front import builtins as lang
from ..front.parse import UNRESOLVED
from ..lower.math_calls import TO_FLOAT
from ..roles import role_of
from ..types import vector_types as vt
from ..types.vector_types import VectorType
from . import vector_algebra as alg
from .atomics import atomic
from .draws import draw
from .values import (
    ELEMENTWISE_MATH,
    VECTOR_METHODS,
    Val,
    component_indices,
    element_type,
    is_struct,
    no_keywords,
    shaped,
    subscript_parts,
)

_ELEMENTWISE_BUILTINS = (abs,)


def lower_call(fl, node: ast.Call) -> Val:
    func = node.func
    if isinstance(func, ast.Call):  # qgraph.vector(2, qgraph.i32)(...)
        t = _static_type(fl, func)
        if t is not None:
            return constructor(fl, t, node)
    obj = fl.resolve(func)
    if obj is UNRESOLVED and isinstance(func, ast.Attribute):
        base = fl.value(func.value)
        if base.vec is not None:
            return method(fl, base, func.attr, node)
        if is_struct(base.type):
            raise fl.error(f"struct {base.type.name} has no methods; call functions of its fields", node)
        func.value = base.expr
        return plain_call(fl, node)
    if isinstance(obj, VectorType):
        return constructor(fl, obj, node)
    if getattr(obj, "__name__", None) == "identity" and isinstance(getattr(obj, "__self__", None), VectorType):
        return identity(fl, obj.__self__, node)
    if obj in (vt.vector, vt.matrix):
        raise fl.error("define vector types at module level (ivec2 = qgraph.vector(2, qgraph.i32)) or call "
                       "them directly: qgraph.vector(2, qgraph.i32)(x, y)", node)
    if role_of(obj) == roles.FUNC:
        return fl.specs.call(fl, obj, _bind(fl, obj, node), node)
    name = next((n for n, f in vt.FUNCTIONS.items() if f is obj), None)
    if name is not None:
        args = [fl.value(a) for a in node.args]
        no_keywords(fl, node)
        return vector_function(fl, name, args, node)
    if obj in lang.ATOMICS.values():
        return atomic(fl, node) if len(node.args) == 3 else plain_call(fl, node)
    if obj in lang.RANDOM.values():
        return draw(fl, obj, node)
    if obj is lang.clamp or obj is np.clip:
        return clamp(fl, node)
    if obj is lang.stop_gradient:  # kept per component for the adjoint; lowering drops the call
        if len(node.args) != 1 or node.keywords:
            raise fl.error("qgraph.stop_gradient takes one value: qgraph.stop_gradient(x)", node)
        return elementwise(fl, node)
    if obj in ELEMENTWISE_MATH or obj in _ELEMENTWISE_BUILTINS:
        return elementwise(fl, node)
    if obj is float and len(node.args) == 1 and not node.keywords and _is_boolean(fl, node.args[0]):
        # float(math.isnan(x)): numba has no float(bool)
        test = fl.scalar(node.args[0])
        return Val(None, [alg.loc(ast.IfExp(test, alg.const(1.0, node), alg.const(0.0, node)), node)])
    if _is_linear_algebra(obj):
        name = f"np.{'linalg.' if getattr(obj, '__module__', '') == 'numpy.linalg' else ''}{obj.__name__}"
        raise fl.error(f"NumPy linear algebra ({name}) is not supported in a kernel; use qgraph's small vector "
                       "and matrix types (qgraph.vec3, qgraph.mat33, @, qgraph.dot, qgraph.cross, qgraph.inverse, "
                       "...)", node)
    if obj in (min, max):
        return min_max(fl, obj, node)
    if obj is sum and len(node.args) == 1:
        arg = fl.value(node.args[0])
        if arg.vec:
            return Val(None, [alg.total(arg.comps, node)])
        node.args = [arg.expr]
        return Val(None, [node])
    if obj is len and len(node.args) == 1:
        arg = fl.value(node.args[0])
        if arg.vec:
            return Val(None, [alg.const(arg.vec.shape[0], node)])
        node.args = [arg.expr]
        return Val(None, [node])
    return plain_call(fl, node)


_BOOLEAN_CALLS = (math.isnan, math.isinf, math.isfinite, np.isnan, np.isinf, np.isfinite, bool)
_LINEAR_ALGEBRA = (np.dot, np.matmul, np.cross, np.outer, np.inner, np.vdot, np.tensordot, np.einsum, np.kron)


def _is_boolean(fl, arg: ast.expr) -> bool:
    if isinstance(arg, (ast.Compare, ast.BoolOp)) or (isinstance(arg, ast.UnaryOp) and isinstance(arg.op, ast.Not)):
        return True
    return isinstance(arg, ast.Call) and fl.resolve(arg.func) in _BOOLEAN_CALLS


def _is_linear_algebra(obj) -> bool:
    return getattr(obj, "__module__", None) == "numpy.linalg" or any(obj is f for f in _LINEAR_ALGEBRA)


def clamp(fl, node: ast.Call) -> Val:
    """qgraph.clamp(x, lo, hi) and np.clip(x, lo, hi): min(max(x, lo), hi), per component."""
    no_keywords(fl, node)
    if len(node.args) != 3:
        raise fl.error(f"{ast.unparse(node.func)}(x, lo, hi) takes 3 arguments, got {len(node.args)}", node)
    args = [fl.value(a) for a in node.args]
    vecs = [a.vec for a in args if a.vec]
    if vecs and any(v.shape != vecs[0].shape for v in vecs):
        raise fl.error(f"{ast.unparse(node.func)}(): the vector arguments differ in shape", node)
    n = vecs[0].size if vecs else 1
    if vecs:
        args = [fl.broadcast(a, vecs[0], node) for a in args]
    comps = []
    for k in range(n):
        x, lo, hi = (a.comps[k] if vecs else a.expr for a in args)
        inner = alg.loc(ast.Call(alg.name("max", node), [x, lo], []), node)
        comps.append(alg.loc(ast.Call(alg.name("min", node), [inner, hi], []), node))
    return Val(vecs[0] if vecs else None, comps)


def plain_call(fl, node: ast.Call) -> Val:
    node.args = [fl.scalar(a) for a in node.args]
    for kw in node.keywords:
        kw.value = fl.scalar(kw.value)
    return Val(None, [node])


def _static_type(fl, call: ast.Call) -> VectorType | None:
    maker = fl.resolve(call.func)
    if maker not in (vt.vector, vt.matrix):
        return None
    try:
        args = [fl.src.resolve(a) if not isinstance(a, ast.Constant) else a.value for a in call.args]
        kwargs = {k.arg: fl.src.resolve(k.value) if not isinstance(k.value, ast.Constant) else k.value.value
                  for k in call.keywords}
        if UNRESOLVED in args or UNRESOLVED in kwargs.values():
            raise TypeError("its arguments must be constants or module-level names")
        return maker(*args, **kwargs)
    except (TypeError, ValueError) as e:
        raise fl.error(f"{ast.unparse(call)}: {e}", call) from None


# --------------------------------------------------------------------------- constructors


def constructor(fl, t: VectorType, node: ast.Call) -> Val:
    no_keywords(fl, node)
    base = _row_base(fl, node.args[0]) if len(node.args) == 1 else None
    if base is not None:
        return _from_row(fl, t, node.args[0], base)
    args = [fl.value(a) for a in node.args]
    if not args:
        comps = [alg.const(0, node)] * t.size
    elif len(args) == 1 and not args[0].vec:
        if getattr(args[0].type, "ndim", None) is not None:
            f, a = ast.unparse(node.func), ast.unparse(node.args[0])
            raise fl.error(f"{f}({a}): '{a}' is a whole array; read a row with {f}({a}[i]), or pass a vector by "
                           f"value: annotate the parameter ({a}: qgraph.{t.name}) or pass qgraph.{t.name}(...) "
                           "for it", node)
        if is_struct(args[0].type) or element_type(args[0].type) is not None:
            raise fl.error(f"{t.name}() takes numbers or vectors", node)
        value = args[0].expr if alg.is_simple(args[0].expr) else fl.temp(args[0].expr)
        comps = [value] * t.size
    else:
        comps = [c for a in args for c in (a.comps if a.vec else [a.expr])]
        if len(comps) != t.size:
            raise fl.error(f"{t.name}() takes 1 value, a {t.name}, or {t.size} numbers in all "
                           f"(got {len(comps)})", node)
    return Val(t, [alg.cast(t.dtype, c, node) for c in comps])


def _row_base(fl, arg: ast.expr) -> Val | None:
    """The array of `x[i]` when `x` is a plain (non-vector) array indexed with fewer indices
    than it has dimensions (a row, read as a vector by a constructor), else None."""
    if not isinstance(arg, ast.Subscript) or not isinstance(arg.value, (ast.Name, ast.Attribute)):
        return None
    base = fl.value(arg.value)
    ndim = getattr(base.type, "ndim", None)
    if ndim is not None and element_type(base.type) is None and 0 < len(subscript_parts(arg.slice)) < ndim:
        return base
    return None


def _from_row(fl, t: VectorType, arg: ast.Subscript, base: Val) -> Val:
    parts = [fl.scalar(p) for p in subscript_parts(arg.slice)]
    ndim = base.type.ndim
    if ndim - len(parts) != len(t.shape):
        raise fl.error(f"{t.name}({ast.unparse(arg)}): the array has {ndim} dimensions, so {ast.unparse(arg)} "
                       f"has {ndim - len(parts)}, not the {len(t.shape)} of a {t.name}", arg)
    return Val(t, [alg.cast(t.dtype, alg.loc(ast.Subscript(base.expr, index, ast.Load()), arg), arg)
                   for index in component_indices(fl, parts, t.shape, arg)])


def identity(fl, t: VectorType, node: ast.Call) -> Val:
    if not t.is_matrix or t.shape[0] != t.shape[1]:
        raise fl.error(f"{t.name}.identity(): only square matrices have an identity", node)
    n = t.shape[0]
    return Val(t, [alg.cast(t.dtype, alg.const(1 if r == c else 0, node), node) for r in range(n) for c in range(n)])


# --------------------------------------------------------------------------- vector functions


def method(fl, base: Val, name: str, node: ast.Call) -> Val:
    if name not in VECTOR_METHODS:
        raise fl.error(f"a {base.vec.name} has no method '{name}' (methods: {', '.join(sorted(VECTOR_METHODS))})", node)
    no_keywords(fl, node)
    return vector_function(fl, name, [base] + [fl.value(a) for a in node.args], node)


def _expect(fl, name: str, args: list[Val], count: int, node: ast.AST) -> None:
    if len(args) != count:
        raise fl.error(f"qgraph.{name}() takes {count} argument(s), got {len(args)}", node)
    for a in args:
        if not a.vec:
            raise fl.error(f"qgraph.{name}() takes vectors or matrices, got a scalar ({ast.unparse(a.expr)})", node)


def vector_function(fl, name: str, args: list[Val], node: ast.AST) -> Val:
    count = 2 if name in ("dot", "cross", "outer") else 1
    _expect(fl, name, args, count, node)
    a = args[0].vec
    if name in ("dot", "cross", "outer"):
        b = args[1].vec
        if a.is_matrix or b.is_matrix:
            raise fl.error(f"qgraph.{name}() takes two vectors, got {a.name} and {b.name}", node)
        dtype = np.result_type(a.dtype, b.dtype)
        if name == "outer":
            return Val(vt.matrix(a.shape[0], b.shape[0], dtype), alg.outer(args[0].comps, args[1].comps, fl.temp,
                                                                          node))
        if a.shape != b.shape:
            raise fl.error(f"qgraph.{name}({a.name}, {b.name}): the lengths differ", node)
        if name == "dot":
            return Val(None, [alg.dot(args[0].comps, args[1].comps, node)])
        if a.shape[0] not in (2, 3):
            raise fl.error(f"qgraph.cross() takes two vec2 or two vec3, got {a.name}", node)
        comps = alg.cross(args[0].comps, args[1].comps, fl.temp, node)
        return Val(None, comps) if a.shape[0] == 2 else Val(vt.vector(3, dtype), comps)
    comps = args[0].comps
    if name == "norm":
        return Val(None, [alg.norm(comps, fl.temp, node)])
    if name == "norm_sqr":
        shared = alg.share(comps, fl.temp)
        return Val(None, [alg.dot(shared, shared, node)])
    if name == "normalized":
        if a.is_matrix:
            raise fl.error("qgraph.normalized() takes a vector", node)
        return Val(a, alg.normalized(comps, fl.temp, node))
    if not a.is_matrix:
        raise fl.error(f"qgraph.{name}() takes a matrix, got a {a.name}", node)
    if name == "transpose":
        shape, out = alg.transpose(a.shape, comps)
        return Val(shaped(shape, a.dtype), out)
    n, m = a.shape
    if n != m:
        raise fl.error(f"qgraph.{name}() takes a square matrix, got a {a.name}", node)
    if name == "trace":
        return Val(None, [alg.total([comps[k * n + k] for k in range(n)], node)])
    if n not in (2, 3):
        raise fl.error(f"qgraph.{name}() supports 2x2 and 3x3 matrices, got a {a.name}", node)
    if name == "determinant":
        return Val(None, [alg.determinant(n, comps, fl.temp, node)])
    return Val(a, alg.inverse(n, comps, fl.temp, node))


# --------------------------------------------------------------------------- elementwise


def elementwise(fl, node: ast.Call) -> Val:
    """f(v, ...) applied per component, scalars broadcast (abs, math.sqrt, qgraph.clamp, ...)."""
    args = [fl.value(a) for a in node.args]
    for kw in node.keywords:
        kw.value = fl.scalar(kw.value)
    vecs = [a.vec for a in args if a.vec]
    if not vecs:
        node.args = [a.expr for a in args]
        return Val(None, [node])
    t = vecs[0]
    if any(v.shape != t.shape for v in vecs):
        raise fl.error(f"{ast.unparse(node.func)}(): the vector arguments differ in shape", node)
    to_float = TO_FLOAT.get(fl.resolve(node.func)) if isinstance(node.func, (ast.Name, ast.Attribute)) else None
    if to_float is not None:  # math.floor(v): per component to floats, so the vector keeps its type
        node.func = alg.loc(ast.Name(to_float, ast.Load()), node.func)
    args = [fl.broadcast(a, t, node) for a in args]
    comps = [alg.loc(ast.Call(node.func, [a.comps[k] for a in args], node.keywords), node) for k in range(t.size)]
    return Val(t, comps)


def min_max(fl, fn, node: ast.Call) -> Val:
    if len(node.args) == 1:
        arg = fl.value(node.args[0])
        if arg.vec:  # min(v): the smallest component
            comps = alg.share(arg.comps, fl.temp)
            out = comps[0]
            for c in comps[1:]:
                out = alg.loc(ast.Call(node.func, [out, c], []), node)
            return Val(None, [out])
        node.args = [arg.expr]
        return Val(None, [node])
    return elementwise(fl, node)


# --------------------------------------------------------------------------- funcs


def _bind(fl, fn, node: ast.Call) -> list[Val]:
    """The call's arguments in parameter order (keywords and literal defaults bound)."""
    params = fn.source.params
    values: list = [None] * len(params)
    if len(node.args) > len(params):
        raise fl.error(f"{fn.__name__}() takes {len(params)} arguments, got {len(node.args)}", node)
    for k, a in enumerate(node.args):
        values[k] = fl.value(a)
    names = [p.name for p in params]
    for kw in node.keywords:
        if kw.arg not in names:
            raise fl.error(f"{fn.__name__}() has no parameter '{kw.arg}'", node)
        values[names.index(kw.arg)] = fl.value(kw.value)
    defaults = _defaults(fn.fn)
    for k, v in enumerate(values):
        if v is None:
            if names[k] not in defaults:
                raise fl.error(f"{fn.__name__}() is missing the argument '{names[k]}'", node)
            d = defaults[names[k]]
            if not isinstance(d, (bool, int, float)):
                raise fl.error(f"{fn.__name__}(): pass '{names[k]}' explicitly (only number defaults are "
                               "filled in)", node)
            values[k] = Val(None, [alg.const(d, node)])
    return values


def _defaults(f) -> dict:
    code = f.__code__
    names = code.co_varnames[:code.co_argcount]
    out = dict(zip(names[len(names) - len(f.__defaults__ or ()):], f.__defaults__ or ()))
    out.update(f.__kwdefaults__ or {})
    return out
