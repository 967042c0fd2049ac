"""Tuples holding vectors (for lang.flat.flatten and lang.flat.view): `return p, v, e` from a
@qgraph.func and `p, v, e = step(p, v, dt)` at its call. A tuple is flattened to every item's
components in a row, so the helper returns one tuple of scalars (as a vector result does) and
every later pass, both backends and the adjoint's inlining see only scalars."""

from __future__ import annotations

import ast

from ..types.vector_types import VectorType
from . import vector_algebra as alg
from .values import Val, constant_int, is_struct, subscript_parts


class TupleType:
    """The type of a tuple holding a vector or matrix: each item's VectorType, None for a number."""

    __slots__ = ("items",)

    def __init__(self, items) -> None:
        self.items: tuple[VectorType | None, ...] = tuple(items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TupleType) and self.items == other.items

    def __hash__(self) -> int:
        return hash(("tuple", self.items))

    @property
    def size(self) -> int:
        return sum(t.size if t else 1 for t in self.items)

    @property
    def name(self) -> str:
        return f"({', '.join(t.name if t else 'number' for t in self.items)})"

    @property
    def shape(self) -> tuple:
        """What must agree between a helper's returns (its items' shapes; dtypes may differ)."""
        return ("tuple",) + tuple(t.shape if t else None for t in self.items)

    def split(self, comps: list[ast.expr]) -> list[Val]:
        out, k = [], 0
        for t in self.items:
            n = t.size if t else 1
            out.append(Val(t, comps[k : k + n]))
            k += n
        return out


def is_tuple(value: Val) -> bool:
    return isinstance(value.type, TupleType)


def lower_tuple(fl, node: ast.Tuple) -> Val:
    """`(p, v, e)`: a TupleType value when an item is a vector, else the scalar tuple as written."""
    items = [fl.value(e, tuples=True) for e in node.elts]
    if any(is_tuple(v) for v in items):
        raise fl.error(
            "a tuple holding vectors cannot be an item of another tuple; make it one flat tuple "
            "(return p, v, e) and unpack it the same way (p, v, e = ...)",
            node,
        )
    if any(is_struct(v.type) for v in items):
        raise fl.error(
            "a struct is a group of parameters, not a value: it cannot be put in a tuple or returned "
            "from a @qgraph.func; use its fields (return s.x, s.v)",
            node,
        )
    if not any(v.vec for v in items):
        node.elts = [v.expr for v in items]
        return Val(None, [node])
    if any(isinstance(e, ast.Starred) for e in node.elts):
        raise fl.error("a tuple holding vectors cannot have starred items (*t); list its items", node)
    return Val(TupleType(v.vec for v in items), [c for v in items for c in (v.comps if v.vec else [v.expr])])


def misuse(value: Val, node: ast.expr) -> str:
    """Why a tuple holding vectors cannot stand where it does, and what to write instead."""
    t = value.type
    names = ", ".join(f"x{k}" for k in range(len(t.items)))
    if isinstance(node, ast.Call):
        f = ast.unparse(node.func)
        return (
            f"{f}() returns a tuple {t.name}: unpack it where it is called ({names} = {f}(...)) or take one "
            f"item ({f}(...)[0]); a tuple is not a value of its own"
        )
    return f"a tuple holding vectors {t.name} can only be unpacked ({names} = ...) or returned from a @qgraph.func"


def item(fl, base: Val, node: ast.Subscript) -> Val:
    """`step(p, v)[1]`: one item of a tuple result, at a constant index."""
    parts = subscript_parts(node.slice)
    k = constant_int(fl.scalar(parts[0])) if len(parts) == 1 else None
    n = len(base.type.items)
    if k is None or not -n <= k < n:
        raise fl.error(f"index a tuple {base.type.name} with one constant from {-n} to {n - 1}", node)
    return base.type.split(base.comps)[k % n]


def unpack(fl, target: ast.Tuple | ast.List, value: Val, at: ast.stmt) -> list[ast.stmt]:
    """`p, v, e = value`: each item stored into its target, every item read before any store
    (so `p, v = v, p` swaps, as in Python)."""
    t = value.type
    if any(isinstance(e, ast.Starred) for e in target.elts):
        raise fl.error(f"a tuple {t.name} is unpacked into exactly {len(t.items)} targets, without *", at)
    if len(target.elts) != len(t.items):
        raise fl.error(f"cannot unpack a tuple of {len(t.items)} values {t.name} into {len(target.elts)} targets", at)
    written = {n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

    def read_first(c: ast.expr) -> bool:
        return any(isinstance(n, ast.Name) and (n.id in written or n.id.split("__")[0] in written) for n in ast.walk(c))

    comps = [fl.temp(c) if not alg.is_simple(c) or read_first(c) else c for c in value.comps]
    return [s for tgt, val in zip(target.elts, t.split(comps)) for s in fl.store(tgt, val, at)]


def helper_result(returns: list) -> tuple[object, bool]:
    """The result type of a helper with these returns (None: numbers; a VectorType; a
    TupleType), and whether they agree in shape (a helper returns one type)."""
    shapes = {None if r is None else r.shape for r in returns}
    typed = [r for r in returns if r is not None]
    return (typed[0] if typed else None), len(shapes) <= 1
