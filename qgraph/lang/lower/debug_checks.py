"""Debug mode's checks in generated task code: every array index, every divisor of `//` and
`%` (an integer zero gives 0 without debug mode, as in NumPy) and, with QGRAPH_DEBUG=nan,
every float stored.

A checked index `_qg_checked(a, axis, i, site, _qg_record)` is `i` when `-n <= i < n` (as
Python indexes); otherwise it writes the first failure into the int64 record array and is 0,
so the access stays inside the array and the task runs on. The launcher reads the record when
the call completes and raises there (backends/debug_report.py): on CUDA a trap would destroy
the context, and on the CPU an exception inside a parallel loop loses its kernel and line.

Record layout (RECORD_WORDS int64): [0] the failing site + 1 (0: none; the first failure wins
by compare-and-swap), [1] the index (finite checks: 0 NaN, 1 +inf, 2 -inf), [2] the number of
values in [3:], [3:3+n] the array's shape (finite checks: the element's index, when known;
divisor checks: nothing),
[UNIT_WORD] the unit of tasks running (CPU: names the task an exception came from),
[INTERRUPT_WORD] 1 once Ctrl-C stopped a chunked parallel loop (CPU; UNIT_WORD names its unit),
[CANCEL_WORD] non-zero once kernel.cancel() asked the runner's device loops to stop (CPU),
[YIELD_COUNT, YIELD_STEP, YIELD_CLOCK] while other threads exist, the passes until the runner next
lets them run, that number's last value, and the clock (ns) then (CPU: compiler.cpu_interrupts),
[LOOP_PASSES] the passes of the runner's first device loop so far (CPU: for progress bars),
[SIGNAL_ERROR] the exception a signal handler raised while the runner checked for signals (CPU:
compiler.cpu_interrupts; the launcher raises it, so a user's SIGALRM Timeout comes through).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ..front import ast_clone

CHECK_INDEX = "_qg_checked"
BAD_VALUE = "_qg_bad_value"
CHECK_DIVISOR = "_qg_checked_divisor"
FINITE_AXIS = -1  # a Site's axis for a finiteness check of a store
DIVISOR_AXIS = -2  # a Site's axis for a divisor check (its `array` is then the operator, // or %)
RECORD = "_qg_record"
RECORD_WORDS = 32
UNIT_WORD = RECORD_WORDS - 1
INTERRUPT_WORD = RECORD_WORDS - 2  # CPU: 1 once a chunked parallel loop stopped on Ctrl-C (in unit UNIT_WORD)
CANCEL_WORD = RECORD_WORDS - 3  # CPU: kernel.cancel() was called (its device loops stop after their pass)
YIELD_COUNT = RECORD_WORDS - 4  # CPU: 0 (no other thread), or passes until the runner next releases the GIL
YIELD_STEP = RECORD_WORDS - 5  # CPU: the passes between two releases (0: not measured yet)
YIELD_CLOCK = RECORD_WORDS - 6  # CPU: the clock (ns) at the last release
LOOP_PASSES = RECORD_WORDS - 7  # CPU: the passes of the runner's first (outermost) device loop so far
SIGNAL_ERROR = RECORD_WORDS - 8  # CPU: the exception a signal handler raised in a check (a PyObject*, owned)
MAX_RECORDED_DIMS = SIGNAL_ERROR - 3


@dataclass(frozen=True)
class Site:
    """One checked place in a kernel: the source line, the array (flat parameter name) and
    the axis indexed, or axis FINITE_AXIS for a finiteness check of a store, or DIVISOR_AXIS
    for a divisor check (with the operator, `//` or `%`, in place of the array)."""

    lineno: int
    array: str
    axis: int


@dataclass
class DebugPlan:
    """What debug mode checks in one specialisation, and the sites found while generating it."""

    mode: str  # "bounds" (indices) or "nan" (indices and finiteness of float stores)
    arrays: dict[str, int]  # array parameter -> ndim (0-d arrays have no index to check)
    floats: frozenset[str]  # float array parameters (finiteness checks)
    sites: list[Site] = field(default_factory=list)

    @classmethod
    def of(cls, mode: str, names, kinds) -> DebugPlan:
        """The plan for flattened parameters `names` of argument kinds `kinds`."""
        arrays = {n: k.ndim for n, k in zip(names, kinds) if k.is_array and k.ndim}
        floats = frozenset(n for n, k in zip(names, kinds) if k.is_array and k.dtype.kind == "f")
        return cls(mode, arrays, floats)

    def checks(self, atomics) -> DebugChecks:
        return DebugChecks(self.arrays, self.sites, frozenset(atomics), self.floats, self.mode == "nan")

    def apply(self, stmts: list[ast.stmt], atomics) -> list[ast.stmt]:
        checks = self.checks(atomics)
        out: list[ast.stmt] = []
        for stmt in stmts:
            done = checks.visit(stmt)
            out += done if isinstance(done, list) else [done]
        return out


class DebugChecks(ast.NodeTransformer):
    """Wraps every index of the array parameters in `arrays` (name -> ndim, at least 1) and,
    with `finite`, follows every store into an array of `floats` by a finiteness check.

    `atomics` are the backend's spellings of the atomics (their index is checked like a
    subscript's); `sites` collects what each check's number means (shared by all tasks of a
    specialisation, so a number names one place)."""

    def __init__(self, arrays: dict[str, int], sites: list[Site], atomics: frozenset[str] = frozenset(),
                 floats: frozenset[str] = frozenset(), finite: bool = False) -> None:
        self.arrays = arrays
        self.sites = sites
        self.atomics = atomics
        self.floats = floats if finite else frozenset()

    # ------------------------------------------------------------------ indices

    def _site(self, lineno: int, array: str, axis: int) -> ast.Constant:
        self.sites.append(Site(lineno, array, axis))
        return ast.Constant(len(self.sites) - 1)

    def _checked(self, array: str, index: ast.expr, at: ast.AST) -> ast.expr:
        """`index` (an expression or a tuple of them) with each component checked."""
        ndim = self.arrays[array]
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        out = []
        for axis, part in enumerate(parts):
            if isinstance(part, (ast.Slice, ast.Starred)) or axis >= ndim:
                out.append(part)
                continue
            site = self._site(getattr(at, "lineno", 0), array, axis)
            call = ast.Call(ast.Name(CHECK_INDEX, ast.Load()),
                            [ast.Name(array, ast.Load()), ast.Constant(axis), part, site,
                             ast.Name(RECORD, ast.Load())], [])
            out.append(call)
        if isinstance(index, ast.Tuple):
            result = ast.Tuple(out, ast.Load())
        else:
            result = out[0]
        return ast.fix_missing_locations(ast.copy_location(result, index))

    def _is_checked_array(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id in self.arrays

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if self._is_checked_array(node.value) and not (isinstance(node.slice, ast.Tuple) and not node.slice.elts):
            node.slice = self._checked(node.value.id, node.slice, node)
        return node

    def _is_atomic(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and len(node.args) == 3 and ast.unparse(node.func) in self.atomics \
            and self._is_checked_array(node.args[0])

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if self._is_atomic(node) and not (isinstance(node.args[1], ast.Tuple) and not node.args[1].elts):
            node.args[1] = self._checked(node.args[0].id, node.args[1], node)
        return node

    # ------------------------------------------------------------------ divisors

    def _checked_divisor(self, divisor: ast.expr, lineno: int, op: ast.operator) -> ast.expr:
        site = self._site(lineno, "//" if isinstance(op, ast.FloorDiv) else "%", DIVISOR_AXIS)
        call = ast.Call(ast.Name(CHECK_DIVISOR, ast.Load()), [divisor, site, ast.Name(RECORD, ast.Load())], [])
        return ast.fix_missing_locations(ast.copy_location(call, divisor))

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, (ast.FloorDiv, ast.Mod)):
            node.right = self._checked_divisor(node.right, node.lineno, node.op)
        return node

    # ------------------------------------------------------------------ stores (finite mode)

    def _stored(self, stmt: ast.stmt) -> tuple[str, ast.expr] | None:
        """(array, index) of a store into a float array parameter, or None."""
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
        elif isinstance(stmt, ast.AugAssign):
            target = stmt.target
        elif isinstance(stmt, ast.Expr) and self._is_atomic(stmt.value):
            call = stmt.value
            return (call.args[0].id, call.args[1]) if call.args[0].id in self.floats else None
        else:
            return None
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                and target.value.id in self.floats:
            return target.value.id, target.slice
        return None

    def _finite_check(self, stmt: ast.stmt, array: str, index: ast.expr) -> list[ast.stmt]:
        """`stmt`, then: if the element it stored is not finite, record where (the first time)."""
        site = self._site(stmt.lineno, array, FINITE_AXIS)
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        element = ast.Subscript(ast.Name(array, ast.Load()), ast_clone.clone(index), ast.Load())
        test = ast.Call(ast.Name(BAD_VALUE, ast.Load()), [element, site, ast.Name(RECORD, ast.Load())], [])
        words = [(2, ast.Constant(len(parts)))] + [(3 + k, ast_clone.clone(p)) for k, p in enumerate(parts)]
        body = [ast.Assign([ast.Subscript(ast.Name(RECORD, ast.Load()), ast.Constant(w), ast.Store())], value)
                for w, value in words]
        check = ast.If(test, body, [])
        ast.copy_location(check, stmt)
        ast.fix_missing_locations(check)
        return [stmt, self.visit(check)]  # the element read back is index-checked too

    def _statement(self, stmt: ast.stmt):
        found = self._stored(stmt) if self.floats else None
        original = ast_clone.clone(found[1]) if found is not None else None
        self.generic_visit(stmt)
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.FloorDiv, ast.Mod)):
            stmt.value = self._checked_divisor(stmt.value, stmt.lineno, stmt.op)
        if found is None or len(original.elts if isinstance(original, ast.Tuple) else [original]) \
                > MAX_RECORDED_DIMS or not _side_effect_free(original):
            return stmt
        return self._finite_check(stmt, found[0], original)

    visit_Assign = visit_AugAssign = visit_Expr = _statement


def _side_effect_free(expr: ast.expr) -> bool:
    """Whether evaluating `expr` again (to read back the stored element) is harmless: names,
    numbers and arithmetic only (a random draw in an index would give another element)."""
    allowed = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.Load, ast.operator, ast.unaryop)
    return all(isinstance(n, allowed) for n in ast.walk(expr))

