"""CUDA code generation: one kernel function per task and signature.

Parallel tasks get one thread per iteration, with the launch bounds passed in as leading
by-value parameters; serial tasks run in one thread. A multi-dimensional loop runs on 2-D
thread blocks (`tiled`): x over the last dimension, y over the one before, z over the rest,
so neighbouring iterations share cache lines in both directions and no thread divides.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from . import cuda_reductions as reductions
from .frontend import KernelSource, Task
from .lowering import (
    CUDA_ATOMICS,
    CallRewriter,
    Symbols,
    ZeroDIndex,
    assign,
    binop,
    call,
    function_def,
    lower_statements,
    name_node,
    task_locals,
    task_name,
)
from .precision import weak_typed
from .updates import Reduction, UpdateRewriter


@dataclass(frozen=True)
class CudaTaskCode:
    """One task as a CUDA kernel function: its code and by-value parameter order."""

    task: Task
    function: ast.FunctionDef
    bound_params: tuple[str, ...]  # leading int64 launch-bound parameters
    params: tuple[str, ...]  # kernel parameters, in the kernel's argument order
    one_element: frozenset[str] = frozenset()  # 0-d array parameters passed as shape (1,)
    reductions: tuple[Reduction, ...] = ()  # when non-empty: a grid-stride loop, launched capped
    scratch: tuple[str, ...] = ()  # deterministic mode's scratch arrays (after the array parameters)
    tiled: bool = False  # runs on 2-D blocks (tiled_loops); its launch shape comes from launch_code.tile_shape


class _ContinueToReturn(ast.NodeTransformer):
    """In a parallel body run by one thread, `continue` ends that thread's iteration."""

    def visit_For(self, node: ast.For) -> ast.AST:
        node.orelse = [self.visit(s) for s in node.orelse]
        return node

    visit_While = visit_For

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        return ast.copy_location(ast.Return(None), node)


def cuda_bound_params(task: Task) -> tuple[str, ...]:
    if not task.parallel:
        return ()
    ndim = len(task.dims)
    if ndim == 1:
        return ("_qg_s0", "_qg_d0", "_qg_n")
    starts = tuple(f"_qg_s{k}" for k in range(ndim))
    counts = tuple(f"_qg_c{k}" for k in range(ndim))
    return starts + counts + ("_qg_n",)  # as lang.bounds packs them


def _one_element_targets(body: list[ast.stmt], zero_d: frozenset[str]) -> frozenset[str]:
    """0-d array parameters the lowered body updates with an atomic `atomic.<op>(x, (), v)`."""
    found = set()
    paths = set(CUDA_ATOMICS.values())
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and len(node.args) == 3 and isinstance(node.args[0], ast.Name) \
                    and node.args[0].id in zero_d and isinstance(node.args[1], ast.Tuple) \
                    and not node.args[1].elts and ast.unparse(node.func) in paths:
                found.add(node.args[0].id)
    return frozenset(found)


def _reduction_kinds(src: KernelSource, found: list[Reduction], dtypes: dict) -> dict:
    """(kind, itemsize) of each reduction target; the GPU has atomics for 32- and 64-bit only."""
    kinds = {}
    for r in found:
        dtype = dtypes.get(r.target)
        if dtype is None:
            continue
        if dtype.kind not in "iuf" or dtype.itemsize < 4:
            raise src.error(f"a reduction into '{r.target}' ({dtype.name}) cannot run on CUDA: the GPU has atomics "
                            "for 32- and 64-bit integers and floats only; reduce into an int32, int64, float32 "
                            "or float64 array", r.lineno)
        kinds[r.target] = (dtype.kind, dtype.itemsize)
    return kinds


