"""How the CPU runner's loops run (lang.cpu.codegen). A parallel task's outer range: indexed by
numba's prange counter itself, and, for a lone parallel loop, in timed chunks with a Ctrl-C
check between them (compiler.cpu_interrupts), so a long plain kernel stops within about 0.2 s.
A device loop or repeat: counted, with the runaway guard, a Ctrl-C check and a kernel.cancel()
check after each pass (while other threads exist, the runner lets them run about every
millisecond: compiler.cpu_interrupts.let_threads_run, so one of them can cancel); how the runner
stopped is a RunnerStatus, which the launcher (backends.cpu) reads back.
"""

from __future__ import annotations

import ast
import enum

from ..front import ast_clone
from ..front.interchange import PASS, InterchangedTask
from ..front.regions import DeviceLoop, Dim, RepeatLoop, Task, children_of, loop_limit
from ..lower.debug_checks import INTERRUPT_WORD, LOOP_PASSES, RECORD, YIELD_COUNT
from ..lower.lowering import binop, call, name_node
from ..lower.updates import has_inner_loops

# Lone parallel loops run in chunks with a Ctrl-C check between them (`outer_loop`); False
# generates the loop of earlier releases (benchmarks/cpu_interrupt_cost.py compares both)
CHUNK_PARALLEL_LOOPS = True


# The work (outer times inner iterations) of a chunked loop's first chunk (compiler.cpu_interrupts),
# so a small kernel stays one chunk; calls this large run the parallel form (lang.cpu.serial_form)
FIRST_CHUNK_WORK = 1 << 18
# The work a chunked loop's first chunk counts for an iteration whose body loops (of unknown length):
# its first chunk is FIRST_CHUNK_WORK // LOOP_WORK iterations, and the next ones are timed
LOOP_WORK = 1 << 12

# A device loop's check after each pass (compiler.cpu_interrupts.thread_functions): Ctrl-C
# (INTERRUPTED), letting other threads run, kernel.cancel() (CANCELLED); 0 to go on
PASS_END = "_qg_pass_end"


class RunnerStatus(enum.IntEnum):
    """How a CPU runner with counted loops stopped: the first of the (status, loop, passes of
    each loop) it returns."""

    DONE = 0
    RUNAWAY = 1  # a device loop ran max_iterations passes with its flag still set (the guard)
    INTERRUPTED = 2  # Ctrl-C after a pass of a device loop or repeat
    CHECK_FAILED = 3  # a debug check failed (lang.lower.debug_checks; the record says which)
    CHUNK_INTERRUPTED = 4  # Ctrl-C between the chunks of a lone parallel loop (outer_loop)
    CANCELLED = 5  # kernel.cancel() (the record's CANCEL_WORD) after a pass of a device loop or repeat
    NEEDS_PARALLEL = 6  # the serial form's call is too large for it: nothing ran (lang.cpu.serial_form)


class IndexByCounter(ast.NodeTransformer):
    """`x[i]`, `x[i, j]` -> `x[u]`, `x[u, j]`: a parallel loop's stores and loads indexed by the
    prange counter itself. numba fuses adjacent parallel loops only when each one's array
    accesses are indexed by its own loop index; through the signed copy `i` it kept 8 loops
    apart (8 gufuncs: 1.2-1.4 s to compile against 0.47 s fused, as numba fuses the same loops
    written by hand). The signed `i` stays for arithmetic (`i - 1`, `min(i, 3)`)."""

    def __init__(self, var: str, counter: str) -> None:
        self.var, self.counter = var, counter

    def _swap(self, index: ast.expr) -> ast.expr:
        if isinstance(index, ast.Name) and index.id == self.var:
            return ast.copy_location(ast.Name(self.counter, ast.Load()), index)
        return index

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.slice, ast.Tuple) and node.slice.elts:
            node.slice.elts[0] = self._swap(node.slice.elts[0])
        else:
            node.slice = self._swap(node.slice)
        return node


