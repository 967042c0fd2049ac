"""How CUDA threads run a task's loops: the thread index, the flat 1-D mapping, 2-D thread
blocks for multi-dimensional loops, and serial `range` loops as counted loops.

Every index handed to user code is computed from unsigned values and masked to 48 bits,
so LLVM knows it (and small offsets from it) is non-negative and drops numba's
negative-index wraparound; no thread divides in a multi-dimensional loop.
"""

from __future__ import annotations

import ast
import copy

from ..front import ast_clone
from ..front.interchange import PASS
from ..front.regions import Task
from ..lower.lowering import assign, binop, call, name_node

_MASK = "0xFFFFFFFFFFFF"  # indices are below 2**48 (launch_code.tile_shape checks the extents)


class ContinueToReturn(ast.NodeTransformer):
    """In a parallel body run by one thread, `continue` ends that thread's iteration."""

    def visit_For(self, node: ast.For) -> ast.AST:
        node.orelse = [self.visit(s) for s in node.orelse]
        return node

    visit_While = visit_For

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        return ast.copy_location(ast.Return(None), node)


class CountedLoops(ast.NodeTransformer):
    """`for j in range(a, b)` (a positive literal step, no `else`) as a counted while loop.

        _qg_jN = a
        while _qg_jN < b:
            j = _qg_jN
            _qg_jN += step      # before the body, so `continue` moves on
            body

    numba lowers `range` through an iterator whose state LLVM cannot see through: every
    array access in the loop then keeps a negative-index wraparound fix-up (3 extra integer
    instructions per access; 12 per pair in an all-pairs force loop). A plain counter
    from `a` is a clean induction variable: LLVM proves it non-negative and drops them.
    The stop is evaluated once, as `range` does."""

    def __init__(self, is_range) -> None:
        self.is_range = is_range
        self.count = 0

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        it = node.iter
        if node.orelse or not isinstance(node.target, ast.Name) or not isinstance(it, ast.Call) \
                or it.keywords or not 1 <= len(it.args) <= 3 or not self.is_range(it.func):
            return node
        step = it.args[2] if len(it.args) == 3 else ast.Constant(1)
        if not (isinstance(step, ast.Constant) and type(step.value) is int and step.value > 0):
            return node
        start = it.args[0] if len(it.args) > 1 else ast.Constant(0)
        stop = it.args[1] if len(it.args) > 1 else it.args[0]
        counter, end = f"_qg_j{self.count}", f"_qg_e{self.count}"
        self.count += 1
        at = node
        head = [assign(counter, call("_qg_i64", [start], at), at), assign(end, call("_qg_i64", [stop], at), at)]
        test = ast.copy_location(ast.Compare(name_node(counter, at), [ast.Lt()], [name_node(end, at)]), at)
        advance = ast.copy_location(ast.AugAssign(name_node(counter, at, True), ast.Add(),
                                                  ast.copy_location(ast.Constant(step.value), at)), at)
        body = [assign(node.target.id, name_node(counter, at), at), advance] + node.body
        return head + [ast.copy_location(ast.While(test, body, []), at)]


def thread_index(at: ast.AST) -> ast.expr:
    """The global thread index, computed unsigned and masked to 48 bits (it is below 2**41):
    the compiler then knows it and small offsets from it are non-negative, and indexing
    with them needs no negative-index wraparound."""
    return call("_qg_thread_x", [ast.copy_location(ast.Constant(int(_MASK, 16)), at)], at)


def known_nonnegative(index: ast.expr, at: ast.AST) -> ast.expr:
    """`index` masked to 48 bits as thread_index is: a loop counter the compiler cannot prove
    non-negative (a step not a literal) then indexes without numba's negative-index wraparound,
    for one `and` instead of three instructions per access. Indices are below 2**48."""
    return binop(index, ast.BitAnd(), ast.copy_location(ast.Constant(int(_MASK, 16)), at), at)


def as_list(node) -> list:
    return node if isinstance(node, list) else [node]