def _thread_index(at: ast.AST) -> ast.expr:
    """The global thread index, computed unsigned and masked to 48 bits (it is below 2**41):
    the compiler then knows it and small offsets from it are non-negative, and indexing
    with them needs no negative-index wraparound."""
    def unsigned(attr: str) -> ast.expr:
        return call("_qg_u64", [call("_qg_u32", [_attr3("_qg_cuda", attr, "x", at)], at)], at)

    tid = call("_qg_i64", [binop(binop(unsigned("blockIdx"), ast.Mult(), unsigned("blockDim"), at),
                                 ast.Add(), unsigned("threadIdx"), at)], at)
    return binop(tid, ast.BitAnd(), ast.copy_location(ast.Constant(int(_MASK, 16)), at), at)


def cuda_task(src: KernelSource, task: Task, param_order: list[str], symbols: Symbols,
              zero_d: frozenset[str] = frozenset(), dtypes: dict | None = None,
              deterministic: bool = False, n_arrays: int | None = None,
              precision: tuple[dict, str] | None = None) -> CudaTaskCode:
    """The kernel function of one task, taking `param_order` after the bound parameters.

    A parallel task runs one iteration per thread; one with reductions (see lang.updates)
    runs a grid-stride loop and combines its partials per block (lang.cuda_reductions).
    `dtypes` maps array parameters to their NumPy dtypes (reduction partials are typed).
    `deterministic` combines reductions in a fixed order through scratch arrays, extra
    parameters placed after the first `n_arrays` (array) parameters of `param_order`.
    numba-cuda's atomics take no 0-d array, so a 0-d parameter the task updates atomically
    is passed to it as a 1-element array (`CudaTaskCode.one_element`): its `x[()]` and
    `atomic.<op>(x, (), v)` become `x[0]` and `atomic.<op>(x, 0, v)`. `precision`
    (parameter types, default float) types Python numbers weakly (lang.precision).
    """
    at = task.body[0]
    local_names = task_locals(src, task)
    statements = task.body
    if precision is not None:
        statements = weak_typed(src, task.body, precision[0], task.loop_vars, local_names, precision[1])
    updates = None
    if task.parallel:
        updates = UpdateRewriter(task, set(src.param_names), src.resolve, src.error, symbols.atomic,
                                 reductions.partial_update)
    body = lower_statements(src, statements, local_names, symbols, updates)
    found = list(updates.reductions.values()) if updates is not None else []
    bounds = cuda_bound_params(task)
    scratch: tuple[str, ...] = ()
    if task.parallel and found:
        kinds = _reduction_kinds(src, found, dtypes or {})
        rewriter = CallRewriter(src, local_names, symbols)
        init = [rewriter.visit(s) for s in reductions.initial_partials(found, at)]
        if deterministic:
            combine = [rewriter.visit(s) for s in reductions.deterministic_combine(found, at, kinds)]
            scratch = tuple(reductions.scratch_params(found))
        else:
            combine = [rewriter.visit(s) for s in reductions.block_combine(found, at, symbols.atomic, kinds)]
        if len(task.dims) > 1 and not deterministic:  # 2-D blocks, the grid capped by the launch
            body = init + tiled_loops(task, body, at, early_return=False) + combine
        else:
            loop = reductions.grid_stride_loop(_cuda_indices(task, at) + body, at)
            body = init + [assign("_qg_t0", _thread_index(at), at)] + loop + combine
    elif task.parallel and len(task.dims) > 1:
        body = tiled_loops(task, body, at)
    elif task.parallel:
        body = [_ContinueToReturn().visit(s) for s in body]
        guard = ast.copy_location(ast.If(
            ast.copy_location(ast.Compare(name_node("_qg_t", at), [ast.GtE()], [name_node("_qg_n", at)]), at),
            [ast.copy_location(ast.Return(None), at)], []), at)
        body = [assign("_qg_t", _thread_index(at), at), guard] + _cuda_indices(task, at) + body
    one_element = _one_element_targets(body, zero_d)
    body = [ZeroDIndex(one_element, frozenset(CUDA_ATOMICS.values()), rename=False).visit(s) for s in body]
    split = len(param_order) if n_arrays is None else n_arrays
    params = list(bounds) + list(param_order[:split]) + list(scratch) + list(param_order[split:])
    fdef = function_def(task_name(task), params, body, task.lineno)
    tiled = task.parallel and len(task.dims) > 1 and not (found and deterministic)
    return CudaTaskCode(task, fdef, bounds, tuple(param_order), one_element, tuple(found), scratch, tiled)


