"""The CPU runtime's primitives in emitted code: the calling thread's numba threads, the monotonic
clock, a moment without the GIL, the Ctrl-C check (the numba twins are compiler.cpu_interrupts'),
atomics as compiler.cpu_atomics emits them, and a range's trip count."""

from __future__ import annotations

from llvmlite import ir

from .calls import Primitive, int_divmod
from .kinds import INT64, NotEmittable, Scalar, Tuple, convert
from .values import I64, ArrayValue, Value, scalar

I32 = ir.IntType(32)


def _trip_count(fe, args) -> Value:
    """compiler.cpu_program's `_trip_count(start, stop, step)`: a range's length, ValueError for step 0."""
    if len(args) != 3 or not all(scalar(a).is_int or a.type.kind == "b" for a in args):
        raise NotEmittable("_qg_trip_count of other arguments")
    b = fe.builder
    return Value(trip_count(fe, *(convert(b, a.ir, a.type, INT64) for a in args)), INT64)


def trip_count(fe, start, stop, step) -> ir.Value:
    """The length of range(start, stop, step) (int64 values), ValueError raised for a zero step."""
    if getattr(fe, "role", None) != "entry":
        raise NotEmittable("a range with a step held in a variable inside a helper")
    b = fe.builder
    with b.if_then(b.icmp_signed("==", step, I64(0)), likely=False):
        fe.owner.raised(fe, ValueError, "range() arg 3 must not be zero")
    b = fe.builder
    up = int_divmod(b, b.add(b.sub(stop, start), b.sub(step, I64(1))), step, INT64)[0]
    down = int_divmod(b, b.sub(b.sub(b.sub(start, stop), step), I64(1)), b.neg(step), INT64)[0]
    n = b.select(b.icmp_signed(">", step, I64(0)), up, down)
    return b.select(b.icmp_signed(">", n, I64(0)), n, I64(0))


def _nothing(fe, args) -> Value:
    return Value(I64(0), INT64)


TRIP_COUNT = Primitive("_qg_trip_count", _trip_count)
REPORT_FENCE = Primitive("_qg_report_fence", _nothing)  # nothing to order on the CPU (compiler.cpu_math)



def _array_argument(args, what: str) -> ArrayValue:
    if len(args) != 1 or not isinstance(args[0], ArrayValue):
        raise NotEmittable(f"{what} of other than one array")
    return args[0]


def _threads(fe, args) -> Value:
    """numba's get_num_threads of the calling thread (the symbol numba's threading layer registers)."""
    module = fe.builder.module
    fn = module.globals.get("get_num_threads") or ir.Function(module, ir.FunctionType(I64, []), "get_num_threads")
    return Value(fe.builder.call(fn, []), INT64)


def _clock_ns(fe, args) -> Value:
    module, b = fe.builder.module, fe.builder
    spec = ir.LiteralStructType([I64, I64])
    clock = module.globals.get("clock_gettime") or ir.Function(
        module, ir.FunctionType(I32, [I32, spec.as_pointer()]), "clock_gettime")
    ts = ir.IRBuilder(fe.entry).alloca(spec)
    b.call(clock, [I32(1), ts])  # CLOCK_MONOTONIC
    seconds, nanos = (b.load(b.gep(ts, [I32(0), I32(k)])) for k in (0, 1))
    return Value(b.add(b.mul(seconds, I64(1_000_000_000)), nanos), INT64)


def c_function(module, name: str, ret, params):
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(ret, params), name)


def _release_gil(fe, args) -> Value:
    module, b = fe.builder.module, fe.builder
    state = ir.IntType(8).as_pointer()
    save = c_function(module, "PyEval_SaveThread", state, [])
    restore = c_function(module, "PyEval_RestoreThread", ir.VoidType(), [state])
    b.call(restore, [b.call(save, [])])
    return Value(I64(0), INT64)