def trip_count(dim: Dim) -> ast.expr:
    """The iteration count of a dimension, as an expression."""
    if dim.step is None:
        return call("max", [ast.Constant(0), binop(dim.stop, ast.Sub(), dim.start, dim.stop)], dim.stop)
    return call("_qg_trip_count", [dim.start, dim.stop, dim.step], dim.stop)


def outer_loop(task: Task, counter: str, count: ast.expr | None, iter_: ast.expr, body: list[ast.stmt],
                chunked: bool, at: ast.AST, start: ast.expr | None = None,
                frame: tuple[list[ast.stmt], list[ast.stmt]] | None = None) -> list[ast.stmt]:
    """`for counter in iter_: body`, or with `chunked` the same iterations (`count` of them,
    from 0 as the prange's literal-0 form counts, or from `start` for `prange(start, stop)`)
    in chunks, each a parallel loop of its own, sized to take about 0.2 s
    (compiler.cpu_interrupts): between chunks, Ctrl-C ends the unit and marks the record's
    INTERRUPT_WORD, so a plain kernel stops within a chunk instead of at its end. A reduction's
    `frame` (its partials' start and fold) runs around each chunk, and its chunks double in size
    instead of being timed: its sums are the same each run, and Ctrl-C stops it within as long as
    it had run."""
    if not chunked or count is None:
        loop = ast.copy_location(ast.For(name_node(counter, at, True), iter_, body, []), at)
        return [loop] if frame is None else [*frame[0], loop, *frame[1]]
    t = task.index
    work = f"_qg_cw_{t}" if len(task.dims) > 1 else "1"
    if has_inner_loops(task):
        work = f"{work} * {LOOP_WORK}"  # its iterations' own loops: a first chunk of a few iterations
    head = [f"_qg_cn_{t} = {ast.unparse(count)}", f"_qg_cb_{t} = 0", f"_qg_cs_{t} = _qg_first_chunk({work})"]
    value = f"_qg_co_{t} + _qg_cv_{t}"
    if start is not None:  # a signed index from `start`, as prange(start, stop) gave it
        head.append(f"_qg_c0_{t} = {ast.unparse(start)}")
        value = f"_qg_c0_{t} + _qg_i64({value})"
    loop = _parse(f"while _qg_cb_{t} < _qg_cn_{t}:\n"
                  f"    _qg_ct_{t} = _qg_clock_ns()\n"
                  f"    _qg_cl_{t} = min(_qg_cs_{t}, _qg_cn_{t} - _qg_cb_{t})\n"
                  f"    _qg_co_{t} = _qg_u64(_qg_cb_{t})\n"
                  f"    for _qg_cv_{t} in _qg_prange(_qg_cl_{t}):\n"
                  f"        {counter} = {value}\n"
                  f"    _qg_cb_{t} += _qg_cl_{t}\n"
                  f"    if _qg_interrupted({RECORD}):\n"
                  f"        {RECORD}[{INTERRUPT_WORD}] = 1\n"
                  f"        return {int(RunnerStatus.CHUNK_INTERRUPTED)}\n"
                  f"    _qg_cs_{t} = _qg_next_chunk(_qg_cs_{t}, _qg_clock_ns() - _qg_ct_{t})", at)
    loop.body[3].body += body
    if frame is not None:  # a reduction: its partials around each chunk, which doubles
        loop.body[-1] = _parse(f"_qg_cs_{t} = max(_qg_cb_{t}, 1)", at)
        loop.body[3:5] = [*frame[0], loop.body[3], loop.body[4], *frame[1]]
    return [_parse(line, at) for line in head] + [loop]


def _parse(code: str, at: ast.AST) -> ast.stmt:
    stmt = ast.parse(code).body[0]
    for node in ast.walk(stmt):
        ast.copy_location(node, at)
    return stmt


