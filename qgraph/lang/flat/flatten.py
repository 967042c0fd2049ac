"""Vectors, matrices and structs become scalars: the per-signature rewrite before codegen.

A vector local `v` becomes the locals `v__0, v__1, v__2`; a vector element of an array is
its trailing components (`x[i]` reads `x[i, 0], x[i, 1], x[i, 2]`); a struct parameter `s`
becomes one parameter per leaf field (`s.x` is the parameter `s__x`); a @qgraph.func is
specialised per argument types, vectors passed as their components and returned as a
tuple. Everything after this pass (weak typing, updates and atomics, reductions, both
backends) sees only scalar code, so vector code compiles to registers and costs what the
same arithmetic written by hand costs.
"""

from __future__ import annotations

import ast
import math

import numpy as np

from ..front import ast_clone
from ..front.parse import UNRESOLVED, KernelSource, collect_names
from ..types import vector_types as vt
from ..types.vector_types import VectorType
from . import vector_algebra as alg
from .exprs import Expressions
from .tuples import is_tuple, misuse, unpack
from .values import (
    ROW,
    Val,
    component_indices,
    constant_int,
    is_struct,
    leaves,
    subscript_of,
    subscript_parts,
    unshared,
)

GLOBALS = {alg.MATH: math, alg.NUMPY: np}  # names the generated code uses, added to every namespace