def flat_indices(task: Task, at: ast.AST) -> list[ast.stmt]:
    """Loop variables from the flat thread index `_qg_t`."""
    v = task.loop_vars
    t = name_node("_qg_t", at)

    def offset(k: int, index: ast.expr) -> ast.expr:
        # A literal start and unit step index with the (masked) thread index plus a literal:
        # the compiler then knows it is non-negative and drops numba's negative-index
        # wraparound (the difference between 60% and 80% of the copy bandwidth for a saxpy
        # on an H200).
        dim = task.dims[k]
        if dim.step is None or _is_literal(dim.step, 1):
            return _offset(task, k, index, at)
        return binop(name_node(f"_qg_s{k}", at), ast.Add(), index, at)

    if len(v) == 1:
        dim = task.dims[0]
        unit_step = dim.step is None or _is_literal(dim.step, 1)
        scaled = t if unit_step else binop(t, ast.Mult(), name_node("_qg_d0", at), at)
        return [assign(v[0], offset(0, scaled), at)]
    out: list[ast.stmt] = []
    rest = "_qg_t"
    for k in range(len(v) - 1, 0, -1):
        n = name_node(f"_qg_c{k}", at)
        out.append(assign(v[k], offset(k, binop(name_node(rest, at), ast.Mod(), n, at)), at))
        out.append(assign(f"_qg_r{k}", binop(name_node(rest, at), ast.FloorDiv(), n, at), at))
        rest = f"_qg_r{k}"
    out.append(assign(v[0], offset(0, name_node(rest, at)), at))
    return out


def tiled_loops(task: Task, body: list[ast.stmt], at: ast.AST, early_return: bool = True,
                narrow: bool = False) -> list[ast.stmt]:
    """A multi-dimensional loop on a grid of 2-D blocks (launch_code.tile_shape sizes it).

    x covers the last dimension (one thread per index), y the one before and z the first of
    three. Where the grid covers every index (y and z are limited to 65535 blocks; a 2-D
    loop's y blocks spread over the grid's y and z), each thread runs its index once behind
    an `if`; past that, y and z are grid-stride loops. A uniform test of the launch shape
    picks the form; `narrow` 2-D loops always fit and have no loops at all. The one-pass
    form keeps no loop-carried state: the sweep of the fluids example is 5 SASS
    instructions and 9 registers leaner than its loop (docs/benchmarks.md).
    With `early_return=False` (reductions, whose grid tile_shape caps at one wave and whose
    block combine needs every thread) only the grid-stride form is made. `narrow`: every
    count is below 2**31 whatever the arguments (lang.cuda.index_ranges), so the thread
    indices, bound checks and loop steps are uint32 (one compare each, as `int` gives in
    CUDA C++; nothing overflows: an index stays below its count plus a grid's stride, under
    2**32), and the loop variables their zero-extended int64 values."""
    if not early_return:
        return _strided_loops(task, body, at, False, narrow)
    spell = _NARROW if narrow else _WIDE
    ndim, y = len(task.dims), len(task.dims) - 2
    once = [ContinueToReturn().visit(s) for s in ast_clone.clone(body)]  # no loop to continue
    lines = [f"_qg_ty = {spell['one_pass_y'] if ndim == 2 else spell['first_y']}",
             f"if _qg_ty >= {spell['count'].format(y)}:",
             "    return"]
    if ndim == 3:  # the z count is the grid's (the test below)
        lines.append(f"_qg_tz = {spell['first_z']}")
    one_pass = _parse_at("\n".join(lines), at) + _indices(task, at, narrow) + once
    strided = _strided_loops(task, body, at, True, narrow)
    if ndim == 2 and narrow:  # fewer than 2**31 rows always fit 65535**2 blocks
        return strided[:2] + one_pass
    test = _parse_at(spell["strided_" + str(ndim)].format(*(spell["count"].format(k) for k in range(ndim))), at)[0]
    test.body = strided[2:] + [ast.copy_location(ast.Return(None), at)]
    return strided[:2] + [test] + one_pass