def _attr3(base: str, a: str, b: str, at: ast.AST) -> ast.expr:
    inner = ast.copy_location(ast.Attribute(name_node(base, at), a, ast.Load()), at)
    return ast.copy_location(ast.Attribute(inner, b, ast.Load()), at)


def _cuda_indices(task: Task, at: ast.AST) -> list[ast.stmt]:
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


def tiled_loops(task: Task, body: list[ast.stmt], at: ast.AST, early_return: bool = True) -> list[ast.stmt]:
    """A multi-dimensional loop on a grid of 2-D blocks (launch_code.tile_shape sizes it).

    x covers the last dimension (one thread per index), y the one before and z the first
    of three, y and z as grid-stride loops (grids are limited to 65535 in y and z) that
    run once in the common case. The loops advance before the body, so a top-level `continue` moves
    on to the next index; the mask keeps LLVM from computing a trip count (a 64-bit
    division per thread, which a `range` loop costs) to unroll a loop that runs once.
    Every index is computed from unsigned values (no negative-index wraparound follows).
    With `early_return=False` (reductions, whose block combine needs every thread) the
    threads past the last x index skip the loops instead of returning."""
    v, ndim = task.loop_vars, len(task.dims)
    x, y = ndim - 1, ndim - 2
    u32 = "_qg_u32(_qg_cuda.{}.{})".format
    lines = [f"_qg_tx = _qg_i64(_qg_u64({u32('blockIdx', 'x')}) * _qg_u64({u32('blockDim', 'x')}) + "
             f"_qg_u64({u32('threadIdx', 'x')})) & {_MASK}",
             f"if _qg_tx >= _qg_c{x}:",
             "    return"]
    past_end = ""
    if not early_return:  # threads past the last x index start their loops at the end
        lines = lines[:1]
        past_end = f" if _qg_tx < _qg_c{x} else _qg_c{{}}"
    indent = ""
    if ndim == 3:
        lines += [f"_qg_zz = _qg_i64({u32('blockIdx', 'z')}){past_end.format(0)}",
                  "while _qg_zz < _qg_c0:",
                  f"    _qg_tz = _qg_zz & {_MASK}",
                  f"    _qg_zz = (_qg_zz + _qg_i64({u32('gridDim', 'z')})) & {_MASK}"]
        indent = "    "
    first = f"_qg_i64({u32('blockIdx', 'y')} * {u32('blockDim', 'y')} + {u32('threadIdx', 'y')})"
    lines += [f"{indent}_qg_yy = {first}{past_end.format(y)}",
              f"{indent}while _qg_yy < _qg_c{y}:",
              f"{indent}    _qg_ty = _qg_yy & {_MASK}",
              f"{indent}    _qg_yy = (_qg_yy + _qg_i64({u32('gridDim', 'y')} * {u32('blockDim', 'y')})) & {_MASK}"]
    stmts = _parse_at("\n".join(lines), at)
    inner = stmts[-1] if ndim == 2 else stmts[-1].body[-1]  # the y loop
    indices = [assign(v[x], _offset(task, x, name_node("_qg_tx", at), at), at),
               assign(v[y], _offset(task, y, name_node("_qg_ty", at), at), at)]
    if ndim == 3:
        indices.append(assign(v[0], _offset(task, 0, name_node("_qg_tz", at), at), at))
    inner.body = inner.body + indices + body
    return stmts


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


_MASK = "0xFFFFFFFFFFFF"  # indices are below 2**48 (launch_code.tile_shape checks the extents)


def _is_literal(expr: ast.expr | None, value: int) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) is int and expr.value == value
