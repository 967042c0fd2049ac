"""Parallel loops of emitted CPU code: `for v in _qg_prange(n)` with its body outlined into a chunk
function that numba's threading layer runs on its threads (`numba_parallel_for`, the entry numba's
own parallel loops call), one division of the range per thread.

numba's parfors compile each parallel loop's body as a function of its own, after array analysis
and fusion, and that took 90% of a parallel kernel's first call (mpm88's substep: 5 s of 5.8 s on
the CPU). Here the body is emitted once, as the serial form's loops are. As in numba's loops, the
variables the body reads are copied in (live-in), those it assigns are private to an iteration, and
a reduction (`_qg_redK += e`, `_qg_redK = max(_qg_redK, e)`: lang.lower.updates) keeps a partial per
division, folded into the variable in division order after the loop: the same bits for the same
number of threads.
"""

from __future__ import annotations

import ast

from llvmlite import ir

from ..cpu.loops import PASS_END, SERIAL_TICK_CHECK
from .calls import min_max
from .kinds import INT64, UINT64, NotEmittable, Scalar, Tuple, convert
from .runtime import c_function
from .values import I8P, I64, ArrayValue, Value, c_strides

# the runtime's checks that call the C API (lang.llvm.runtime; compiler.cpu_interrupts' helpers)
_CALLS_THE_INTERPRETER = frozenset({"_qg_interrupted", "_qg_release_gil", "_qg_let_threads_run", PASS_END,
                                    SERIAL_TICK_CHECK})
MAX_DIVISIONS = 256  # partials kept per reduction (one division per thread; numba's threads are fewer)
_VOID = ir.VoidType()
_CHUNK = ir.FunctionType(_VOID, [I8P.as_pointer(), I64.as_pointer(), I64.as_pointer(), I8P])


class ParallelRange:
    """`_qg_prange` (numba.prange) for the emitter: only a loop's iterable (see emit_loop)."""

    name = "_qg_prange"

    def emit_loop(self, fe, stmt: ast.For) -> None:
        emit_parallel_loop(fe, stmt)


PRANGE = ParallelRange()


def _reductions(body: list) -> dict:
    """{variable: "add" | "min" | "max"} of the body's reductions; a reduction variable updated any
    other way is not emitted (numba's reduction rules are wider than the generated code's)."""
    found: dict = {}
    other: set = set()
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            if name.startswith("_qg_red") and isinstance(node.op, (ast.Add, ast.Sub)):
                found.setdefault(name, set()).add("add")
            else:
                other.add(name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                    value = node.value
                    if name.startswith("_qg_red") and len(node.targets) == 1 and isinstance(target, ast.Name) \
                            and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) \
                            and value.func.id in ("max", "min") and len(value.args) == 2 \
                            and isinstance(value.args[0], ast.Name) and value.args[0].id == name:
                        found.setdefault(name, set()).add(value.func.id)
                    else:
                        other.add(name)
    for name, ops in found.items():
        if len(ops) != 1 or name in other:
            raise NotEmittable(f"the reduction {name} updated in more than one way")
    return {name: ops.pop() for name, ops in found.items()}


def _refuse_escapes(body: list) -> None:
    """A parallel body's iterations are independent and run on threads without the GIL: no return,
    raise, yield, nested parallel loop, break out of the parallel loop itself, or runtime check that
    calls the interpreter (Ctrl-C, the GIL's hand-over: numba's loops never have them there either)."""
    def visit(stmts: list, in_loop: bool) -> None:
        for stmt in stmts:
            for node in ast.walk(stmt):
                if isinstance(node, (ast.Return, ast.Raise, ast.Yield, ast.YieldFrom, ast.Try)):
                    raise NotEmittable("a return, raise or try inside a parallel loop")
                if isinstance(node, ast.Name) and node.id == "_qg_prange":
                    raise NotEmittable("a parallel loop inside a parallel loop")
                if isinstance(node, ast.Name) and node.id in _CALLS_THE_INTERPRETER:
                    raise NotEmittable(f"{node.id} inside a parallel loop")
            if isinstance(stmt, (ast.Break, ast.Continue)) and not in_loop:
                raise NotEmittable("break or continue of a parallel loop")
            if isinstance(stmt, (ast.For, ast.While)):
                continue  # its own break and continue
            for field in ("body", "orelse"):
                visit(getattr(stmt, field, []) or [], in_loop)
    visit(body, False)