class Flattener(Expressions):
    """Rewrites one block (a task body or a func body) for given parameter types.

    `env` maps parameters to their types (a kind, or a VectorType for a func's vector
    parameter; scalars and plain arrays may be absent); `specs` specialises funcs."""

    def __init__(self, src: KernelSource, env: dict, specs, taken: set[str], counter, task=None,
                 default_float: str = "f64") -> None:
        self.src = src
        self.task = task  # None in a @qgraph.func
        self.default_float = default_float  # the precision of qgraph.random() without a dtype
        self.random_draws = 0
        self.env = dict(env)
        self.params = set(env)
        self.specs = specs
        self.taken = taken  # every name the source uses: generated names must not collide
        self.counter = counter  # numbers temporaries (shared by a kernel's tasks)
        self.pre: list[ast.stmt] = []
        self.returns: list[object] = []
        # names local to the function (parameters, anything it assigns): never a module-level vector
        args = src.fn_def.args
        self.local_names = collect_names(src.fn_def.body).stored | {
            a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}

    def run(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """The flattened block. A first pass learns which locals hold vectors (a loop may
        read one before the line that assigns it); its output and errors are dropped."""

        from ...errors import QgraphSyntaxError

        params, start, mark = dict(self.env), self.counter.next, self.specs.snapshot()
        for stmt in body:
            try:
                self.block([ast_clone.clone(stmt)])
            except QgraphSyntaxError:
                pass
        learned = {n: t for n, t in self.env.items() if isinstance(t, VectorType) and n not in params}
        self.env = {**params, **learned}
        self.counter.next, self.returns, self.random_draws = start, [], 0
        self.specs.restore(mark)
        return [unshared(s) for s in self.block(body)]

    def error(self, message: str, node: ast.AST):
        return self.src.error(message, node)

    # ------------------------------------------------------------------ names

    def temp(self, value: ast.expr) -> ast.expr:
        name = f"_qg_v{self.counter.next}"
        self.counter.next += 1
        self.pre.append(alg.loc(ast.Assign([alg.loc(ast.Name(name, ast.Store()), value)], value), value))
        return alg.name(name, value)

    def share(self, val: Val) -> Val:
        return Val(val.type, alg.share(val.comps, self.temp))

    def resolve(self, func: ast.expr) -> object:
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and (root.id in self.env or root.id in self.params):
            return UNRESOLVED
        return self.src.resolve(func)

    def local_vector(self, name: str, t: VectorType, node: ast.AST) -> list[str]:
        old = self.env.get(name)
        if name in self.params and not isinstance(old, VectorType):
            raise self.error(f"cannot assign a {t.name} to the parameter '{name}'", node)
        if old is not None and (not isinstance(old, VectorType) or old.shape != t.shape):
            what = old.name if isinstance(old, VectorType) else "another type"
            raise self.error(f"'{name}' holds a {what} elsewhere and a {t.name} here; a local keeps one "
                             "vector shape (use another name)", node)
        self.env[name] = t
        names = [n for n, _ in leaves(name, t)]
        clash = [n for n in names if n in self.taken]
        if clash:
            raise self.error(f"the vector '{name}' needs the names {', '.join(names)}, but '{clash[0]}' is "
                             "already used in this kernel; rename one of them", node)
        return names

    # ------------------------------------------------------------------ statements

    def block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            saved, self.pre = self.pre, []
            lowered = self.stmt(stmt)
            out += self.pre + lowered
            self.pre = saved
        return out

    def stmt(self, node: ast.stmt) -> list[ast.stmt]:
        return self.visit(node)

    def generic_visit(self, node: ast.AST) -> list[ast.stmt] | Val:
        """A statement no visit_ method rewrites keeps its shape, with scalar expressions."""
        if isinstance(node, ast.stmt):
            return [self.generic(node)]
        return super().generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> list[ast.stmt]:
        value = self.value(node.value, tuples=True)
        if len(node.targets) > 1 and (value.vec or len(value.comps) > 1):
            value = self.share(value)
        out: list[ast.stmt] = []
        for target in node.targets:
            out += self.store(target, value, node)
        return out

    def visit_AnnAssign(self, node: ast.AnnAssign) -> list[ast.stmt]:
        if node.value is None:
            return []
        return self.store(node.target, self.value(node.value), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> list[ast.stmt]:
        target = node.target
        current = self.load_target(target)
        value = self.value(node.value)
        if current.type == ROW and value.vec:
            value = self.share(value)
            return [alg.loc(ast.AugAssign(t, node.op, c), node)
                    for t, c in zip(self.row_targets(target, value.vec, node), value.comps)]
        dynamic = self.dynamic_component_store(target, node.op, value, node)
        if dynamic is not None:
            return dynamic
        if not current.vec and not value.vec:
            return [alg.loc(ast.AugAssign(self.scalar_target(target), node.op, value.expr), node)]
        if isinstance(node.op, ast.MatMult) or not current.vec:
            combined = self.binop(current, node.op, value, node)
            return self.store(target, combined, node)
        value = self.broadcast(value, current.vec, node)
        value = self.share(value)
        out = []
        for store, comp in zip(self.target_parts(target, current.vec, node), value.comps):
            out.append(alg.loc(ast.AugAssign(store, node.op, comp), node))
        return out

    def visit_Expr(self, node: ast.Expr) -> list[ast.stmt]:
        value = self.value(node.value, tuples=True)
        if value.vec or is_tuple(value):  # e.g. a vector atomic: each component is a statement
            return [alg.loc(ast.Expr(c), node) for c in value.comps if not alg.is_simple(c)]
        return [alg.loc(ast.Expr(value.expr), node)]

    def visit_If(self, node: ast.If) -> list[ast.stmt]:
        test = self.condition(node.test)
        return [alg.loc(ast.If(test, self.block(node.body), self.block(node.orelse)), node)]

    def visit_While(self, node: ast.While) -> list[ast.stmt]:
        saved, self.pre = self.pre, []
        test = self.condition(node.test)
        hoisted, self.pre = self.pre, saved
        body = self.block(node.body)
        if not hoisted:
            return [alg.loc(ast.While(test, body, self.block(node.orelse)), node)]
        if node.orelse:
            raise self.error("while ... else with a vector expression in its condition is not supported; "
                             "compute the condition into a local first", node)
        stop = alg.loc(ast.If(alg.loc(ast.UnaryOp(ast.Not(), test), node), [alg.loc(ast.Break(), node)], []), node)
        return [alg.loc(ast.While(alg.const(True, node), hoisted + [stop] + body, []), node)]

    def visit_For(self, node: ast.For) -> list[ast.stmt]:
        iter_ = self.value(node.iter)
        if iter_.vec:
            raise self.error("cannot iterate over a vector in a kernel; loop over its indices: "
                             "`for k in range(3): ... v[k]`", node)
        return [alg.loc(ast.For(node.target, iter_.expr, self.block(node.body), self.block(node.orelse)), node)]

    def visit_Return(self, node: ast.Return) -> list[ast.stmt]:
        if node.value is None:
            self.returns.append(None)
            return [node]
        value = self.value(node.value, tuples=True)
        self.returns.append(value.type if value.vec or is_tuple(value) else None)
        if is_struct(value.type):
            raise self.error("a @qgraph.func cannot return a struct; return its fields", node)
        if value.vec or is_tuple(value):
            return [alg.loc(ast.Return(alg.loc(ast.Tuple(value.comps, ast.Load()), node)), node)]
        return [alg.loc(ast.Return(value.expr), node)]

    def generic(self, node: ast.stmt) -> ast.stmt:
        for field, child in ast.iter_fields(node):
            if isinstance(child, ast.expr) and field != "target":
                setattr(node, field, self.scalar(child))
        return node

    def condition(self, test: ast.expr) -> ast.expr:
        value = self.value(test)
        if value.vec:
            raise self.error(f"a {value.vec.name} is not a condition; compare components (v.x > 0) or a norm "
                             "(qgraph.norm(v) < r)", test)
        return value.expr

    # ------------------------------------------------------------------ stores

    def store(self, target: ast.expr, value: Val, at: ast.stmt) -> list[ast.stmt]:
        if is_tuple(value):
            if isinstance(target, (ast.Tuple, ast.List)):
                return unpack(self, target, value, at)
            raise self.error(misuse(value, at.value), at)
        if isinstance(target, ast.Name):
            if value.vec:
                names = self.local_vector(target.id, value.vec, at)
                comps = alg.share(value.comps, self.temp)
                return [self.assign(alg.loc(ast.Name(n, ast.Store()), at), c, at) for n, c in zip(names, comps)]
            if isinstance(self.env.get(target.id), VectorType):
                raise self.error(f"'{target.id}' holds a {self.env[target.id].name} elsewhere; a local keeps one "
                                 "type (use another name)", at)
            if is_struct(value.type):
                raise self.error("a struct cannot be copied into a local; use its fields (s.x)", at)
            return [self.assign(target, value.expr, at)]
        if isinstance(target, (ast.Tuple, ast.List)):
            return self.store_tuple(target, value, at)
        dynamic = self.dynamic_component_store(target, None, value, at)
        if dynamic is not None:
            return dynamic
        current = self.load_target(target)
        if current.type == ROW and value.vec:  # a vector into a row of a plain array: its components
            value = self.share(value)
            return [self.assign(t, c, at) for t, c in zip(self.row_targets(target, value.vec, at), value.comps)]
        if not current.vec:
            if value.vec:
                raise self.error(f"cannot store a {value.vec.name} into the scalar {ast.unparse(target)}", at)
            return [self.assign(self.scalar_target(target), value.expr, at)]
        value = self.share(self.broadcast(value, current.vec, at))
        return [self.assign(t, c, at) for t, c in zip(self.target_parts(target, current.vec, at), value.comps)]

    def dynamic_component_store(self, target: ast.expr, op, value: Val, at: ast.stmt) -> list[ast.stmt] | None:
        """`v[k] = e` (or `v[k] += e`) with `k` known only at run time: a branch per component."""
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
            return None
        t = self.env.get(target.value.id)
        if not isinstance(t, VectorType):
            return None
        parts = [self.scalar(p) for p in subscript_parts(target.slice)]
        if all(constant_int(p) is not None for p in parts) or len(parts) > len(t.shape):
            return None
        parts = [p if alg.is_simple(p) else self.temp(p) for p in parts]
        value = self.share(value)
        names = [n for n, _ in leaves(target.value.id, t)]
        cols = t.shape[1] if t.is_matrix else 1
        branches = []  # (condition, component names, values)
        if len(parts) == len(t.shape):
            for k in range(t.size):
                idx = np.unravel_index(k, t.shape)
                tests = [alg.loc(ast.Compare(p, [ast.Eq()], [alg.const(int(i), at)]), at) for p, i in zip(parts, idx)]
                branches.append((tests, [names[k]], [value.expr]))
        else:  # a row of a matrix
            row = self.broadcast(value, vt.vector(cols, t.dtype), at).comps
            for r in range(t.shape[0]):
                test = alg.loc(ast.Compare(parts[0], [ast.Eq()], [alg.const(r, at)]), at)
                branches.append(([test], names[r * cols:(r + 1) * cols], row))
        chain: list[ast.stmt] = []
        for tests, comps, vals in reversed(branches):
            cond = tests[0] if len(tests) == 1 else alg.loc(ast.BoolOp(ast.And(), tests), at)
            body = [alg.loc(ast.Assign([alg.loc(ast.Name(n, ast.Store()), at)], v), at) if op is None else
                    alg.loc(ast.AugAssign(alg.loc(ast.Name(n, ast.Store()), at), op, v), at)
                    for n, v in zip(comps, vals)]
            chain = [alg.loc(ast.If(cond, body, chain), at)]
        return chain

    def row_targets(self, target: ast.Subscript, t: VectorType, at: ast.AST) -> list[ast.expr]:
        """Store targets of a vector's components in a row `x[i]` of a plain array."""
        base = self.value(target.value)
        parts = [self.scalar(p) for p in subscript_parts(target.slice)]
        if base.type.ndim - len(parts) != len(t.shape):
            raise self.error(f"cannot store a {t.name} into {ast.unparse(target)}: it has "
                             f"{base.type.ndim - len(parts)} dimension(s) left", at)
        return [alg.loc(ast.Subscript(base.expr, index, ast.Store()), at)
                for index in component_indices(self, parts, t.shape, at)]

    def store_tuple(self, target: ast.expr, value: Val, at: ast.stmt) -> list[ast.stmt]:
        if value.vec and len(target.elts) == value.vec.shape[0] and len(value.vec.shape) == 1:
            comps = alg.share(value.comps, self.temp)
            return [s for t, c in zip(target.elts, comps) for s in self.store(t, Val(None, [c]), at)]
        if value.vec:
            raise self.error(f"cannot unpack a {value.vec.name} into {len(target.elts)} names", at)
        for t in target.elts:
            if isinstance(t, ast.Name) and isinstance(self.env.get(t.id), VectorType):
                raise self.error(f"'{t.id}' holds a vector; unpack into scalars only", at)
        return [self.assign(self.scalar_target(target), value.expr, at)]

    def assign(self, target: ast.expr, value: ast.expr, at: ast.AST) -> ast.stmt:
        return alg.loc(ast.Assign([target], value), at)

    def scalar_target(self, target: ast.expr) -> ast.expr:
        if isinstance(target, (ast.Subscript, ast.Attribute)) and self.value(target.value).vec:
            return self.target_parts(target, None, target)[0]  # a component: v.x, v[0], x[i].y, m[0, 1]
        if isinstance(target, ast.Subscript):
            base = self.value(target.value)
            parts = [self.scalar(p) for p in subscript_parts(target.slice)]
            index = subscript_of(parts, target) if parts else target.slice
            return alg.loc(ast.Subscript(base.expr, index, ast.Store()), target)
        if isinstance(target, ast.Attribute):
            base = self.value(target.value)
            if is_struct(base.type):
                raise self.error(f"cannot assign the struct field {ast.unparse(target)}: a struct's fields are "
                                 "parameters; write into its arrays instead", target)
            return target
        return target

    def load_target(self, target: ast.expr) -> Val:
        if isinstance(target, ast.Name):
            t = self.env.get(target.id)
            if isinstance(t, VectorType):
                return Val(t, [alg.name(n, target) for n, _ in leaves(target.id, t)])
            return Val(None, [target])
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            return self.value(target)
        return Val(None, [target])

    def target_parts(self, target: ast.expr, t: VectorType, at: ast.AST) -> list[ast.expr]:
        """Store targets of each component of a vector-valued target."""
        loaded = self.value(target)
        out = []
        for comp in loaded.comps:
            if not isinstance(comp, (ast.Name, ast.Subscript)):
                raise self.error(f"cannot assign to {ast.unparse(target)}", at)
            comp = alg.loc(type(comp)(**{f: getattr(comp, f) for f in comp._fields if f != "ctx"}, ctx=ast.Store()),
                           comp)
            out.append(comp)
        return out
