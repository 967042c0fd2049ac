"""Atomics in flattened code (for lang.flat.calls): `qgraph.atomic_*(x, index, value)` on an
array of vectors becomes one atomic per component the index leaves, and on a plain array its
index is checked to name one element."""

from __future__ import annotations

import ast

from . import vector_algebra as alg
from .values import Val, component_indices, element_type, shaped, subscript_of, subscript_parts


def atomic(fl, node: ast.Call) -> Val:
    """qgraph.atomic_add(x, i, v) on an array of vectors: one atomic per component of the
    element (or the row, or the one component) the index leaves, as `x[i]` would read it:
    `atomic_max(x, (i, 1), v)` updates component 1 of `x[i]` and returns its old value."""
    target = fl.value(node.args[0])
    element = element_type(target.type)
    value = fl.value(node.args[2])
    if element is None:
        if value.vec:
            raise fl.error(f"{ast.unparse(node.func)}: a {value.vec.name} value needs an array of vectors "
                           f"(annotate {ast.unparse(node.args[0])} as qgraph.{value.vec.name}[:])", node)
        _check_index_count(fl, node, target)
        node.args = [target.expr, fl.scalar(node.args[1]), value.expr]
        return Val(None, [node])
    parts = [fl.scalar(p) for p in subscript_parts(node.args[1])]
    extra = len(parts) - (target.type.ndim - len(element.shape))  # indices into the element
    if not 0 <= extra <= len(element.shape):
        raise fl.error(f"{ast.unparse(node.func)}: {len(parts)} indices for {ast.unparse(node.args[0])}, "
                       f"an array of {target.type.ndim - len(element.shape)} index dimension(s) of "
                       f"{element.name}; give one per dimension, then optionally the component "
                       f"(qgraph.atomic_add(x, (i, 1), v) updates x[i][1])", node)
    element = shaped(element.shape[extra:], element.dtype)
    if element is None:  # one component
        if value.vec:
            where = ", ".join(ast.unparse(p) for p in subscript_parts(node.args[1]))
            raise fl.error(f"{ast.unparse(node.func)}: a {value.vec.name} value for the single component "
                           f"{ast.unparse(node.args[0])}[{where}]; pass a number, or drop the component "
                           "index to update the whole element", node)
        node.args = [target.expr, subscript_of(parts, node), value.expr]
        return Val(None, [node])
    indices = component_indices(fl, parts, element.shape, node)
    value = alg.share(fl.broadcast(value, element, node).comps, fl.temp)
    return Val(element, [alg.loc(ast.Call(node.func, [target.expr, index, v], []), node)
                         for index, v in zip(indices, value)])


def _check_index_count(fl, node: ast.Call, target: Val) -> None:
    """An atomic updates one element: one index per dimension of a plain array (`()` for 0-d).
    Checked where the count is known before typing (a tuple held in a local is not)."""
    index = node.args[1]
    if isinstance(index, ast.Tuple):
        count = len(index.elts)
    elif isinstance(index, ast.Name):
        count = 1 if fl.task is not None and index.id in fl.task.loop_vars else None
    else:
        count = 1 if isinstance(index, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Subscript)) else None
    ndim = target.type.ndim if getattr(target.type, "is_array", False) else None
    if count is None or ndim is None or count == ndim:
        return
    how = {0: "() for a 0-d array", 1: "one integer, e.g. i"}.get(ndim, f"a tuple of {ndim}, e.g. (i, j)")
    raise fl.error(f"{ast.unparse(node.func)}: {count} ind{'ex' if count == 1 else 'ices'} for "
                   f"{ast.unparse(node.args[0])}, a {ndim}-d array; an atomic updates one element, so give "
                   f"one index per dimension: {how}", node)
