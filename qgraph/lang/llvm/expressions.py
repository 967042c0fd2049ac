"""Expressions of generated code as LLVM IR, typed with numba's rules (see emitter.py)."""

from __future__ import annotations

import ast
import math

from llvmlite import ir

from . import calls
from .kinds import (
    BOOL,
    FLOAT64,
    INT64,
    NotEmittable,
    Scalar,
    Text,
    Tuple,
    arithmetic,
    convert,
    for_nvvm,
    true_division,
    unified,
)
from .values import I64, ArrayValue, Value, int_tuple, known_nonnegative, scalar

_INT_OPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.BitAnd: "and_", ast.BitOr: "or_",
            ast.BitXor: "xor", ast.LShift: "shl"}
_FLOAT_OPS = {ast.Add: "fadd", ast.Sub: "fsub", ast.Mult: "fmul", ast.Div: "fdiv"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class ExpressionEmitter(ast.NodeVisitor):
    """The expression half of FunctionEmitter: each visit returns a Value or an ArrayValue."""

    def expr(self, node):
        return self.visit(node)

    def generic_visit(self, node):
        raise NotEmittable(f"a {type(node).__name__} {'statement' if isinstance(node, ast.stmt) else 'expression'}")

    def lookup(self, name: str):
        """A name the function does not assign: its global (or injected) value."""
        if name in self.namespace:
            return self.namespace[name]
        builtins = self.namespace.get("__builtins__")
        if isinstance(builtins, dict) and name in builtins:
            return builtins[name]
        import builtins as module

        if hasattr(module, name):
            return getattr(module, name)
        raise NotEmittable(f"the name {name!r}")

    def visit_Constant(self, node) -> Value:
        return constant(node.value)

    def visit_Name(self, node):
        name = node.id
        if name in self.bound:
            return self.bound[name]
        if name in self.types:
            kind = self.types[name]
            return Value(self.builder.load(self.slot(name, kind)), kind)
        if name in self.assigned:  # read before this pass learnt its type (a loop carries it): next pass
            raise UnknownYet(name)
        return constant(self.lookup(name))

    def visit_Attribute(self, node):
        base = self.expr(node.value) if not self.is_module(node.value) else None
        if isinstance(base, ArrayValue):
            if node.attr == "shape":
                return int_tuple(base.shape)
            if node.attr == "size":
                return Value(base.size(self.builder), INT64)
            if node.attr == "ndim":
                return Value(I64(base.type.ndim), INT64)
        owner = self.module_of(node.value) if base is None else base.ir if base.type == "module" else None
        if owner is None or not hasattr(owner, node.attr):
            raise NotEmittable(f"the attribute .{node.attr}")
        found = getattr(owner, node.attr)
        if isinstance(found, calls.Special):  # a special register, read where it is named
            return found.emit(self)
        return constant(found)

    def is_module(self, node) -> bool:
        import types

        return isinstance(node, ast.Name) and node.id not in self.bound and node.id not in self.assigned and \
            isinstance(self.namespace.get(node.id), types.ModuleType)

    def module_of(self, node):
        return self.namespace[node.id]

    def visit_Subscript(self, node):
        base = self.expr(node.value)
        if isinstance(base, Value) and isinstance(base.type, Tuple):
            index = node.slice
            if not isinstance(index, ast.Constant) or type(index.value) is not int or \
                    not -base.type.size <= index.value < base.type.size:
                raise NotEmittable("a tuple indexed by other than a constant within it")
            return Value(base.ir[index.value], base.type.items[index.value])
        array, indices = self.element(node, base)
        return array.load(self.builder, indices)

    def element(self, node: ast.Subscript, base=None) -> tuple:
        array = self.expr(node.value) if base is None else base
        if not isinstance(array, ArrayValue):
            raise NotEmittable(f"indexing {ast.unparse(node.value)}")
        return array, self.indices(node.slice)

    def indices(self, node) -> list:
        parts = node.elts if isinstance(node, ast.Tuple) else [node]
        result = []
        for part in parts:
            if isinstance(part, ast.Slice):
                raise NotEmittable("a slice")
            value = self.expr(part)
            if isinstance(value, Value) and isinstance(value.type, Tuple):
                if not all(k.is_int or k.kind == "b" for k in value.type.items):
                    raise NotEmittable("an array indexed by a tuple of other than integers")
                result.extend(convert(self.builder, v, k, INT64) for v, k in zip(value.ir, value.type.items))
                continue
            kind = scalar(value)
            if not (kind.is_int or kind.kind == "b"):
                raise NotEmittable("an array indexed by a non-integer")
            index = convert(self.builder, value.ir, kind, INT64)
            if kind.kind == "u" and not self.owner.wraps_unsigned_indices and not isinstance(index, ir.Constant):
                index = known_nonnegative(index)
            result.append(index)
        return result

    def visit_Tuple(self, node) -> Value:
        items = [self.expr(e) for e in node.elts]
        if not all(isinstance(i, Value) and isinstance(i.type, Scalar) for i in items):
            raise NotEmittable("a tuple of other than numbers")
        return Value([i.ir for i in items], Tuple(tuple(i.type for i in items)))

    def visit_BinOp(self, node) -> Value:
        return self.binary(node.op, self.expr(node.left), self.expr(node.right), node.right)

    def binary(self, op, left, right, right_node=None) -> Value:
        a, b = scalar(left), scalar(right)
        builder = self.builder
        if isinstance(op, ast.Div):
            kind = true_division(a, b)
        elif isinstance(op, ast.Pow):
            return calls.power(self, left, right, literal_int(right_node))
        else:
            kind = arithmetic(a, b)
            if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor)) and a.kind == b.kind == "b":
                kind = BOOL
            if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)) and kind.is_float:
                raise NotEmittable("a bit operation on a float")
        x, y = convert(builder, left.ir, a, kind), convert(builder, right.ir, b, kind)
        if kind.is_float:
            if isinstance(op, (ast.FloorDiv, ast.Mod)):
                return Value(calls.float_divmod(builder, x, y, kind)[isinstance(op, ast.Mod)], kind)
            return Value(getattr(builder, _FLOAT_OPS[type(op)])(x, y), kind)
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            return Value(calls.int_divmod(builder, x, y, kind)[isinstance(op, ast.Mod)], kind)
        if isinstance(op, ast.RShift):
            return Value(builder.ashr(x, y) if kind.kind == "i" else builder.lshr(x, y), kind)
        name = _INT_OPS.get(type(op))
        if name is None:
            raise NotEmittable(f"the operator {type(op).__name__}")
        return Value(getattr(builder, name)(x, y), kind)

    def visit_UnaryOp(self, node) -> Value:
        value = self.expr(node.operand)
        kind = scalar(value)
        b = self.builder
        if isinstance(node.op, ast.Not):
            return Value(b.not_(self.truth(value)), BOOL)
        if isinstance(node.op, ast.UAdd):
            target = kind if kind.is_float else arithmetic(kind, kind)
            return Value(convert(b, value.ir, kind, target), target)
        if isinstance(node.op, ast.USub):
            if kind.is_float:
                if for_nvvm(b.module):  # NVVM's LLVM 7 dialect has no fneg
                    return Value(b.fsub(kind.ir(-0.0), value.ir), kind)
                return Value(b.fneg(value.ir), kind)
            target = arithmetic(kind, kind)
            return Value(b.neg(convert(b, value.ir, kind, target)), target)
        if isinstance(node.op, ast.Invert):
            if kind.kind == "b":
                return Value(b.not_(value.ir), BOOL)
            if kind.is_float:
                raise NotEmittable("~ of a float")
            target = arithmetic(kind, kind)
            return Value(b.not_(convert(b, value.ir, kind, target)), target)
        raise NotEmittable("a unary operator")

    def truth(self, value) -> ir.Value:
        return convert(self.builder, value.ir, scalar(value), BOOL)

    def visit_BoolOp(self, node) -> Value:
        """`and` / `or` of truth values, short-circuiting as Python does."""
        b = self.builder
        result = ir.IRBuilder(self.entry).alloca(BOOL.ir)
        after = self.function.append_basic_block("endbool")
        for k, operand in enumerate(node.values):
            value = self.expr(operand)
            if scalar(value).kind != "b":
                raise NotEmittable("and / or of non-bool values")
            b = self.builder
            b.store(value.ir, result)
            if k == len(node.values) - 1:
                b.branch(after)
            else:
                more = self.function.append_basic_block("bool")
                if isinstance(node.op, ast.And):
                    b.cbranch(value.ir, more, after)
                else:
                    b.cbranch(value.ir, after, more)
                b.position_at_end(more)
        self.builder.position_at_end(after)
        return Value(self.builder.load(result), BOOL)

    def visit_Compare(self, node) -> Value:
        if len(node.ops) != 1:  # a < b < c: each link once, short-circuiting
            links = []
            left = node.left
            for op, right in zip(node.ops, node.comparators):
                links.append(ast.Compare(left, [op], [right]))
                left = right
            return self.visit_BoolOp(ast.BoolOp(ast.And(), links))
        return self.compare(node.ops[0], self.expr(node.left), self.expr(node.comparators[0]))

    def compare(self, op, left, right) -> Value:
        if type(op) not in _COMPARE:
            raise NotEmittable(f"the comparison {type(op).__name__}")
        a, b = scalar(left), scalar(right)
        # numba compares two integers of one type in that type (its typing has a case per type)
        kind = BOOL if a.kind == b.kind == "b" else a if a == b and a.is_int else arithmetic(a, b)
        x, y = convert(self.builder, left.ir, a, kind), convert(self.builder, right.ir, b, kind)
        sign = _COMPARE[type(op)]
        if kind.is_float:
            result = self.builder.fcmp_unordered(sign, x, y) if sign == "!=" else \
                self.builder.fcmp_ordered(sign, x, y)
        elif kind.kind == "i":
            result = self.builder.icmp_signed(sign, x, y)
        else:
            result = self.builder.icmp_unsigned(sign, x, y)
        return Value(result, BOOL)

    def visit_IfExp(self, node) -> Value:
        condition = self.truth(self.expr(node.test))
        b = self.builder
        then, orelse, after = (self.function.append_basic_block(n) for n in ("ifexp", "orexp", "endexp"))
        b.cbranch(condition, then, orelse)
        results = []
        for block, part in ((then, node.body), (orelse, node.orelse)):
            self.builder.position_at_end(block)
            value = self.expr(part)
            results.append((value, self.builder.block))
        kind = unified(scalar(results[0][0]), scalar(results[1][0]))
        converted = []
        for value, block in results:
            self.builder.position_at_end(block)
            converted.append((convert(self.builder, value.ir, value.type, kind), self.builder.block))
            self.builder.branch(after)
        self.builder.position_at_end(after)
        phi = self.builder.phi(kind.ir)
        for value, block in converted:
            phi.add_incoming(value, block)
        return Value(phi, kind)

    def visit_Call(self, node):
        if node.keywords:
            raise NotEmittable("a call with keywords")
        return calls.call(self, node)


