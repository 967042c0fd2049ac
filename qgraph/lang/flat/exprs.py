"""Expressions of flattened code (the expression half of lang.flat.flatten.Flattener): each
lowers to a Val, a type and its components."""

from __future__ import annotations

import ast

from ..types import vector_types as vt
from ..types.vector_types import VectorType
from . import vector_algebra as alg
from .calls import lower_call
from .tuples import is_tuple, item, lower_tuple, misuse
from .values import (
    ROW,
    SWIZZLE,
    VECTOR_METHODS,
    Val,
    by_value_type,
    component_indices,
    constant_int,
    element_type,
    is_struct,
    leaves,
    result_dtype,
    shaped,
    subscript_of,
    subscript_parts,
)


class Expressions(ast.NodeVisitor):
    """Base of lang.flat.flatten.Flattener: `value(node)` lowers an expression through its
    `visit_<Node>` method (ast.NodeVisitor's dispatch), or `generic_visit` where it has none."""

    # ------------------------------------------------------------------ expressions

    def scalar(self, node: ast.expr) -> ast.expr:
        value = self.value(node)
        if value.vec:
            raise self.error(f"a {value.vec.name} cannot be used here; use a component (v.x, v[0]) or a "
                             "scalar function of it (qgraph.norm(v))", node)
        if is_struct(value.type):
            raise self.error("a struct cannot be used here; use its fields (s.x)", node)
        return value.expr

    def value(self, node: ast.expr, tuples: bool = False) -> Val:
        """`node` lowered; a tuple holding vectors only where `tuples` says one may stand (a
        return, an unpacking, a statement, an item taken), else an error naming what to write."""
        out = self.visit(node)
        if not tuples and is_tuple(out):
            raise self.error(misuse(out, node), node)
        return out

    def generic_visit(self, node: ast.AST) -> Val:
        """An expression no visit_ method lowers: its sub-expressions must be scalars."""
        for field, child in ast.iter_fields(node):
            if isinstance(child, ast.expr):
                setattr(node, field, self.scalar(child))
            elif isinstance(child, list) and field not in ("generators",):
                setattr(node, field, [self.scalar(c) if isinstance(c, ast.expr) else c for c in child])
        return Val(None, [node])

    def visit_Name(self, node: ast.Name) -> Val:
        t = self.env.get(node.id)
        if isinstance(t, VectorType):
            return Val(t, [alg.name(n, node) for n, _ in leaves(node.id, t)])
        if is_struct(t):
            return Val(t, [alg.name(node.id, node)])
        if t is None:
            constant = self.vector_constant(node)
            if constant is not None:
                return constant
        return Val(t, [node])

    def vector_constant(self, node: ast.expr) -> Val | None:
        """A module-level or closure vector (`GRAVITY = qgraph.vec2(0.0, -9.8)`, `consts.GRAVITY`)
        as its components, compiled in; lang.front.globals_used checks at each call that it is unchanged."""
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or root.id in self.env or root.id in self.local_names:
            return None
        value = self.src.resolve(node)
        t = vt.type_of_value(value)
        if t is None:
            return None
        return Val(t, [alg.cast(t.dtype, alg.literal(c, node), node) for c in value.reshape(-1).tolist()])

    def visit_Attribute(self, node: ast.Attribute) -> Val:
        constant = self.vector_constant(node)
        if constant is not None:
            return constant
        base = self.value(node.value)
        if is_struct(base.type):
            for field, ft in base.type.fields:
                if field == node.attr:
                    flat = f"{base.expr.id}__{field}"
                    ft = by_value_type(ft)
                    if isinstance(ft, VectorType):
                        return Val(ft, [alg.name(n, node) for n, _ in leaves(flat, ft)])
                    return Val(ft, [alg.name(flat, node)])
            names = ", ".join(f for f, _ in base.type.fields)
            raise self.error(f"struct {base.type.name} has no field '{node.attr}' (fields: {names})", node)
        v = base.vec
        if v is None:
            node.value = base.expr
            return Val(None, [node])
        if node.attr == "T" and v.is_matrix:
            shape, comps = alg.transpose(v.shape, base.comps)
            return Val(shaped(shape, v.dtype), comps)
        if not v.is_matrix and node.attr and all(c in SWIZZLE for c in node.attr) and len(node.attr) <= 4:
            picks = [SWIZZLE[c] for c in node.attr]
            if max(picks) >= v.shape[0]:
                raise self.error(f"a {v.name} has no component '{node.attr}'", node)
            comps = [base.comps[k] for k in picks]
            if len(comps) == 1:
                return Val(None, comps)
            return self.share(Val(vt.vector(len(comps), v.dtype), comps)) if len(set(picks)) < len(picks) \
                else Val(vt.vector(len(comps), v.dtype), comps)
        raise self.error(f"a {v.name} has no attribute '{node.attr}' (components .x .y .z .w, methods "
                         f"{', '.join(sorted(VECTOR_METHODS))})", node)

    def visit_Subscript(self, node: ast.Subscript) -> Val:
        base = self.value(node.value, tuples=True)
        if is_tuple(base):
            return item(self, base, node)
        if isinstance(node.slice, ast.Slice) or any(isinstance(p, ast.Slice) for p in subscript_parts(node.slice)):
            if base.vec or element_type(base.type):
                raise self.error("slices of vectors and vector arrays are not supported; use components", node)
            node.value = base.expr
            node.slice = self.scalar(node.slice) if not isinstance(node.slice, ast.Slice) else node.slice
            return Val(None, [node])
        parts = [self.scalar(p) for p in subscript_parts(node.slice)]
        if base.vec:
            return self.component(base, parts, node)
        element = element_type(base.type)
        ndim = getattr(base.type, "ndim", None)
        if element is not None:
            logical = ndim - len(element.shape)
            extra = len(parts) - logical
            if extra < 0:
                raise self.error(f"{ast.unparse(node.value)} has {logical} index dimension(s) (elements "
                                 f"{element.name}); index it with {logical} indices", node)
            sub = element.shape[extra:]
            if not sub:
                return Val(None, [alg.loc(ast.Subscript(base.expr, subscript_of(parts, node), ast.Load()), node)])
            comps = [alg.loc(ast.Subscript(base.expr, index, ast.Load()), node)
                     for index in component_indices(self, parts, sub, node)]
            return Val(shaped(sub, element.dtype), comps)
        index = subscript_of(parts, node) if parts else node.slice
        out = alg.loc(ast.Subscript(base.expr, index, ast.Load()), node)
        if ndim is not None and 0 < len(parts) < ndim:
            return Val(ROW, [out])
        return Val(None, [out])

    def component(self, base: Val, parts: list[ast.expr], node: ast.AST) -> Val:
        v = base.vec
        if len(parts) > len(v.shape):
            raise self.error(f"too many indices for a {v.name}", node)
        consts = [constant_int(p) for p in parts]
        if all(c is not None for c in consts):
            for c, n in zip(consts, v.shape):
                if not -n <= c < n:
                    raise self.error(f"index {c} is out of range for a {v.name}", node)
            consts = [c % n for c, n in zip(consts, v.shape)]
            if len(v.shape) == 1:
                return Val(None, [base.comps[consts[0]]])
            if len(parts) == 2:
                return Val(None, [base.comps[consts[0] * v.shape[1] + consts[1]]])
            row = base.comps[consts[0] * v.shape[1]:(consts[0] + 1) * v.shape[1]]
            return Val(vt.vector(v.shape[1], v.dtype), row)
        parts = [p if alg.is_simple(p) else self.temp(p) for p in parts]
        comps = self.share(base).comps
        if len(v.shape) == 1:
            return Val(None, [alg.select(parts[0], comps, node)])
        cols = v.shape[1]
        rows = [comps[r * cols:(r + 1) * cols] for r in range(v.shape[0])]
        if len(parts) == 2:
            return Val(None, [alg.select(parts[0], [alg.select(parts[1], r, node) for r in rows], node)])
        return Val(vt.vector(cols, v.dtype), [alg.select(parts[0], [r[c] for r in rows], node) for c in range(cols)])

    def visit_BinOp(self, node: ast.BinOp) -> Val:
        return self.binop(self.value(node.left), node.op, self.value(node.right), node)

    def binop(self, left: Val, op: ast.operator, right: Val, node: ast.AST) -> Val:
        for side in (left, right):
            if side.type == ROW and isinstance(op, ast.MatMult):
                raise self.error("the @ operator works on qgraph vector and matrix values, and a row of a plain "
                                 "array is neither: annotate the parameter as an array of matrices or vectors "
                                 "(A: qgraph.mat33[:]) or read the row with qgraph.mat33(A[i])", node)
            if side.type == ROW and (left.vec or right.vec):
                raise self.error("a row of a plain array is not a vector: read it as one with qgraph.vec3(x[i]) "
                                 "(or qgraph.vector(n, dtype)(x[i])), or annotate the parameter as an array of "
                                 "vectors (x: qgraph.vec3[:])", node)
        if isinstance(op, ast.MatMult):
            if not (left.vec and right.vec):
                raise self.error("the @ operator works on qgraph vector and matrix values (qgraph.vec3, "
                                 "qgraph.mat33, ...): annotate matrix arrays as qgraph.mat33[:] so that A[p] is "
                                 "a matrix, or build one with qgraph.mat33(...)", node)
            a, b = left.vec, right.vec
            inner_a = a.shape[-1]
            inner_b = b.shape[0]
            if inner_a != inner_b:
                raise self.error(f"{a.name} @ {b.name}: the inner dimensions differ ({inner_a} != {inner_b})", node)
            shape, comps = alg.matmul(a.shape, left.comps, b.shape, right.comps, self.temp, node)
            return Val(shaped(shape, result_dtype(a, b)), comps)
        if not left.vec and not right.vec:
            for side in (left, right):
                if is_struct(side.type):
                    raise self.error("a struct cannot be used in arithmetic; use its fields (s.x)", node)
            return Val(None, [alg.binop(left.expr, op, right.expr, node)])
        if left.vec and right.vec and left.vec.shape != right.vec.shape:
            raise self.error(f"{left.vec.name} {type(op).__name__} {right.vec.name}: the shapes differ "
                             "(use @ for matrix products)", node)
        t = shaped((left.vec or right.vec).shape, result_dtype(left.vec, right.vec))
        n = t.size
        lc = left.comps if left.vec else [left.expr] * n
        rc = right.comps if right.vec else [right.expr] * n
        if not left.vec and not alg.is_simple(left.expr):
            lc = [self.temp(left.expr)] * n
        if not right.vec and not alg.is_simple(right.expr):
            rc = [self.temp(right.expr)] * n
        return Val(t, [alg.binop(a, op, b, node) for a, b in zip(lc, rc)])

    def broadcast(self, value: Val, t: VectorType, node: ast.AST) -> Val:
        if value.vec:
            if value.vec.shape != t.shape:
                raise self.error(f"a {value.vec.name} where a {t.name} is expected", node)
            return value
        if value.type == ROW:
            raise self.error(f"a row of a plain array is not a {t.name}: read it with {t.name}(x[i]) or annotate "
                             f"the parameter as {t.name}[:]", node)
        expr = value.expr if alg.is_simple(value.expr) else self.temp(value.expr)
        return Val(t, [expr] * t.size)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Val:
        operand = self.value(node.operand)
        if not operand.vec:
            node.operand = operand.expr
            return Val(None, [node])
        if isinstance(node.op, ast.Not):
            raise self.error(f"'not' of a {operand.vec.name}: compare components instead", node)
        return Val(operand.vec, [alg.loc(ast.UnaryOp(node.op, c), node) for c in operand.comps])

    def visit_Compare(self, node: ast.Compare) -> Val:
        node.left = self.scalar(node.left)
        node.comparators = [self.scalar(c) for c in node.comparators]
        return Val(None, [node])

    def visit_IfExp(self, node: ast.IfExp) -> Val:
        test = self.condition(node.test)
        saved, self.pre = self.pre, []
        body = self.value(node.body)
        body_pre, self.pre = self.pre, []
        orelse = self.value(node.orelse)
        else_pre, self.pre = self.pre, saved
        if not body.vec and not orelse.vec and not body_pre and not else_pre:
            return Val(None, [alg.loc(ast.IfExp(test, body.expr, orelse.expr), node)])
        t = body.vec or orelse.vec
        if t is not None:
            body, orelse = self.broadcast(body, t, node), self.broadcast(orelse, t, node)
        names = [f"_qg_v{self.counter.next + k}" for k in range(len(body.comps))]
        self.counter.next += len(names)

        def stores(val: Val) -> list[ast.stmt]:
            return [self.assign(alg.loc(ast.Name(n, ast.Store()), node), c, node) for n, c in zip(names, val.comps)]

        self.pre.append(alg.loc(ast.If(test, body_pre + stores(body), else_pre + stores(orelse)), node))
        return Val(t, [alg.name(n, node) for n in names])

    def visit_Call(self, node: ast.Call) -> Val:
        return lower_call(self, node)

    def visit_Tuple(self, node: ast.Tuple) -> Val:
        return lower_tuple(self, node)
