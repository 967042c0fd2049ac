"""One emitted LLVM module: an entry function that is a CPython function, and the helpers it calls.

The entry has CPython's fast-call signature (self, args, nargs), so the interpreter calls it as it
calls a builtin: it reads each array's data pointer, shape and strides from the NumPy object's
fields, converts each number with the C API, and returns what the function returns (a status, a
tuple of them, None) as Python objects, or NULL with the exception of a `raise` set. The Python
objects it names (None, ndarray, exception classes) are external symbols (`symbols`), bound to
their addresses by each process that loads the code, so the object code can be cached on disk.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from .emitter import MAX_PASSES, FunctionEmitter, UnknownYet
from .kinds import BOOL, FLOAT32, INT64, Array, NotEmittable, Scalar, Tuple, convert, unified
from .runtime import c_function
from .values import I8P, I64, ArrayValue, Value, c_strides

# numpy's PyArrayObject fields after the object head (checked against a live array by compiler.llvm_cpu)
DATA, DIMENSIONS, STRIDES = 16, 32, 40
I32 = ir.IntType(32)


@dataclass
class EntryCode:
    """What the JIT needs of an emitted entry function."""

    ir: str
    name: str  # unique to the IR (its digest), so code loaded from the disk never meets a namesake
    argument_types: list  # Scalar or Array per argument
    symbols: dict  # external symbol -> the Python object whose address it is
    function: str  # the generated function's own name (the kernel's serial form)
    function_names: dict  # a generated function's name -> its LLVM function's (kernel.inspect)


def settled_pass(new_module, fdef: ast.FunctionDef, namespace: dict, emit) -> tuple:
    """Emit `fdef` pass after pass until its variables' types settle: each pass a fresh module
    (`new_module(settled)`, `settled` the helpers' types learnt so far) where `emit(module,
    emitter)` writes it; the settled pass's (module, what emit returned)."""
    learnt: dict = {}
    settled: dict = {}  # a helper's (variable types, return type) once learnt, for every later module
    for _ in range(MAX_PASSES):
        module = new_module(settled)
        emitter, known = FunctionEmitter(module, fdef, namespace, learnt), len(learnt)
        try:
            result = emit(module, emitter)
        except UnknownYet:
            if not emitter.learnt and len(learnt) == known:  # nothing new: the next pass would stop there too
                raise NotEmittable("a variable read before it is assigned") from None
            continue
        if not emitter.learnt and not module.learnt:
            return module, result
    raise NotEmittable("the variables' types did not settle")


def entry_code(fdef: ast.FunctionDef, namespace: dict, types: list, helpers: dict) -> EntryCode:
    """`fdef` emitted for arguments of `types` (kinds.of_value); `namespace` resolves its other names,
    `helpers` maps a called name to the FunctionDef and namespace of a function to emit beside it."""
    name = "_qg_emitted"
    module, _ = settled_pass(lambda settled: EmittedModule(helpers, settled), fdef, namespace,
                             lambda module, emitter: module.entry(emitter, name, types))
    text = str(module.ir)
    unique = f"{name}_{hashlib.sha256(text.encode()).hexdigest()[:24]}"
    return EntryCode(text.replace(f'@"{name}"(', f'@"{unique}"('), unique, list(types), module.symbols, fdef.name,
                     {**module.function_names, fdef.name: unique})


def symbol_of(obj) -> str:
    """The external symbol an emitted module names `obj` by (None, ndarray, an exception class)."""
    if obj is None:
        return "_qg_py_None"
    path = f"{obj.__module__}.{obj.__qualname__}"
    return "_qg_py_" + "".join(c if c.isalnum() else "_" for c in path)


class EmittedModule:
    """The module of one pass: the entry and the helpers emitted so far (the CPU's entry here; a CUDA
    kernel's in kernels.KernelModule)."""

    views = None  # how `a.view(dtype)` is emitted, where the target has it (cuda_dialect.VIEW)
    wraps_unsigned_indices = False  # numba's CPU getitem adds the extent to negative signed indices only
    range_flags = ("nsw",)  # a range loop's value cannot wrap: LLVM then knows `j - 1 >= 0` for j in range(1, n)

    def __init__(self, helpers: dict, settled: dict) -> None:
        self.ir = ir.Module(name="qgraph")
        self.helper_sources, self.settled = helpers, settled
        self.helpers: dict = {}  # (name, argument types) -> (function, return type)
        self.tuple_size = None
        self.learnt = False
        self.symbols: dict = {}
        self.function_names: dict = {}  # a helper's generated name -> its LLVM function's
        self.counter = itertools.count()  # names within the module: the same code gives the same IR

    def object(self, obj) -> ir.Value:
        """`obj`'s address, through its external symbol."""
        name = symbol_of(obj)
        if name not in self.symbols:
            self.symbols[name] = obj
            ir.GlobalVariable(self.ir, ir.IntType(8), name)
        return self.ir.globals[name]

    # ------------------------------------------------------------------ the entry
    def entry(self, fe: FunctionEmitter, name: str, types: list) -> None:
        params = [a.arg for a in fe.fdef.args.args]
        if len(params) != len(types) or fe.fdef.args.vararg or fe.fdef.args.kwonlyargs:
            raise NotEmittable("the arguments do not match the function's parameters")
        function = ir.Function(self.ir, ir.FunctionType(I8P, [I8P, I8P.as_pointer(), I64]), name)
        fe.role = "entry"
        fe.begin(function, {})
        b, args = fe.builder, function.args[1]
        self.check(fe, b.icmp_signed("!=", function.args[2], I64(len(types))), TypeError,
                   f"the compiled serial form takes {len(types)} arguments")
        for k, (param, kind) in enumerate(zip(params, types)):
            obj = b.load(b.gep(args, [I64(k)]))
            if isinstance(kind, Array):
                self.check_array(fe, obj, param)
                fe.bound[param] = _array_from_object(b, obj, kind)
                continue
            value = self.number(fe, obj, kind)
            fe.bind_scalar(param, value, kind)
        fe.statements(fe.fdef.body)
        if not fe.builder.block.is_terminated:
            self.returned(fe, None)
        fe.finish_entry()

    def check(self, fe, failed: ir.Value, error: type, message: str) -> None:
        """Return NULL with `error(message)` set where `failed`."""
        with fe.builder.if_then(failed, likely=False):
            self.set_error(fe.builder, error, message)
            fe.builder.ret(I8P(None))

    def set_error(self, b: ir.IRBuilder, error: type, message: str) -> None:
        text = bytearray(message.encode() + b"\0")
        constant = ir.GlobalVariable(self.ir, ir.ArrayType(ir.IntType(8), len(text)), f"_qg_text_{next(self.counter)}")
        constant.initializer = ir.Constant(constant.type.pointee, text)
        constant.global_constant, constant.linkage = True, "internal"
        b.call(c_function(self.ir, "PyErr_SetString", ir.VoidType(), [I8P, I8P]),
               [self.object(error), b.bitcast(constant, I8P)])

    def check_array(self, fe, obj: ir.Value, param: str) -> None:
        b = fe.builder
        kind = b.load(b.bitcast(b.gep(obj, [I64(8)]), I8P.as_pointer()))  # ob_type
        with b.if_then(b.icmp_unsigned("!=", kind, self.object(np.ndarray)), likely=False):
            is_instance = c_function(self.ir, "PyObject_IsInstance", I32, [I8P, I8P])
            is_array = b.call(is_instance, [obj, self.object(np.ndarray)])
            self.check(fe, b.icmp_signed("!=", is_array, I32(1)), TypeError, f"{param} must be a NumPy array")

    def number(self, fe, obj: ir.Value, kind: Scalar) -> ir.Value:
        b = fe.builder
        occurred = c_function(self.ir, "PyErr_Occurred", I8P, [])
        if kind.is_float:
            value = b.call(c_function(self.ir, "PyFloat_AsDouble", ir.DoubleType(), [I8P]), [obj])
            suspect = b.fcmp_ordered("==", value, ir.DoubleType()(-1.0))
            result = b.fptrunc(value, kind.ir) if kind == FLOAT32 else value
        elif kind == BOOL:
            value = b.call(c_function(self.ir, "PyObject_IsTrue", I32, [I8P]), [obj])
            self.check_error(fe, b.icmp_signed("<", value, I32(0)))
            return b.icmp_signed("!=", value, I32(0))
        else:
            name = "PyLong_AsUnsignedLongLong" if kind.kind == "u" else "PyLong_AsLongLong"
            value = b.call(c_function(self.ir, name, I64, [I8P]), [obj])
            suspect = b.icmp_signed("==", value, I64(-1))
            result = value if kind.bits == 64 else b.trunc(value, kind.ir)
        with b.if_then(suspect, likely=False):
            self.check_error(fe, b.icmp_unsigned("!=", b.call(occurred, []), I8P(None)))
        return result

    def check_error(self, fe, failed: ir.Value) -> None:
        with fe.builder.if_then(failed, likely=False):
            fe.builder.ret(I8P(None))  # the C API's exception stays set

    def returned(self, fe: FunctionEmitter, value) -> None:
        b = fe.builder
        if getattr(fe, "role", None) != "entry":
            return self.helper_returned(fe, value)
        from_int = c_function(self.ir, "PyLong_FromLongLong", I8P, [I64])
        if value is None:
            none = self.object(None)
            b.call(c_function(self.ir, "Py_IncRef", ir.VoidType(), [I8P]), [none])
            b.ret(none)
        elif isinstance(value, Value) and isinstance(value.type, Tuple) and \
                all(not k.is_float for k in value.type.items):
            result = b.call(c_function(self.ir, "PyTuple_New", I8P, [I64]), [I64(value.type.size)])
            set_item = c_function(self.ir, "PyTuple_SetItem", I32, [I8P, I64, I8P])
            for k, (item, kind) in enumerate(zip(value.ir, value.type.items)):
                b.call(set_item, [result, I64(k), b.call(from_int, [convert(b, item, kind, INT64)])])
            b.ret(result)
        elif isinstance(value, Value) and isinstance(value.type, Scalar) and not value.type.is_float:
            b.ret(b.call(from_int, [convert(b, value.ir, value.type, INT64)]))
        else:
            raise NotEmittable("a return of other than a status")

    def raised(self, fe: FunctionEmitter, error: type, message: str) -> None:
        if getattr(fe, "role", None) != "entry":
            raise NotEmittable("a raise inside a helper")
        self.set_error(fe.builder, error, message)
        fe.builder.ret(I8P(None))

    # ------------------------------------------------------------------ helpers
    def call_helper(self, fe: FunctionEmitter, fdef: ast.FunctionDef, args: list) -> Value:
        """A call of a function emitted beside the entry (a @qgraph.func, the runtime's checks), one
        LLVM function per argument types, inlined by LLVM where it pays."""
        kinds = tuple(a.type for a in args)
        if not all(isinstance(k, (Scalar, Array)) for k in kinds):
            raise NotEmittable(f"a call of {fdef.name} with a tuple")
        key = (fdef.name, kinds)
        if key not in self.helpers:
            namespace = next(ns for d, ns in self.helper_sources.values() if d is fdef)
            if key not in self.settled:
                returns, variables = None, {}
                for _ in range(MAX_PASSES):  # learn the helper's types in a module of its own
                    scratch = EmittedModule(self.helper_sources, self.settled)
                    emitter = scratch.emit_helper(fdef, namespace, kinds, variables, returns)
                    found = _return_type(emitter.returns)
                    if not emitter.learnt and not scratch.learnt and found == returns:
                        break
                    returns = found
                else:
                    raise NotEmittable(f"the types in {fdef.name} did not settle")
                self.settled[key] = (variables, returns)
            variables, returns = self.settled[key]
            emitter = self.emit_helper(fdef, namespace, kinds, dict(variables), returns)
            self.helpers[key] = (emitter.function, returns)
        function, returns = self.helpers[key]
        flat = []
        for a in args:
            flat.extend([a.data, *a.shape, *a.strides] if isinstance(a, ArrayValue) else [a.ir])
        result = fe.builder.call(function, flat)
        if isinstance(returns, Tuple):
            return Value([fe.builder.extract_value(result, k) for k in range(returns.size)], returns)
        return Value(I64(0), INT64) if returns is None else Value(result, returns)

    def emit_helper(self, fdef, namespace, kinds, variables: dict, returns) -> FunctionEmitter:
        params = [a.arg for a in fdef.args.args]
        if len(params) != len(kinds) or fdef.args.vararg or fdef.args.kwonlyargs:
            raise NotEmittable(f"a call of {fdef.name} with other arguments than its parameters")
        ir_types = []
        for k in kinds:
            ir_types.extend([I8P] + [I64] * (2 * k.ndim) if isinstance(k, Array) else [k.ir])
        result = ir.VoidType() if returns is None else returns.ir
        function = ir.Function(self.ir, ir.FunctionType(result, ir_types), f"_qg_helper_{next(self.counter)}")
        function.linkage = "internal"
        self.function_names[fdef.name] = function.name
        fe = FunctionEmitter(self, fdef, namespace, variables)
        fe.role, fe.result = "helper", returns
        fe.begin(function, {})
        position = 0
        for param, kind in zip(params, kinds):
            if isinstance(kind, Array):
                n = kind.ndim
                parts = function.args[position:position + 1 + 2 * n]
                fe.bound[param] = ArrayValue(parts[0], list(parts[1:1 + n]), list(parts[1 + n:]), kind)
                position += 1 + 2 * n
                continue
            value = function.args[position]
            position += 1
            fe.bind_scalar(param, value, kind)
        fe.statements(fdef.body)
        if not fe.builder.block.is_terminated:  # the end of the body (or a block no path reaches)
            if returns is None:
                fe.returns.append(None)
                fe.builder.ret_void()
            else:
                fe.builder.ret(ir.Constant(returns.ir, None))
        fe.finish_entry()
        return fe

    def helper_returned(self, fe, value) -> None:
        b, returns = fe.builder, fe.result
        if value is not None and not (isinstance(value, Value) and isinstance(value.type, (Scalar, Tuple))):
            raise NotEmittable("a helper returning other than numbers")
        if returns is None:
            b.ret_void()
        elif value is None or type(value.type) is not type(returns):
            raise NotEmittable("a helper returning a number and nothing, or a tuple and a number")
        elif isinstance(returns, Tuple):
            if value.type.size != returns.size:
                raise NotEmittable("a helper returning tuples of different lengths")
            result = ir.Constant(returns.ir, None)
            for k, (item, kind) in enumerate(zip(value.ir, value.type.items)):
                result = b.insert_value(result, convert(b, item, kind, returns.items[k]), k)
            b.ret(result)
        else:
            b.ret(convert(b, value.ir, value.type, returns))


def _return_type(returns: list):
    kinds = [v.type for v in returns if v is not None]
    if not kinds:
        return None
    if len(kinds) != len(returns):
        raise NotEmittable("a helper returning a number and nothing")
    found = kinds[0]
    for k in kinds[1:]:
        found = unified(found, k)
    return found


def _array_from_object(b: ir.IRBuilder, obj: ir.Value, kind: Array) -> ArrayValue:
    def field(offset: int, pointee: ir.Type) -> ir.Value:
        address = b.bitcast(b.gep(obj, [I64(offset)]), pointee.as_pointer().as_pointer())
        return b.load(address)

    data = field(DATA, ir.IntType(8))
    dims = field(DIMENSIONS, I64)
    shape = [b.load(b.gep(dims, [I64(k)])) for k in range(kind.ndim)]
    if kind.contiguous:
        steps = c_strides(b, shape, kind.dtype)
    else:
        strides = field(STRIDES, I64)
        steps = [b.load(b.gep(strides, [I64(k)])) for k in range(kind.ndim)]
    return ArrayValue(data, shape, steps, kind)