def runner_status(status: RunnerStatus | str, loop: int, n_loops: int) -> str:
    """The runner's return value: (status, the loop it stopped in or -1, passes of each loop); the
    status a RunnerStatus or the name of a variable holding one."""
    code = status if isinstance(status, str) else int(status)
    return f"({code}, {loop}, {', '.join(f'_qg_n{k}' for k in range(n_loops))})"


def flag_value(flag: str, zero_d: frozenset[str]) -> str:
    """A flag parameter's value as generated code reads it (a 0-d parameter through `[()]`)."""
    return f"{flag}[()]" if flag in zero_d else f"{flag}[0]"


def counted_loop(region, k: int, n_loops: int, body: list[ast.stmt], zero_d: frozenset[str],
                 kernel_limit: int | None, at: ast.AST, debug: bool = False) -> list[ast.stmt]:
    """A loop that counts its passes (`_qg_n<k>`, of its last entry), stops at the runaway guard
    and checks for Ctrl-C, kernel.cancel() (and in debug mode for a failed check) after each pass:
    do-while or while on a flag, or `count` passes."""
    checks, start = _pass_end(k, n_loops, debug, at)
    if isinstance(region, RepeatLoop):
        tail = [f"_qg_n{k} += 1"] + checks
        loop = ast.For(_parse("_qg_pass = 0", at).targets[0], _parse(f"range({region.count})", at).value,
                       body + [_parse(line, at) for line in tail], [])
        return start + [ast.fix_missing_locations(ast.copy_location(loop, at))]
    stop = _stop(k, n_loops)
    flag = flag_value(region.flag, zero_d)
    limit = loop_limit(region, kernel_limit)
    tail = [f"_qg_n{k} += 1", f"if {flag} == 0:\n    break"]
    if limit is not None:
        tail.append(f"if _qg_n{k} >= {int(limit)}:\n{stop(RunnerStatus.RUNAWAY)}")
    tail += checks
    test = _parse(f"{flag} != 0", at).value if region.test_first else ast.Constant(True)
    loop = ast.While(test, body + [_parse(line, at) for line in tail], [])
    return start + [ast.fix_missing_locations(ast.copy_location(loop, at))]


def _stop(k: int, n_loops: int):
    def stop(status: RunnerStatus | str) -> str:
        return f"    return {runner_status(status, k, n_loops)}"

    return stop


def _pass_end(k: int, n_loops: int, debug: bool, at: ast.AST) -> tuple[list[str], list[ast.stmt]]:
    """The checks after a pass of counted loop `k` (as code lines) and the loop's start statements."""
    stop = _stop(k, n_loops)
    # Ctrl-C, letting other threads run and kernel.cancel() in one call: each `if` of the loop's
    # tail is blocks numba types and lowers again for every loop (a nested adjoint's serial form
    # compiled in 3.7 s with it, 5.8 s with the checks written out)
    checks = [f"_qg_st = {PASS_END}({RECORD})", f"if _qg_st != 0:\n{stop('_qg_st')}"]
    checks += [f"if {RECORD}[0] != 0:\n{stop(RunnerStatus.CHECK_FAILED)}"] if debug else []
    start = [_parse(f"_qg_n{k} = 0", at)]
    if k == 0:  # the first loop (no loop encloses it): its passes for progress bars (backends.cpu)
        checks.insert(0, f"{RECORD}[{LOOP_PASSES}] = _qg_n0")
        start.append(_parse(f"{RECORD}[{LOOP_PASSES}] = 0", at))
    return checks, start


def runner_loops(region) -> list:
    """The loops whose passes the CPU runner counts, in pre-order (outermost first): device loops,
    repeats, and interchanged repeats, whose passes it runs in blocks (`passes_in_blocks`)."""
    found = [region] if isinstance(region, (DeviceLoop, RepeatLoop, InterchangedTask)) else []
    for child in children_of(region):
        found += runner_loops(child)
    return found


