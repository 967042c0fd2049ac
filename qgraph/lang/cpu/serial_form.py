"""A kernel's serial form on the CPU: its runner with every unit inlined and every parallel loop a
plain loop, one numba function without parfors.

numba compiles a function with parallel loops several times slower than the same loops serial,
and each unit the runner calls is a compile of its own: a 2-task kernel took 1.15 s as runner
and two parallel units, 0.17 s as one serial function. Run on one numba thread, or over a few
thousand elements, the parallel form only adds its threads' start and join to each loop. The
serial form starts by checking that its call is one of those (and, as its loops have no Ctrl-C
chunks, under the parallel form's first chunk); when it is not, it returns
RunnerStatus.NEEDS_PARALLEL before touching anything and the launcher runs the parallel form.
"""

from __future__ import annotations

import ast
import copy

from ..front import ast_clone
from .loops import FIRST_CHUNK_WORK

SERIAL_RUNNER = "_qg_serial"
# the serial form's size check alone, run by the interpreter before the first call compiles anything:
# a call the serial form would hand over compiles only the parallel form (backends.cpu)
HANDS_OVER = "_qg_hands_over"
# the attribute marking the runner's check after a chunked unit (lang.cpu.codegen): the serial
# form's tasks run without chunks (a long task checks for Ctrl-C when it ends), so it has none
CHUNK_CHECK = "_qg_chunk_check"
THREADS = "_qg_threads"  # numba.get_num_threads, injected (compiler.cpu_program)
SIZE = "_qg_size"  # the call's largest array or integer argument


def serial_runner(runner: ast.FunctionDef, units: list[ast.FunctionDef], prologue: list[ast.stmt]) -> ast.FunctionDef:
    """`runner` (calling the functions `units`, written without chunks) as one function: each unit
    call replaced by the unit's body, its locals renamed apart, and the runner's checks after
    chunked units (marked CHUNK_CHECK) left out; `prologue` runs after the runner's leading counter
    assignments."""
    inliner = _Inliner({d.name: d for d in units})
    body = [s for stmt in ast_clone.clone(runner.body) for s in inliner.statements(stmt)]
    head = 0
    while head < len(body) and _is_counter_start(body[head]):
        head += 1
    body[head:head] = prologue
    serial = copy.copy(runner)
    serial.name, serial.args, serial.body = SERIAL_RUNNER, ast_clone.clone(runner.args), body
    serial = _SerialLoops().visit(serial)
    return ast.fix_missing_locations(ast.copy_location(serial, runner))


def size_check(params: list[tuple[str, object]], below: int, stop: str, at: ast.AST) -> list[ast.stmt]:
    """`return stop` for the calls the parallel form runs: on several threads, those whose array
    (ndim >= 1) or integer parameters among `params` ((name, args.kinds kind) pairs) reach `below`
    elements; on any number of threads, those that reach FIRST_CHUNK_WORK, where the parallel
    form's lone loops start running in chunks that Ctrl-C stops between (the serial form's loops
    have none). Without such parameters the size is unknown: every call on several threads."""
    sizes = [f"{name}.size" for name, kind in params if kind.is_array and kind.ndim >= 1]
    sizes += [name for name, kind in params
              if not kind.is_array and getattr(kind, "dtype", None) is not None and kind.dtype.kind in "iu"]
    if not sizes:
        code = f"if {THREADS}() > 1:\n    return {stop}"
    else:  # (one max() and two tests: each `or` of a chain is blocks for numba to type and lower)
        largest = sizes[0] if len(sizes) == 1 else f"max({', '.join(sizes)})"
        code = (f"{SIZE} = {largest}\n"
                f"if {SIZE} >= {FIRST_CHUNK_WORK} or ({SIZE} >= {below} and {THREADS}() > 1):\n    return {stop}")
    stmts = ast.parse(code).body
    for stmt in stmts:
        for node in ast.walk(stmt):
            ast.copy_location(node, at)
    return stmts


def _is_counter_start(stmt: ast.stmt) -> bool:
    """`_qg_n<k> = 0`, which the runner's status tuple reads (lang.cpu.loops.runner_status)."""
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
        and stmt.targets[0].id.startswith("_qg_n")


class _Inliner:
    """Unit calls replaced by their bodies, recursively through the runner's loops and branches."""

    def __init__(self, units: dict[str, ast.FunctionDef]) -> None:
        self.units, self.count = units, 0

    def statements(self, stmt: ast.stmt) -> list[ast.stmt]:
        if getattr(stmt, CHUNK_CHECK, False):
            return []
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in self.units:
            self.count += 1
            return self.inlined(self.units[call.func.id], call.args, f"_s{self.count}")
        for field in ("body", "orelse"):
            if isinstance(getattr(stmt, field, None), list):
                setattr(stmt, field, [s for child in getattr(stmt, field) for s in self.statements(child)])
        return [stmt]

    def inlined(self, unit: ast.FunctionDef, args: list[ast.expr], suffix: str) -> list[ast.stmt]:
        """The unit's body with its parameters bound to `args` and its locals suffixed."""
        params = [a.arg for a in unit.args.args]
        stored = {n.id for n in ast.walk(unit) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        names = {name: name + suffix for name in stored}  # a stored parameter is the unit's own copy
        body = ast_clone.clone(unit.body)
        head = []
        for param, arg in zip(params, args):
            if param in stored:
                head.append(ast.copy_location(ast.Assign([ast.Name(names[param], ast.Store())], ast_clone.clone(arg)),
                                              unit))
            elif arg.id != param:  # (the runner passes its own parameters, by name)
                names[param] = arg.id
        renamed = [_Renamed(names).visit(s) for s in body]
        return head + renamed


class _Renamed(ast.NodeTransformer):
    """Names mapped (a unit without chunks has no `return` of its own)."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.names.get(node.id, node.id)
        return node


class _SerialLoops(ast.NodeTransformer):
    """Parallel loops (`_qg_prange`) as `range`: numba then compiles no parfor."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "_qg_prange":
            node.id = "range"
        return node