def _strided_loops(task: Task, body: list[ast.stmt], at: ast.AST, early_return: bool,
                   narrow: bool) -> list[ast.stmt]:
    """The grid-stride form of `tiled_loops`: the thread index in x, its bound check, then y
    and z loops that advance before the body, so a top-level `continue` moves on to the
    next index; the mask keeps LLVM from computing a trip count (a 64-bit division per
    thread, which a `range` loop costs) to unroll a loop that runs once. Without
    `early_return` the threads past the last x index skip the loops instead of returning."""
    ndim = len(task.dims)
    x, y = ndim - 1, ndim - 2
    spell = _NARROW if narrow else _WIDE
    lines = [f"_qg_tx = {spell['tx']}",
             f"if _qg_tx >= {spell['count'].format(x)}:",
             "    return"]
    past_end = ""
    if not early_return:  # threads past the last x index start their loops at the end
        lines = lines[:1]
        past_end = f" if _qg_tx < {spell['count'].format(x)} else {spell['count']}"
    indent = ""
    if ndim == 3:
        lines += [f"_qg_zz = {spell['first_z']}{past_end.format(0)}",
                  f"while _qg_zz < {spell['count'].format(0)}:",
                  f"    _qg_tz = {spell['index'].format('_qg_zz')}",
                  f"    _qg_zz = {spell['step'].format('_qg_zz', spell['stride_z'])}"]
        indent = "    "
    lines += [f"{indent}_qg_yy = {spell['first_y']}{past_end.format(y)}",
              f"{indent}while _qg_yy < {spell['count'].format(y)}:",
              f"{indent}    _qg_ty = {spell['index'].format('_qg_yy')}",
              f"{indent}    _qg_yy = {spell['step'].format('_qg_yy', spell['stride_y'])}"]
    stmts = _parse_at("\n".join(lines), at)
    inner = stmts[-1] if ndim == 2 else stmts[-1].body[-1]  # the y loop
    inner.body = inner.body + _indices(task, at, narrow) + body
    return stmts


def _indices(task: Task, at: ast.AST, narrow: bool) -> list[ast.stmt]:
    """The loop variables from `_qg_tx`, `_qg_ty` (and `_qg_tz`), as int64."""
    v, ndim = task.loop_vars, len(task.dims)
    x, y = ndim - 1, ndim - 2
    tx = name_node("_qg_tx", at) if not narrow else call("_qg_i64", [name_node("_qg_tx", at)], at)
    ty = name_node("_qg_ty", at) if not narrow else call("_qg_i64", [name_node("_qg_ty", at)], at)
    indices = [assign(v[x], _offset(task, x, tx, at), at), assign(v[y], _offset(task, y, ty, at), at)]
    if ndim == 3:
        tz = name_node("_qg_tz", at) if not narrow else call("_qg_i64", [name_node("_qg_tz", at)], at)
        indices.append(assign(v[0], _offset(task, 0, tz, at), at))
    return indices


_SREG = "_qg_u32(_qg_cuda.{}.{})".format
# how tiled_loops spells its thread indices, counts, steps, one-pass y index and the tests that
# choose the grid-stride form (the launch shape does not cover every index): int64 masked to
# 48 bits, or uint32
_WIDE = {"tx": f"_qg_thread_x({_MASK})", "count": "_qg_c{}",
         "first_y": f"_qg_i64({_SREG('blockIdx', 'y')} * {_SREG('blockDim', 'y')} + {_SREG('threadIdx', 'y')})",
         "first_z": f"_qg_i64({_SREG('blockIdx', 'z')})", "index": f"{{}} & {_MASK}",
         "step": f"({{}} + _qg_i64({{}})) & {_MASK}",
         "stride_y": f"{_SREG('gridDim', 'y')} * {_SREG('blockDim', 'y')}", "stride_z": _SREG("gridDim", "z"),
         "one_pass_y": f"(_qg_i64({_SREG('blockIdx', 'z')} * {_SREG('gridDim', 'y')} + {_SREG('blockIdx', 'y')})"
                       f" * _qg_i64({_SREG('blockDim', 'y')}) + _qg_i64({_SREG('threadIdx', 'y')})) & {_MASK}",
         "strided_2": f"if _qg_i64({_SREG('gridDim', 'y')} * {_SREG('gridDim', 'z')})"
                      f" * _qg_i64({_SREG('blockDim', 'y')}) < {{0}}:\n    pass",
         "strided_3": f"if _qg_i64({_SREG('gridDim', 'z')}) != {{0}}"
                      f" or _qg_i64({_SREG('gridDim', 'y')} * {_SREG('blockDim', 'y')}) < {{1}}:\n    pass"}