def _live_in(fe, body: list, target: str, reductions: dict) -> list:
    """[(name, value)] the body reads or updates from before the loop: arrays and tuples bound in the
    function, and numbers with a slot (each loaded now; numba passes the same into its gufunc)."""
    names = sorted({n.id for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Name)} - {target})
    found = []
    for name in names:
        if name in fe.bound:
            value = fe.bound[name]
            if isinstance(value, ArrayValue) or (isinstance(value, Value) and isinstance(value.type, (Scalar, Tuple))):
                found.append((name, value))
            else:
                raise NotEmittable(f"{name!r} read inside a parallel loop")
        elif name in fe.slots and name in fe.types:
            slot, kind = fe.slots[name]
            if kind == fe.types[name]:
                found.append((name, Value(fe.builder.load(slot), kind)))
        elif name in reductions:
            raise NotEmittable(f"the reduction {name} has no value before the loop")
    return found


def _parts(value) -> list:
    """What the chunk function is sent of a live-in value: a C-contiguous array's strides it computes
    again from the shape (c_strides: constant element steps let LLVM vectorise, as in the caller)."""
    if isinstance(value, ArrayValue):
        return [value.data, *value.shape, *([] if value.type.contiguous else value.strides)]
    return list(value.ir) if isinstance(value.type, Tuple) else [value.ir]


def _rebuilt(b: ir.IRBuilder, value, parts: list):
    if isinstance(value, ArrayValue):
        n = value.type.ndim
        shape = parts[1:1 + n]
        strides = c_strides(b, shape, value.type.dtype) if value.type.contiguous else parts[1 + n:]
        return ArrayValue(parts[0], shape, strides, value.type)
    return Value(parts if isinstance(value.type, Tuple) else parts[0], value.type)


def _division_start(b: ir.IRBuilder, n, divisions, d):
    """The first iteration of division `d` of `n` iterations split `divisions` ways as evenly as can be."""
    share, extra = b.sdiv(n, divisions), b.srem(n, divisions)
    return b.add(b.mul(d, share), b.select(b.icmp_signed("<", d, extra), d, extra))


def _counted_loop(entry: ir.Block, b: ir.IRBuilder, start, stop, name: str):
    """Blocks of `for k in range(start, stop)` at `b` (its counter allocated in block `entry`): (k, a
    callback closing the loop); the body goes at the builder's position on return, then the callback."""
    function = b.function
    counter = ir.IRBuilder(entry).alloca(I64, name=name)
    b.store(start, counter)
    head, body, after = (function.append_basic_block(f"{name}_{s}") for s in ("head", "body", "end"))
    b.branch(head)
    b.position_at_end(head)
    k = b.load(counter)
    b.cbranch(b.icmp_signed("<", k, stop), body, after)
    b.position_at_end(body)

    def close(latch_builder: ir.IRBuilder) -> None:
        latch_builder.store(latch_builder.add(latch_builder.load(counter), I64(1)), counter)
        latch_builder.branch(head)
        latch_builder.position_at_end(after)

    return k, close


