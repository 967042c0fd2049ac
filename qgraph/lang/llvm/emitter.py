"""Statements and expressions of generated code as LLVM IR, typed with numba's rules.

A function is emitted more than once: each pass learns the types its variables take (a variable
assigned an int and then a float is a float, as numba unifies it), until a pass learns nothing
new; that pass's IR is the function's. Anything outside the covered subset raises NotEmittable.
"""

from __future__ import annotations

import ast
import copy

from llvmlite import ir

from . import runtime
from .expressions import ExpressionEmitter, UnknownYet, literal_int
from .kinds import INT64, NotEmittable, Scalar, Tuple, convert, unified
from .values import I64, ArrayValue, Value, scalar

MAX_PASSES = 8


class FunctionEmitter(ExpressionEmitter):
    """One generated function as an LLVM function of `module` (see emit)."""

    def __init__(self, owner, fdef: ast.FunctionDef, namespace: dict, types: dict) -> None:
        self.owner, self.fdef, self.namespace = owner, fdef, namespace
        self.types = types  # variable -> Scalar, learnt over the passes
        self.learnt = False
        self.returns: list = []  # the types of the values returned (None for a bare return or the end)
        self.loops: list = []  # (continue block, break block)
        self.assigned = {n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        self.assigned |= {a.arg for a in fdef.args.args}

    # ------------------------------------------------------------------ set-up
    def begin(self, function: ir.Function, params: dict) -> None:
        self.function = function
        self.entry = function.append_basic_block("entry")
        self.builder = ir.IRBuilder(function.append_basic_block("body"))
        self.slots: dict = {}
        self.bound: dict = dict(params)  # name -> Value or ArrayValue fixed for the function (parameters, views)

    def finish_entry(self) -> None:
        ir.IRBuilder(self.entry).branch(self.function.basic_blocks[1])

    def bind_scalar(self, name: str, value: ir.Value, kind: Scalar) -> None:
        """A number parameter `name` arriving as `value` of `kind`, stored in its slot (of the type the
        settled pass found for it, else `kind`): the body may assign it."""
        self.types.setdefault(name, kind)
        self.builder.store(convert(self.builder, value, kind, self.types[name]), self.slot(name, self.types[name]))

    def slot(self, name: str, kind: Scalar) -> ir.Value:
        slot = self.slots.get(name)
        if slot is None or slot[1] != kind:
            at = ir.IRBuilder(self.entry)
            slot = (at.alloca(kind.ir, name=name), kind)
            self.slots[name] = slot
        return slot[0]

    # ------------------------------------------------------------------ statements
    def statements(self, body: list) -> None:
        for stmt in body:
            if self.builder.block.is_terminated:
                return  # code after a return, break or continue never runs
            self.visit(stmt)

    def visit_Pass(self, stmt) -> None:
        pass

    def visit_Expr(self, stmt) -> None:
        if isinstance(stmt.value, ast.Constant):
            return  # a docstring
        self.expr(stmt.value)

    def visit_Assign(self, stmt) -> None:
        value = self.expr(stmt.value)
        for target in stmt.targets:
            self.assign(target, value)

    def assign(self, target, value) -> None:
        if isinstance(target, ast.Name):
            name = target.id
            if isinstance(value, ArrayValue) or not isinstance(value.type, Scalar):
                if name in self.types:
                    raise NotEmittable(f"{name!r} holds a number and then an array or tuple")
                self.bound[name] = value
                return
            if name in self.bound:
                raise NotEmittable(f"{name!r} is assigned again")
            known = self.types.get(name)
            kind = value.type if known is None else unified(known, value.type)
            if kind != known:  # a first assignment teaches nothing earlier code used; a wider type does
                self.types[name] = kind
                self.learnt |= known is not None
            self.builder.store(convert(self.builder, value.ir, value.type, kind), self.slot(name, kind))
        elif isinstance(target, ast.Subscript):
            array, indices = self.element(target)
            if not isinstance(value, Value) or not isinstance(value.type, Scalar):
                raise NotEmittable("an array element assigned a non-number")
            array.store(self.builder, indices, convert(self.builder, value.ir, value.type, array.type.dtype))
        elif isinstance(target, ast.Tuple) and isinstance(value, Value) and isinstance(value.type, Tuple) \
                and len(target.elts) == value.type.size:
            for t, v, k in zip(target.elts, value.ir, value.type.items):
                self.assign(t, Value(v, k))
        else:
            raise NotEmittable(f"assignment to {ast.unparse(target)}")

    def visit_AugAssign(self, stmt) -> None:
        target = stmt.target
        load = copy.copy(target)  # the same target read
        load.ctx = ast.Load()
        if isinstance(target, ast.Subscript):  # the element's address once, as numba's inplace op
            array, indices = self.element(target)
            current = array.load(self.builder, indices)
            result = self.binary(stmt.op, current, self.expr(stmt.value))
            array.store(self.builder, indices, convert(self.builder, result.ir, result.type, array.type.dtype))
            return
        self.assign(target, self.binary(stmt.op, self.expr(load), self.expr(stmt.value)))

    def visit_If(self, stmt) -> None:
        condition = self.truth(self.expr(stmt.test))
        then = self.function.append_basic_block("then")
        orelse = self.function.append_basic_block("else") if stmt.orelse else None
        after = self.function.append_basic_block("endif")
        self.builder.cbranch(condition, then, orelse or after)
        for block, body in ((then, stmt.body), (orelse, stmt.orelse)):
            if block is None:
                continue
            self.builder.position_at_end(block)
            self.statements(body)
            if not self.builder.block.is_terminated:
                self.builder.branch(after)
        self.builder.position_at_end(after)

    def visit_While(self, stmt) -> None:
        if stmt.orelse:
            raise NotEmittable("while ... else")
        head, body, after = (self.function.append_basic_block(n) for n in ("while", "loop", "endwhile"))
        self.builder.branch(head)
        self.builder.position_at_end(head)
        self.builder.cbranch(self.truth(self.expr(stmt.test)), body, after)
        self.builder.position_at_end(body)
        self.loop_body(stmt.body, head, after)
        self.builder.position_at_end(after)

    def loop_body(self, body: list, next_pass, after) -> None:
        """A loop's body: `continue` (and its end) go to block `next_pass`, `break` to `after`."""
        self.loops.append((next_pass, after))
        self.statements(body)
        self.loops.pop()
        if not self.builder.block.is_terminated:
            self.builder.branch(next_pass)

    def visit_For(self, stmt) -> None:
        """`for v in range(...)` as numba runs it: the trip count first, `v` the last value after it."""
        call = stmt.iter
        iterable = self.lookup(call.func.id) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
            and call.func.id not in self.bound and call.func.id not in self.assigned else None
        if hasattr(iterable, "emit_loop"):  # a loop the target writes itself (lang.llvm.parallel's prange)
            return iterable.emit_loop(self, stmt)
        if stmt.orelse or not isinstance(stmt.target, ast.Name) or not isinstance(call, ast.Call) or \
                not isinstance(call.func, ast.Name) or iterable is not range or call.keywords \
                or not 1 <= len(call.args) <= 3:
            raise NotEmittable("a loop other than for over range()")
        step = 1 if len(call.args) < 3 else literal_int(call.args[2])
        if step == 0:
            raise NotEmittable("range() with a zero step")
        args = [self.expr(a) for a in (call.args if step is None else call.args[:2])]
        for a in args:
            if scalar(a).kind not in "ib" and not (a.type.kind == "u" and a.type.bits < 64):
                raise NotEmittable("range() of other than signed integers")
        args = [convert(self.builder, a.ir, a.type, INT64) for a in args]
        start, stop = (I64(0), args[0]) if len(args) == 1 else (args[0], args[1])
        b = self.builder
        if step in (1, -1) and self.owner.range_flags:
            return self._unit_step_loop(stmt, start, stop, step)
        if step is None:  # held in a variable: its sign known when the loop starts
            step = args[2]
            count = runtime.trip_count(self, start, stop, step)
            b = self.builder
        else:
            span = b.sub(stop, start) if step > 0 else b.sub(start, stop)
            magnitude = abs(step)
            count = b.sdiv(b.add(span, I64(magnitude - 1)), I64(magnitude)) if magnitude != 1 else span
            count = b.select(b.icmp_signed(">", count, I64(0)), count, I64(0))
            step = I64(step)
        counter = ir.IRBuilder(self.entry).alloca(I64, name="trip")
        b.store(I64(0), counter)
        head, body, latch, after = (self.function.append_basic_block(n) for n in ("for", "do", "next", "endfor"))
        b.branch(head)
        b.position_at_end(head)
        k = b.load(counter)
        b.cbranch(b.icmp_signed("<", k, count), body, after)
        b.position_at_end(body)
        flags = self.owner.range_flags  # start + k * step lies in [start, stop): no signed wrap
        self.assign(stmt.target, Value(b.add(start, b.mul(k, step, flags=flags), flags=flags), INT64))
        self.loop_body(stmt.body, latch, after)
        self.builder.position_at_end(latch)
        self.builder.store(self.builder.add(self.builder.load(counter), I64(1)), counter)
        self.builder.branch(head)
        self.builder.position_at_end(after)

    def _unit_step_loop(self, stmt, start, stop, step: int) -> None:
        """`for v in range(start, stop, ±1)` as C writes it: `v` compared with `stop` and stepped without
        signed wrap (it cannot pass `stop`), so LLVM knows `v + 1` of `range(1, n - 1)` is a valid index
        and vectorises `u[i, j + 1]` as a plain load, as numba's loops (a gather before: a 2-D stencil at
        1.84x numba's time). The same iterations and last value as the trip-count form."""
        b = self.builder
        value = ir.IRBuilder(self.entry).alloca(I64, name="range_value")
        b.store(start, value)
        head, body, latch, after = (self.function.append_basic_block(n) for n in ("for", "do", "next", "endfor"))
        b.branch(head)
        b.position_at_end(head)
        v = b.load(value)
        b.cbranch(b.icmp_signed("<" if step > 0 else ">", v, stop), body, after)
        b.position_at_end(body)
        self.assign(stmt.target, Value(v, INT64))
        self.loop_body(stmt.body, latch, after)
        b = self.builder
        b.position_at_end(latch)
        b.store(b.add(b.load(value), I64(step), flags=("nsw",)), value)
        b.branch(head)
        b.position_at_end(after)

    def visit_Break(self, stmt) -> None:
        if not self.loops:
            raise NotEmittable("break outside a loop")
        self.builder.branch(self.loops[-1][1])

    def visit_Continue(self, stmt) -> None:
        if not self.loops:
            raise NotEmittable("continue outside a loop")
        self.builder.branch(self.loops[-1][0])

    def visit_Return(self, stmt) -> None:
        value = None if stmt.value is None else self.expr(stmt.value)
        self.returns.append(value)
        self.owner.returned(self, value)

    def visit_Raise(self, stmt) -> None:
        exc = stmt.exc
        if not isinstance(exc, ast.Call) or not isinstance(exc.func, ast.Name) or len(exc.args) != 1 or \
                not isinstance(exc.args[0], ast.Constant) or not isinstance(exc.args[0].value, str):
            raise NotEmittable("a raise other than of an exception with a constant message")
        error = self.lookup(exc.func.id)
        if not (isinstance(error, type) and issubclass(error, BaseException)):
            raise NotEmittable(f"raise of {exc.func.id}")
        self.owner.raised(self, error, exc.args[0].value)


__all__ = ["FunctionEmitter", "MAX_PASSES", "UnknownYet"]
