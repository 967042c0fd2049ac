"""CPU code generation: one module per kernel for numba.

`@qgraph.func` helpers, one function per unit of tasks (runs of up to MAX_UNIT_TASKS parallel
tasks numba can analyse share one, so numba may fuse their loops; every other task is its
own) and a
runner that walks the kernel's region tree, calling the units in order (a device loop
region becomes a do-while on its flag).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

from ..front import ast_clone
from ..front.interchange import InterchangedTask
from ..front.parse import KernelSource
from ..front.regions import DeviceLoop, Dim, IfRegion, Region, RepeatLoop, Task, control_regions
from ..lower.debug_checks import INTERRUPT_WORD, RECORD, UNIT_WORD, DebugPlan
from ..lower.fingerprint import fingerprint_of
from ..lower.lowering import (
    RUNNER,
    CallRewriter,
    Symbols,
    ZeroDIndex,
    assign,
    binop,
    call,
    function_def,
    lower_funcs,
    lower_statements,
    module_of,
    name_node,
    task_locals,
    view_assignments,
)
from ..lower.updates import Reduction, UpdateRewriter, combine, has_inner_loops
from ..options import DEFAULT_OPTIONS, KernelOptions
from ..types.precision import weak_typed
from ..types.weak_types import param_type
from . import loops as cpu_loops
from .fusion import MAX_UNIT_TASKS, fusable
from .loops import IndexByCounter, RunnerStatus, counted_loop, flag_value, outer_loop, runner_status, trip_count
from .serial_form import CHUNK_CHECK, HANDS_OVER, SERIAL_RUNNER, serial_runner, size_check
from .shared_units import shared_units


@dataclass
class CpuModule:
    tree: ast.Module  # the unit functions and the runner
    func_codes: list[tuple[str, ast.Module, KernelSource]]  # each @qgraph.func, run in its own module's globals
    units: list[tuple[str, bool]]  # (function name, has parallel loops), in call order
    atomics: set[str]
    fingerprint: str  # what the generated code depends on, for the disk cache
    runner: str  # the runner's (unique) function name
    unit_tasks: list[tuple[Task, ...]]  # each unit's tasks, by unit number (the runner records the one running)
    runner_parallel: bool = False  # the runner is the only unit itself, with parallel loops
    serial_runner: str | None = None  # the serial form's function (lang.cpu.serial_form), None without one
    hands_over: str | None = None  # its size check alone (serial_form.HANDS_OVER), None without one

    @property
    def funcs(self) -> list[str]:
        return [name for name, _, _ in self.func_codes]


def _cpu_parallel_loop(task: Task, body: list[ast.stmt], zero_d: frozenset[str],
                       reductions: tuple[list[ast.stmt], list[ast.stmt]] = ([], []),
                       chunked: bool = False) -> list[ast.stmt]:
    """prange over the outer dimension; inner ndrange dimensions as serial loops.

    `reductions` holds the statements initialising the partials before the loop and folding
    them into their targets after it: numba's parallel reductions keep a partial per thread.
    `chunked`: the outer range runs in chunks with a Ctrl-C check between them (cpu_loops.outer_loop).
    """
    at = ast.Pass()
    ast.copy_location(at, task.body[0])
    views = ZeroDIndex(zero_d)
    inner = [views.visit(s) for s in body]
    frame = None
    if chunked and (reductions[0] or reductions[1]):  # the partials start and fold around each chunk
        frame, reductions = reductions, ([], [])
    stmts: list[ast.stmt] = view_assignments(views.used, at) + reductions[0]
    for k in range(len(task.dims) - 1, -1, -1):
        dim = task.dims[k]
        var = task.loop_vars[k]
        rng = "_qg_prange" if k == 0 else "range"
        if dim.step is None:
            # `prange(stop)` when the start is a literal 0: numba then knows the index is
            # non-negative, drops the wraparound checks and vectorises (2.5x for a saxpy)
            zero = isinstance(dim.start, ast.Constant) and dim.start.value == 0
            iter_ = call(rng, [dim.stop] if zero else [dim.start, dim.stop], dim.stop)
            if zero:
                # numba types that index unsigned; the loop variable is a signed int64 as in
                # Python (so `min(i, 3)` and `i - 5` stay integers), bound from it
                counter = f"_qg_u{k}_{task.index}"
                # (masking the sign bit keeps what LLVM knows: non-negative, so no wraparound checks)
                signed = assign(var, binop(call("_qg_i64", [name_node(counter, at)], at), ast.BitAnd(),
                                           ast.copy_location(ast.Constant(0x7FFFFFFFFFFFFFFF), at), at), at)
                if k == 0 and not _assigns(inner, var):
                    inner = [IndexByCounter(var, counter).visit(s) for s in inner]
                # (when every use is indexed by the counter, no copy for numba to type and lower)
                head = [signed] if _reads(inner, var) else []
                inner = outer_loop(task, counter, dim.stop if zero else None, iter_, head + inner, chunked and k == 0,
                                    at, frame=frame if k == 0 else None)
            else:
                count = binop(dim.stop, ast.Sub(), dim.start, dim.stop)
                inner = outer_loop(task, var, count, iter_, inner, chunked and k == 0, at, start=dim.start,
                                   frame=frame if k == 0 else None)
        else:
            s, e, d = f"_qg_s{k}_{task.index}", f"_qg_e{k}_{task.index}", f"_qg_d{k}_{task.index}"
            stmts += [assign(s, dim.start, at), assign(e, dim.stop, at), assign(d, dim.step, at)]
            trip = call("_qg_trip_count", [name_node(s, at), name_node(e, at), name_node(d, at)], at)
            counter = f"_qg_k{task.index}"
            index = assign(var, binop(name_node(s, at), ast.Add(),
                                        binop(name_node(counter, at), ast.Mult(), name_node(d, at), at), at), at)
            inner = outer_loop(task, counter, trip if k == 0 else None, call(rng, [trip], at), [index] + inner,
                                chunked and k == 0, at, frame=frame if k == 0 else None)
    if chunked and len(task.dims) > 1:  # the work of one outer iteration, for the first chunk's size
        stmts.append(_parse(f"_qg_cw_{task.index} = " + " * ".join(
            ["1"] + [ast.unparse(trip_count(d)) for d in task.dims[1:]]), at))
    return stmts + inner + reductions[1]


def _reads(stmts: list[ast.stmt], name: str) -> bool:
    """Whether `name` is read anywhere in `stmts`."""
    return any(isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Store)
               for stmt in stmts for n in ast.walk(stmt))


def _assigns(stmts: list[ast.stmt], name: str) -> bool:
    """Whether `name` is a store target anywhere in `stmts`."""
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
               for stmt in stmts for n in ast.walk(stmt))


def _partial_update(reduction: Reduction, value: ast.expr, at: ast.stmt) -> ast.stmt:
    """Accumulate into the partial in a form numba recognises as a parallel reduction."""
    var = name_node(reduction.var, at)
    if reduction.op in ("add", "sub"):
        return ast.copy_location(ast.AugAssign(name_node(reduction.var, at, True), ast.Add(), value), at)
    return assign(reduction.var, call(reduction.op, [var, value], at), at)


def _reduction_frame(src: KernelSource, task: Task, found: list[Reduction],
                     symbols: Symbols) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """Partials before the loop (0, which numba widens to float64 for float values, or the
    target's current value for min/max, which is idempotent) and the fold after it."""
    at = task.body[0]
    before, after = [], []
    for r in found:
        if r.op in ("add", "sub"):
            before.append(assign(r.var, ast.copy_location(ast.Constant(0), at), at))
        else:
            current = ast.copy_location(ast.Subscript(name_node(r.target, at), r.index, ast.Load()), at)
            before.append(assign(r.var, current, at))
        after.append(combine(r, at))
    rewriter = CallRewriter(src, task_locals(src, task), symbols)
    return [rewriter.visit(s) for s in before], [rewriter.visit(s) for s in after]


def cpu_module(src: KernelSource, options: KernelOptions = DEFAULT_OPTIONS, kinds: list | None = None,
               funcs: list | None = None, debug: DebugPlan | None = None) -> CpuModule:
    """One function per unit of tasks, and a runner that walks the region tree calling them.

    Within a sequence, runs of parallel tasks that numba can analyse share a function, so
    numba fuses adjacent loops where that is safe, as it would for the same loops written
    by hand; every other boundary between tasks is a call, which numba never reorders. A
    device loop becomes a do-while on its flag, guarded by `options.max_iterations`. `kinds`
    are the argument kinds of `src`'s parameters: parallel loops index the 0-d arrays
    through 1-element views, and Python numbers are typed weakly against them and
    `options.default_float` (lang.types.precision); None leaves the code untyped. `src` is
    flattened (lang.flat.view), `funcs` its @qgraph.func specialisations, `debug` the plan of
    `options.debug`. With device loops the runner returns
    (status, loop, passes of each loop), the status a cpu_loops.RunnerStatus; without device
    loops it returns None, or CHUNK_INTERRUPTED when Ctrl-C stopped a chunked parallel loop.
    The runner takes the record array `_qg_record` after the parameters and writes the number
    of the unit it runs into it, so an exception from a task can name the task.
    """
    zero_d = frozenset(n for n, k in zip(src.param_names, kinds or ()) if k.ndim == 0)
    precision = None
    if kinds is not None:
        precision = ({n: param_type(k) for n, k in zip(src.param_names, kinds)}, options.default_float)
    max_iterations = options.max_iterations
    symbols = Symbols(specialised=list(funcs or []))
    defs: list[ast.stmt] = []
    serial_defs: list[ast.stmt] = []  # the units' tasks without chunks (serial_form), by unit
    units: list[tuple[str, bool]] = []
    unit_tasks: list[tuple[Task, ...]] = []
    at = src.fn_def

    def unit_call(unit: list[Task]) -> list[ast.stmt]:
        body: list[ast.stmt] = []
        used: set[str] = set()
        blocks: list[str] = []
        ticks = [False]  # a serial task's loops check for signals: the unit takes the record
        # a lone parallel task runs in chunks, checking for Ctrl-C between them (fused loops would no
        # longer fuse); a reduction's chunks double instead of being timed, so its sums stay the same
        # each run (as fast as one loop: sum+max of 3M, 1.41-1.48 ms both ways)
        chunked = cpu_loops.CHUNK_PARALLEL_LOOPS and len(unit) == 1 and unit[0].parallel
        serial_body: list[ast.stmt] = []  # the same tasks without chunks, for the serial form
        for task in unit:
            updates = None
            if task.parallel:
                updates = UpdateRewriter(task, set(src.param_names), src.resolve, src.error, symbols.atomic,
                                         _partial_update, True, src.adjoint is not None and has_inner_loops(task))
            local_names = task_locals(src, task)
            stmts = task.body
            if precision is not None:
                stmts = weak_typed(src, stmts, precision[0], task.loop_vars, local_names, precision[1],
                                   funcs=symbols.typing_funcs(precision[1]))
            lowered = lower_statements(src, stmts, local_names, symbols, updates)
            if isinstance(task, InterchangedTask):  # its passes in blocks, the runner's (passes_in_blocks)
                lowered = cpu_loops.with_pass_block(lowered, cpu_loops.pass_block(task))
                blocks.append(cpu_loops.pass_block(task))

            def placed(stmts: list[ast.stmt], chunks: bool, task=task, updates=updates) -> list[ast.stmt]:
                """The task's statements in its parallel loop (in chunks or not), with its debug checks."""
                if task.parallel:
                    dims = [Dim(*lower_bounds(src, d, symbols)) for d in task.dims]
                    stmts = _cpu_parallel_loop(_with_dims(task, dims), stmts, zero_d, _reduction_frame(
                        src, task, list(updates.reductions.values()), symbols), chunked=chunks)
                else:  # its loops check for signals (Ctrl-C) now and then
                    stmts = cpu_loops.with_ticks(stmts, f"kernel {src.name} was interrupted in its serial task at "
                                                 f"line {task.lineno}; the next call starts afresh", at)
                    ticks[0] |= _assigns(stmts[:1], "_qg_tick")
                return stmts if debug is None else debug.apply(stmts, symbols.atomic_paths.values())

            stmts = placed(ast_clone.clone(lowered) if chunked else lowered, chunked)
            body += stmts
            # (serial_runner copies what it inlines, so the unchunked units may share statements)
            serial_body += placed(lowered, False) if chunked else stmts
            used |= set(task.loaded) | set(task.bound_names)
        late = not chunked and any(t.parallel for t in unit)  # Ctrl-C seen as its loops end, and named then
        if late:
            body.append(_parse(f"if _qg_interrupted({RECORD}):\n    {RECORD}[{INTERRUPT_WORD}] = 1\n"
                               f"    return {int(RunnerStatus.CHUNK_INTERRUPTED)}", at))
        params = [p for p in src.param_names if p in used] + blocks + \
            ([RECORD] if debug is not None or chunked or ticks[0] or late else [])
        name = f"_qg_unit_{len(units)}"
        defs.append(function_def(name, params, body, unit[0].lineno))
        serial_defs.append(function_def(name, params, serial_body, unit[0].lineno))
        units.append((name, any(t.parallel for t in unit)))
        unit_tasks.append(tuple(unit))
        running = _parse(f"{RECORD}[{UNIT_WORD}] = {len(units) - 1}", at)
        stmts = [running, ast.copy_location(ast.Expr(call(name, [name_node(p, at) for p in params], at)), at)]
        if chunked or late:  # Ctrl-C stopped the unit: the runner stops too (the launcher raises)
            check = _parse(f"if {RECORD}[{INTERRUPT_WORD}] != 0:\n    return{interrupted}", at)
            setattr(check, CHUNK_CHECK, True)  # (the serial form has no chunks, so none of these)
            stmts.append(check)
        unit_call_stmts[0] = stmts
        return stmts

    def walk(region: Region) -> list[ast.stmt]:
        if isinstance(region, InterchangedTask):
            return cpu_loops.passes_in_blocks(region, loops.index(region), len(loops), unit_call([region]),
                                              debug is not None, at)
        if isinstance(region, Task):
            return unit_call([region])
        if isinstance(region, (DeviceLoop, RepeatLoop)):
            return counted_loop(region, loops.index(region), len(loops), walk(region.body), zero_d,
                                max_iterations, at, debug is not None)
        if isinstance(region, IfRegion):
            test = _parse(f"{flag_value(region.flag, zero_d)} != 0", at).value
            branch = ast.If(test, walk(region.then) or [ast.Pass()], walk(region.orelse))
            return [ast.fix_missing_locations(ast.copy_location(branch, at))]
        stmts: list[ast.stmt] = []
        run: list[Task] = []
        for child in region.children:
            alone = not isinstance(child, Task) or isinstance(child, InterchangedTask)  # a loop of the runner's
            if not alone and run and len(run) < MAX_UNIT_TASKS and fusable(src, child) \
                    and all(fusable(src, t) for t in run):
                run.append(child)
                continue
            if run:
                stmts += unit_call(run)
            run = [] if alone else [child]
            if alone:
                stmts += walk(child)
        if run:
            stmts += unit_call(run)
        return stmts

    loops = cpu_loops.runner_loops(src.body)  # numbered as walk meets them: outermost first
    stopped = RunnerStatus.CHUNK_INTERRUPTED  # without counted loops the runner returns it alone
    interrupted = f" {runner_status(stopped, -1, len(loops))}" if loops else f" {int(stopped)}"
    unit_call_stmts: list[list[ast.stmt]] = [[]]  # the last unit call's statements
    runner_body = walk(src.body)
    if loops:
        runner_body = [_parse(f"_qg_n{k} = 0", at) for k in range(len(loops))] + runner_body + \
            [_parse(f"return {runner_status(RunnerStatus.DONE, -1, len(loops))}", at)]
    runner_parallel = False
    serial_body = runner_body
    if not loops and len(units) == 1 and len(runner_body) == len(unit_call_stmts[0]):
        # One unit and nothing around it: the unit is the runner. A runner calling a unit makes
        # numba compile and optimise the unit's code a second time, linked into the runner.
        runner_parallel = units.pop()[1]
        serial_body = runner_body[:1] + serial_defs.pop().body
        runner_body = runner_body[:1] + defs.pop().body
    runner = function_def(RUNNER, list(src.param_names) + [RECORD], runner_body, src.lineno)
    serial = hands_over = None
    if options.cpu_serial_below and kinds is not None:
        status = runner_status(RunnerStatus.NEEDS_PARALLEL, -1, len(loops)) if loops \
            else int(RunnerStatus.NEEDS_PARALLEL)
        prologue = [] if not any(parallel for _, parallel in units) and not runner_parallel else \
            size_check(list(zip(src.param_names, kinds)), options.cpu_serial_below, str(status), at)
        if prologue:
            counters = [_parse(f"_qg_n{k} = 0", at) for k in range(len(loops))]  # the status tuple reads them
            check = counters + ast_clone.clone(prologue) + [_parse("return 0", at)]
            hands_over = function_def(HANDS_OVER, list(src.param_names) + [RECORD], check, src.lineno)
        serial = serial_runner(function_def(RUNNER, list(src.param_names) + [RECORD], serial_body, src.lineno),
                               serial_defs, prologue)
    same = shared_units(defs)  # units of the same code up to names: one function, called with each unit's arguments
    if any(name != first for name, first in same.items()):
        _Rename(same).visit(runner)
        defs = [d for d in defs if same[d.name] == d.name]
        units = [(same[name], parallel) for name, parallel in units]
    defs.append(runner)
    defs += [d for d in (serial, hands_over) if d is not None]
    func_defs = lower_funcs(symbols)
    # the options that change code (compile flags such as fast math) are part of the fingerprint: numba's
    # cache index does not key on them, so each setting gets symbols and cache entries of its own
    fingerprint = fingerprint_of(src, [f for f, _, _ in func_defs] + defs, [s for _, _, s in func_defs],
                                 options.code_key())
    # numba names compiled code after module, qualname and a per-process counter, so two
    # kernels compiled by different processes can emit the same symbol, and a process
    # loading both from the disk cache links whichever it loaded first. Names unique to the
    # kernel and its code make every cached symbol mean exactly one piece of code.
    renames = {name: unique_symbol(name, src.name, fingerprint)
               for name in [f.name for f, _, _ in func_defs] + [d.name for d in defs]}
    for fdef, _, _ in func_defs:
        _Rename(renames).visit(fdef)
    for d in defs:
        _Rename(renames).visit(d)
    func_codes = [(fdef.name, module_of([fdef]), fsrc) for fdef, _, fsrc in func_defs]
    units = [(renames[name], parallel) for name, parallel in units]
    return CpuModule(module_of(defs), func_codes, units, symbols.atomics, fingerprint,
                     renames[RUNNER], unit_tasks, runner_parallel, serial and renames[SERIAL_RUNNER],
                     hands_over and renames[HANDS_OVER])


def _parse(code: str, at: ast.AST) -> ast.stmt:
    stmt = ast.parse(code).body[0]
    for node in ast.walk(stmt):
        ast.copy_location(node, at)
    return stmt


def counted_loops(body: Region) -> list:
    """The loops whose passes the runner counts (DeviceLoop and RepeatLoop), in pre-order."""
    return [r for r in control_regions(body) if isinstance(r, (DeviceLoop, RepeatLoop))]


def unique_symbol(name: str, kernel_name: str, fingerprint: str) -> str:
    """A generated function's name, unique to its kernel and code (see cpu_module)."""
    return f"{name}__{kernel_name}_{fingerprint[:16]}"


class _Rename(ast.NodeTransformer):
    """Rename generated functions: their definitions and every reference to them."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self.mapping.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.mapping.get(node.id, node.id)
        return node


def lower_bounds(src: KernelSource, dim: Dim, symbols: Symbols) -> tuple:
    """A loop dimension's bound expressions with qgraph builtins rewritten."""
    rewriter = CallRewriter(src, set(src.param_names), symbols)
    return tuple(None if e is None else rewriter.visit(ast_clone.clone(e))
                 for e in (dim.start, dim.stop, dim.step))


def _with_dims(task: Task, dims: list[Dim]) -> Task:
    clone = copy.copy(task)
    clone.dims = tuple(dims)
    return clone