def emit_parallel_loop(fe, stmt: ast.For) -> None:
    """`for v in _qg_prange(n): body` in `fe` (see the module's docstring)."""
    call = stmt.iter
    if stmt.orelse or not isinstance(stmt.target, ast.Name) or len(call.args) != 1 or call.keywords:
        raise NotEmittable("a parallel loop other than for v in prange(n)")
    module = fe.owner
    if not hasattr(module, "ir") or getattr(module, "views", None) is not None:
        raise NotEmittable("a parallel loop outside CPU code")
    count = fe.expr(call.args[0])
    if not isinstance(count, Value) or not isinstance(count.type, Scalar) or count.type.kind not in "iub":
        raise NotEmittable("prange() of other than an integer")
    b = fe.builder
    n = convert(b, count.ir, count.type, INT64)
    n = b.select(b.icmp_signed(">", n, I64(0)), n, I64(0))
    body, target = stmt.body, stmt.target.id
    _refuse_escapes(body)
    reductions = _reductions(body)
    live = _live_in(fe, body, target, reductions)
    partial_kinds = {name: fe.types[name] for name in reductions}
    if not all(isinstance(k, Scalar) for k in partial_kinds.values()):
        raise NotEmittable("a reduction of other than a number")

    # the environment: the live-in values' parts, n, the number of divisions, the partials' arrays
    fields = [p.type for _, value in live for p in _parts(value)] + [I64, I64] + \
        [ir.ArrayType(k.ir, MAX_DIVISIONS).as_pointer() for k in partial_kinds.values()]
    env_type = ir.LiteralStructType(fields)
    at_entry = ir.IRBuilder(fe.entry)
    env = at_entry.alloca(env_type, name="prange_env")
    partials = {name: at_entry.alloca(ir.ArrayType(k.ir, MAX_DIVISIONS), name=f"{name}_partials")
                for name, k in partial_kinds.items()}

    def field(builder: ir.IRBuilder, pointer, k: int):
        return builder.gep(pointer, [ir.IntType(32)(0), ir.IntType(32)(k)])

    k = 0
    for _, value in live:
        for part in _parts(value):
            b.store(part, field(b, env, k))
            k += 1
    n_field, divisions_field = k, k + 1
    b.store(n, field(b, env, n_field))
    partials_at = {name: k + 2 + j for j, name in enumerate(reductions)}
    for name in reductions:
        b.store(partials[name], field(b, env, partials_at[name]))

    body_function = _body_function(fe, stmt, live, reductions, partial_kinds)

    # the chunk function (numba's gufunc signature): divisions [first, first + count) of the range
    chunk = ir.Function(module.ir, _CHUNK, f"_qg_chunk_{next(module.counter)}")
    chunk.linkage = "internal"
    allocas = chunk.append_basic_block("entry")  # (a block of its own: two builders at one block's end clash)
    cb = ir.IRBuilder(chunk.append_basic_block("body"))
    args, dims = chunk.args[0], chunk.args[1]
    first = cb.ptrtoint(cb.load(args), I64)
    own = cb.bitcast(cb.load(cb.gep(args, [I64(1)])), env_type.as_pointer())
    parts = [cb.load(field(cb, own, j)) for j in range(n_field)]
    total, divisions = cb.load(field(cb, own, n_field)), cb.load(field(cb, own, divisions_field))
    outs = [cb.load(field(cb, own, partials_at[name])) for name in reductions]
    d, close = _counted_loop(allocas, cb, first, cb.add(first, cb.load(dims)), "division")
    lo = _division_start(cb, total, divisions, d)
    hi = _division_start(cb, total, divisions, cb.add(d, I64(1)))
    cb.call(body_function, parts + [lo, hi] + [cb.gep(out, [I64(0), d]) for out in outs])
    close(cb)
    cb.ret_void()
    ir.IRBuilder(allocas).branch(chunk.basic_blocks[1])

    # the call: one division per thread of the calling thread's numba thread count
    b = fe.builder
    threads = b.call(c_function(module.ir, "get_num_threads", I64, []), [])
    threads = b.select(b.icmp_signed("<", threads, I64(1)), I64(1), threads)
    divisions = b.select(b.icmp_signed(">", threads, I64(MAX_DIVISIONS)), I64(MAX_DIVISIONS), threads)
    b.store(divisions, field(b, env, divisions_field))
    arg_array = at_entry.alloca(I8P, size=2, name="prange_args")
    dims_array = at_entry.alloca(I64, size=1, name="prange_dims")
    steps_array = at_entry.alloca(I64, size=2, name="prange_steps")
    b.store(I8P(None), arg_array)
    b.store(b.bitcast(env, I8P), b.gep(arg_array, [I64(1)]))
    b.store(I64(1), steps_array)  # the first argument's "pointer" is the thread's first division
    b.store(I64(0), b.gep(steps_array, [I64(1)]))
    # without the GIL while the threads run, as numba's gufuncs: the chunks never call the interpreter
    state = b.call(c_function(module.ir, "PyEval_SaveThread", I8P, []), [])
    with b.if_else(b.icmp_signed("==", divisions, I64(1))) as (alone, spread):
        with alone:
            b.store(I64(1), dims_array)
            b.call(chunk, [arg_array, dims_array, steps_array, I8P(None)])
        with spread:
            b.store(divisions, dims_array)
            parallel_for = c_function(module.ir, "numba_parallel_for", _VOID, [I8P] * 5 + [I64] * 3)
            b.call(parallel_for, [b.bitcast(chunk, I8P), b.bitcast(arg_array, I8P), b.bitcast(dims_array, I8P),
                                  b.bitcast(steps_array, I8P), I8P(None), I64(0), I64(2), divisions])
    b.call(c_function(module.ir, "PyEval_RestoreThread", _VOID, [I8P]), [state])

    # the partials folded into each reduction variable in division order
    for name, kind in partial_kinds.items():
        d, close = _counted_loop(fe.entry, b, I64(0), divisions, f"{name}_fold")
        partial = Value(b.load(b.gep(partials[name], [I64(0), d])), kind)
        current = Value(b.load(fe.slot(name, fe.types[name])), fe.types[name])
        if reductions[name] == "add":
            folded = fe.binary(ast.Add(), current, partial)
        else:
            folded = min_max(fe, [current, partial], ">" if reductions[name] == "max" else "<")
        fe.assign(ast.Name(id=name, ctx=ast.Store()), folded)
        close(fe.builder)
        b = fe.builder