_NARROW = {"tx": f"_qg_u32({_SREG('blockIdx', 'x')} * {_SREG('blockDim', 'x')} + {_SREG('threadIdx', 'x')})",
           "count": "_qg_u32(_qg_c{})",
           "first_y": f"_qg_u32({_SREG('blockIdx', 'y')} * {_SREG('blockDim', 'y')} + {_SREG('threadIdx', 'y')})",
           "first_z": _SREG("blockIdx", "z"), "index": "_qg_i64({})", "step": "_qg_u32({} + {})",
           "stride_y": f"_qg_u32({_SREG('gridDim', 'y')} * {_SREG('blockDim', 'y')})",
           "stride_z": _SREG("gridDim", "z"),
           "one_pass_y": f"_qg_u32(({_SREG('blockIdx', 'z')} * {_SREG('gridDim', 'y')} + {_SREG('blockIdx', 'y')})"
                         f" * {_SREG('blockDim', 'y')} + {_SREG('threadIdx', 'y')})",
           "strided_3": f"if {_SREG('gridDim', 'z')} != {{0}}"
                        f" or _qg_u32({_SREG('gridDim', 'y')} * {_SREG('blockDim', 'y')}) < {{1}}:\n    pass"}


def _offset(task: Task, k: int, index: ast.expr, at: ast.AST) -> ast.expr:
    """start + index. A literal start stays a literal: with the index below 2**48, LLVM then
    proves `i - 1`, `i + 1` non-negative and drops numba's negative-index wraparound."""
    start = task.dims[k].start
    if _is_literal(start, 0):
        return index
    if isinstance(start, ast.Constant) and type(start.value) is int and start.value > 0:
        return binop(ast.copy_location(ast.Constant(start.value), at), ast.Add(), index, at)
    return binop(name_node(f"_qg_s{k}", at), ast.Add(), index, at)


def _parse_at(source: str, at: ast.AST) -> list[ast.stmt]:
    stmts = ast.parse(source).body
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.expr, ast.stmt)):
                ast.copy_location(node, at)
    return stmts


def _is_literal(expr: ast.expr | None, value: int) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) is int and expr.value == value


CANCEL = "_qg_cancel"  # an interchanged loop's task's parameter: runtime.cancel.CancelWord, an int64[3]
CANCEL_EVERY = 1024  # passes between two reads of the cancel word (a power of 2)


def cancellable_passes(body: list[ast.stmt], at: ast.AST) -> list[ast.stmt]:
    """An interchanged loop's task body (lang.front.interchange) with its pass loop ending once the
    cancel word is set: each thread reads it every CANCEL_EVERY passes (an atomic, so the read is
    neither cached nor hoisted) and, set, records the most passes a thread ran and stops its passes."""
    check = _parse_at(f"if ({PASS} & {CANCEL_EVERY - 1}) == {CANCEL_EVERY - 1}:\n"
                      f"    if _qg_cuda.atomic.add({CANCEL}, 0, 0) != 0:\n"
                      f"        _qg_cuda.atomic.max({CANCEL}, 2, {PASS} + 1)\n"
                      "        break", at)
    out = []
    for stmt in body:
        if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and stmt.target.id == PASS:
            stmt = copy.copy(stmt)
            stmt.body = check + stmt.body
        out.append(stmt)
    return out