def literal_int(node) -> int | None:
    """The exponent numba sees as a literal int: `2`, `-2` (None for anything else)."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign, node = (-1 if isinstance(node.op, ast.USub) else 1), node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sign * node.value
    return None


class UnknownYet(NotEmittable):
    """A variable read before any pass learnt its type: another pass is needed."""


def constant(value) -> Value:
    import numpy as np

    from .kinds import of_value

    if isinstance(value, (bool, np.bool_)):
        return Value(ir.IntType(1)(int(bool(value))), BOOL)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        kind = of_value(value) if isinstance(value, np.integer) else INT64
        if not isinstance(value, np.integer) and not -(1 << 63) <= value < (1 << 63):
            raise NotEmittable("an integer constant beyond int64")
        return Value(kind.ir(int(value)), kind)
    if isinstance(value, (float, np.floating)):
        kind = of_value(value) if isinstance(value, np.floating) else FLOAT64
        if isinstance(value, float) and not math.isfinite(value):
            return Value(ir.Constant(kind.ir, value), kind)
        return Value(kind.ir(float(value)), kind)
    if isinstance(value, str):
        return Value(value, Text())
    import types

    if isinstance(value, types.ModuleType):
        return Value(value, "module")
    return Value(value, "object")  # a function, a type: only a call can use it