def signal_check(b: ir.IRBuilder, word_address, slot) -> ir.Value:
    """A pending signal's handler run (PyErr_CheckSignals); if it raised, its exception taken off the
    thread's error state and kept in the record word at `word_address()` for the launcher to raise
    (one left there before is released). `slot(type)`: a stack slot. The i64 1 if it raised. The one
    IR of this check: numba's intrinsic (compiler.cpu_interrupts) and the emitter both write it so."""
    module, obj = b.module, ir.IntType(8).as_pointer()
    check = c_function(module, "PyErr_CheckSignals", I32, [])
    fetch = c_function(module, "PyErr_Fetch", ir.VoidType(), [obj.as_pointer()] * 3)
    normalize = c_function(module, "PyErr_NormalizeException", ir.VoidType(), [obj.as_pointer()] * 3)
    set_tb = c_function(module, "PyException_SetTraceback", I32, [obj, obj])
    decref = c_function(module, "Py_DecRef", ir.VoidType(), [obj])
    raised = b.icmp_signed("!=", b.call(check, []), I32(0))
    with b.if_then(raised, likely=False):
        slots = [slot(obj) for _ in range(3)]
        for each in slots:
            b.store(obj(None), each)
        b.call(fetch, slots)
        b.call(normalize, slots)
        kind, value, trace = (b.load(each) for each in slots)
        with b.if_then(b.icmp_unsigned("!=", trace, obj(None))):
            b.call(set_tb, [value, trace])
        b.call(decref, [kind])
        b.call(decref, [trace])
        word = word_address()
        b.call(decref, [b.inttoptr(b.load(word), obj)])  # one the launcher did not take
        b.store(b.ptrtoint(value, I64), word)
    return b.zext(raised, I64)


def interrupted_primitive(signal_error_word: int) -> Primitive:
    """`_qg_interrupted(record)`: signal_check with the record's word `signal_error_word`."""

    def emit(fe, args) -> Value:
        record = _array_argument(args, "_qg_interrupted")
        b = fe.builder
        return Value(signal_check(b, lambda: record.address(b, [I64(signal_error_word)]),
                                  lambda kind: ir.IRBuilder(fe.entry).alloca(kind)), INT64)

    return Primitive("_qg_interrupted", emit)


THREADS = Primitive("_qg_threads", _threads)
CLOCK_NS = Primitive("_qg_clock_ns", _clock_ns)
RELEASE_GIL = Primitive("_qg_release_gil", _release_gil)


def atomic(op: str) -> Primitive:
    """`_qg_atomic_<op>(array, index, value)`: the old element, as compiler.cpu_atomics (atomicrmw)."""

    def emit(fe, args) -> Value:
        if len(args) != 3 or not isinstance(args[0], ArrayValue):
            raise NotEmittable(f"atomic_{op} of other arguments")
        array, index, value = args
        if isinstance(index.type, Scalar):
            indices = [convert(fe.builder, index.ir, index.type, INT64)]
        elif isinstance(index.type, Tuple) and all(k.is_int for k in index.type.items):
            indices = [convert(fe.builder, v, k, INT64) for v, k in zip(index.ir, index.type.items)]
        else:
            raise NotEmittable("an atomic's index")
        dtype = array.type.dtype
        if dtype.kind == "b":
            raise NotEmittable("an atomic on a bool array")
        kind = {"f": "float", "i": "int", "u": "uint"}[dtype.kind]
        name = {"add": {"float": "fadd"}, "sub": {"float": "fsub"},
                "min": {"float": "fmin", "uint": "umin"}, "max": {"float": "fmax", "uint": "umax"}}[op].get(kind, op)
        operand = convert(fe.builder, value.ir, scalar(value), dtype)
        old = fe.builder.atomic_rmw(name, array.address(fe.builder, indices), operand, "monotonic")
        return Value(old, dtype)

    return Primitive(f"_qg_atomic_{op}", emit)