def _body_function(fe, stmt: ast.For, live: list, reductions: dict, partial_kinds: dict) -> ir.Function:
    """The loop over iterations [lo, hi) of one division: the live-in values' parts, lo, hi and a pointer
    to each reduction's partial as parameters. The arrays' data pointers are `noalias`, as in numba's
    gufuncs (qgraph refuses overlapping array arguments), so LLVM vectorises what numba's loops would."""
    from .emitter import FunctionEmitter

    module = fe.owner
    types = [p.type for _, value in live for p in _parts(value)] + [I64, I64] + \
        [k.ir.as_pointer() for k in partial_kinds.values()]
    function = ir.Function(module.ir, ir.FunctionType(_VOID, types), f"_qg_iterations_{next(module.counter)}")
    function.linkage = "internal"
    arrays = [value.data for _, value in live if isinstance(value, ArrayValue)]
    distinct = len({id(a) for a in arrays}) == len(arrays)  # two names of one array: no noalias
    ce = FunctionEmitter(module, fe.fdef, fe.namespace, fe.types)
    ce.role = "chunk"
    ce.begin(function, {})
    cb = ce.builder
    k = 0
    for name, value in live:
        count = len(_parts(value))
        params = list(function.args[k:k + count])
        if isinstance(value, ArrayValue) and distinct:
            params[0].add_attribute("noalias")
        loaded = _rebuilt(cb, value, params)
        k += count
        if isinstance(loaded, Value) and isinstance(loaded.type, Scalar) and name not in fe.bound:
            ce.bind_scalar(name, loaded.ir, loaded.type)
        else:
            ce.bound[name] = loaded
    lo, hi = function.args[k], function.args[k + 1]
    outs = dict(zip(reductions, function.args[k + 2:]))
    for name in partial_kinds:  # each division's partial starts afresh
        outs[name].add_attribute("noalias")
        if reductions[name] == "add":
            cb.store(ir.Constant(fe.types[name].ir, 0), ce.slot(name, fe.types[name]))
    counter = ir.IRBuilder(ce.entry).alloca(I64, name="iteration")
    cb.store(lo, counter)
    head, loop, latch, after = (function.append_basic_block(s) for s in ("iter", "iter_body", "iter_next", "iter_end"))
    cb.branch(head)
    cb.position_at_end(head)
    i = cb.load(counter)
    cb.cbranch(cb.icmp_signed("<", i, hi), loop, after)
    cb.position_at_end(loop)
    ce.assign(stmt.target, Value(i, UINT64))  # numba's prange index is unsigned (uintp)
    ce.loop_body(stmt.body, latch, after)
    cb = ce.builder
    cb.position_at_end(latch)
    cb.store(cb.add(cb.load(counter), I64(1)), counter)
    cb.branch(head)
    cb.position_at_end(after)
    for name, kind in partial_kinds.items():
        partial = cb.load(ce.slot(name, fe.types[name]))
        cb.store(convert(cb, partial, fe.types[name], kind), outs[name])
    cb.ret_void()
    ce.finish_entry()
    fe.learnt |= ce.learnt
    return function