def pass_block(task: InterchangedTask) -> str:
    """The unit parameter an interchanged task's pass loop runs to: the length of its block."""
    return f"_qg_ip_{task.index}"


def with_pass_block(stmts: list[ast.stmt], block: str) -> list[ast.stmt]:
    """An interchanged task's lowered statements with its pass loop run `block` times, not `count`."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and stmt.target.id == PASS:
            stmt = ast.copy_location(ast.For(stmt.target, _parse(f"range({block})", stmt).value, stmt.body,
                                             stmt.orelse), stmt)
        out.append(stmt)
    return out


def passes_in_blocks(task: InterchangedTask, k: int, n_loops: int, unit: list[ast.stmt], debug: bool,
                     at: ast.AST) -> list[ast.stmt]:
    """An interchanged repeat loop (one parallel task running its passes per element) run in
    blocks of passes, each a call of its unit: between blocks, on the calling thread, the checks
    of a device loop's pass (Ctrl-C, kernel.cancel(), other threads let run) and its progress.
    Each element still runs its passes in order, so the results are the same bits. A block is
    sized to take about BLOCK_TARGET_NS (compiler.cpu_interrupts.next_block), from one pass; about
    YIELD_EVERY_NS while other threads exist (the record's YIELD_COUNT), so a block that runs serially,
    holding the GIL, keeps them waiting no longer than the pass checks' release would."""
    checks, start = _pass_end(k, n_loops, debug, at)
    t, n, block = task.index, f"_qg_n{k}", pass_block(task)
    loop = _parse(f"while {n} < {task.count}:\n    pass", at)
    head = [f"_qg_it_{t} = _qg_clock_ns()", f"{block} = min(_qg_iz_{t}, {task.count} - {n})"]
    shared = f"{RECORD}[{YIELD_COUNT}] != 0"  # other threads exist
    tail = [f"{n} += {block}", *checks,
            f"_qg_iz_{t} = _qg_next_block(_qg_iz_{t}, _qg_clock_ns() - _qg_it_{t}, {shared})"]
    loop.body = [_parse(line, at) for line in head] + unit + [_parse(line, at) for line in tail]
    return start + [_parse(f"_qg_iz_{t} = 1", at), ast.fix_missing_locations(loop)]


# A serial task's loops check for signals, and let other threads run, every SERIAL_TICK iterations
# (`with_ticks`; compiler.cpu_interrupts.thread_functions)
SERIAL_TICK = 1 << 14
SERIAL_TICK_CHECK = "_qg_serial_tick"


def serial_loops(task: Task) -> bool:
    """Whether a serial task has loops (which check for signals: `with_ticks`)."""
    return not task.parallel and has_inner_loops(task)


def with_ticks(stmts: list[ast.stmt], message: str, at: ast.AST) -> list[ast.stmt]:
    """A serial task's statements with a signal check at the head of each of its loops, every
    SERIAL_TICK iterations: a handler that raised (Ctrl-C, a user's SIGALRM) stops the task with
    `message` (compiler.cpu_interrupts.SerialTaskInterrupted; the launcher raises the handler's
    exception). The task runs on the calling thread, so it may run the handlers."""
    tick = [_parse(line, at) for line in (
        "_qg_tick -= 1",
        f"if _qg_tick == 0:\n    _qg_tick = {SERIAL_TICK}\n    if {SERIAL_TICK_CHECK}({RECORD}):\n"
        f"        raise _qg_SerialTaskInterrupted({message!r})")]

    class Ticks(ast.NodeTransformer):
        def visit_loop(self, node):
            self.generic_visit(node)
            node.body = [*tick, *node.body]
            return node

        visit_For = visit_While = visit_loop

    if not any(isinstance(n, (ast.For, ast.While)) for stmt in stmts for n in ast.walk(stmt)):
        return stmts
    return [_parse(f"_qg_tick = {SERIAL_TICK}", at), *(Ticks().visit(ast_clone.clone(stmt)) for stmt in stmts)]
