"""CUDA code generation: one kernel function per task and signature.

Parallel tasks get one thread per iteration, with the launch bounds passed in as leading
by-value parameters; serial tasks run in one thread. A multi-dimensional loop runs on 2-D
thread blocks (`tiled`, see lang.cuda.loops): x over the last dimension, y over the one
before, z over the first of three, so neighbouring iterations share cache lines both ways.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..front.interchange import InterchangedTask
from ..front.parse import KernelSource, Task
from ..front.temporal_tiling import TiledTask
from ..lower.debug_checks import RECORD, DebugPlan
from ..lower.lowering import (
    CUDA_ATOMICS,
    CallRewriter,
    Symbols,
    ZeroDIndex,
    assign,
    atomic_array,
    dotted,
    fix_lines,
    function_def,
    lower_statements,
    name_node,
    task_locals,
    task_name,
)
from ..lower.updates import Reduction, UpdateRewriter
from ..options import DEFAULT_OPTIONS, KernelOptions
from ..types.precision import weak_typed
from ..types.weak_types import param_type
from . import lanes, reductions, tiling
from .addressing import Addressing32
from .index_ranges import IndexRanges, loop_floors
from .loops import (
    CANCEL,
    ContinueToReturn,
    CountedLoops,
    as_list,
    cancellable_passes,
    flat_indices,
    thread_index,
    tiled_loops,
)


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
    temporal: tuple | None = None  # a TiledTask's (passes, tile, halo) (lang.cuda.tiling); None: not tiled
    cancel: bool = False  # an interchanged loop's task: it takes the cancel word after the record (CANCEL)
    lanes: bool = False  # its inner loop runs on lanes (lang.cuda.lanes): its grid is lanes_expr(count) threads a count


def read_from_memory(fdef: ast.FunctionDef, names: set[str]) -> ast.FunctionDef:
    """Numbers the kernel reads from device memory (args.kinds.MemoryScalarKind): each such parameter
    becomes a one-element array `_qg_mem_<name>`, read into the number's own name as the kernel
    starts, so the body (typed for the number, weak or not) is unchanged."""
    if not names:
        return fdef
    at = fdef.body[0]
    loads = []
    for arg in fdef.args.args:
        if arg.arg in names:
            name = arg.arg
            arg.arg = f"_qg_mem_{name}"
            loads.append(assign(name, ast.copy_location(
                ast.Subscript(name_node(arg.arg, at), ast.Constant(0), ast.Load()), at), at))
    fdef.body = loads + fdef.body
    return fix_lines(fdef)


def cuda_bound_params(task: Task) -> tuple[str, ...]:
    if not task.parallel:
        return ()
    ndim = len(task.dims)
    if ndim == 1:
        return ("_qg_s0", "_qg_d0", "_qg_n")
    starts = tuple(f"_qg_s{k}" for k in range(ndim))
    counts = tuple(f"_qg_c{k}" for k in range(ndim))
    return starts + counts + ("_qg_n",)  # as lang.lower.bounds packs them


def _one_element_targets(body: list[ast.stmt], zero_d: frozenset[str]) -> frozenset[str]:
    """0-d array parameters the lowered body updates with an atomic `atomic.<op>(x, (), v)`
    (or `atomic.<op>(x.view(t), (), v)`, a float min/max reduction's combine)."""
    found = set()
    paths = set(CUDA_ATOMICS.values())
    for stmt in body:
        for node in ast.walk(stmt):
            if not (isinstance(node, ast.Call) and len(node.args) == 3 and ast.unparse(node.func) in paths):
                continue
            array = atomic_array(node.args[0])
            if array is not None and array.id in zero_d and isinstance(node.args[1], ast.Tuple) \
                    and not node.args[1].elts:
                found.add(array.id)
    return frozenset(found)


class FloatSubAsAdd(ast.NodeTransformer):
    """`atomic.sub(x, i, v)` on a float array -> `atomic.add(x, i, -(v))`: numba-cuda's float
    atomic sub is a compare-and-swap loop, its add one instruction (`atom/red.add.f32/f64`).
    `a - v` and `a + (-v)` are the same IEEE operation: results and old values are unchanged."""

    def __init__(self, float_arrays: set[str]) -> None:
        self.float_arrays = float_arrays
        self.sub, self.add = CUDA_ATOMICS["atomic_sub"], CUDA_ATOMICS["atomic_add"]

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if len(node.args) == 3 and ast.unparse(node.func) == self.sub:
            array = atomic_array(node.args[0])
            if array is not None and array.id in self.float_arrays:
                node.func = dotted(self.add, node.func)
                node.args[2] = ast.copy_location(ast.UnaryOp(ast.USub(), node.args[2]), node.args[2])
        return node


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


def cuda_task(src: KernelSource, task: Task, param_order: list[str], symbols: Symbols, kinds: list,
              options: KernelOptions = DEFAULT_OPTIONS, debug: DebugPlan | None = None) -> CudaTaskCode:
    """The kernel function of one task, taking `param_order` after the bound parameters.

    A parallel task runs one iteration per thread; one with reductions (see lang.lower.updates)
    runs a grid-stride loop and combines its partials per block (lang.cuda.reductions).
    `kinds` are the argument kinds of `src`'s parameters (array dtypes type reduction partials;
    Python numbers are typed weakly against them and `options.default_float`, lang.types.precision).
    `options.deterministic` combines reductions in a fixed order through scratch arrays, extra
    parameters placed after the array parameters of `param_order`.
    numba-cuda's atomics take no 0-d array, so a 0-d parameter the task updates atomically
    is passed to it as a 1-element array (`CudaTaskCode.one_element`): its `x[()]` and
    `atomic.<op>(x, (), v)` become `x[0]` and `atomic.<op>(x, 0, v)`. C-contiguous 2-D and
    3-D arrays below 2^31 elements are indexed with 32-bit offsets (lang.cuda.addressing).
    `debug` (the specialisation's plan for `options.debug`) adds debug mode's checks
    (lang.lower.debug_checks) and the record parameter after the scratch arrays.
    """
    if isinstance(task, TiledTask):  # a temporally tiled loop's task (lang.cuda.tiling)
        bounds = cuda_bound_params(task)
        split = sum(1 for name in param_order if kinds[src.param_names.index(name)].is_array)
        record = [RECORD] if debug is not None else []
        params = list(bounds) + list(param_order[:split]) + record + list(param_order[split:])
        fdef, plan = tiling.tiled_function(src, task, params, symbols, kinds, options)
        fdef = read_from_memory(fdef, {n for n, t in zip(src.param_names, kinds)
                                       if getattr(t, "in_memory", False) and n in params})
        return CudaTaskCode(task, fdef, bounds, tuple(param_order), tiled=True, temporal=plan)
    kind_of = dict(zip(src.param_names, kinds))
    zero_d = frozenset(name for name, t in kind_of.items() if t.ndim == 0)
    dtypes = {name: t.dtype for name, t in kind_of.items() if t.is_array}
    addressed = {name: t.ndim for name, t in kind_of.items()
                 if t.is_array and t.ndim in (1, 2, 3) and t.contiguous and not t.large and name not in task.stored}
    # index expressions of these arrays' shapes and the loop variables have ranges known here
    ranges = IndexRanges.of_task(task, {name: t.ndim for name, t in kind_of.items()
                                        if t.is_array and not t.large and name not in task.stored})
    precision = ({name: param_type(t) for name, t in kind_of.items()}, options.default_float)
    n_arrays = sum(1 for name in param_order if kind_of[name].is_array)
    deterministic = options.deterministic
    at = task.body[0]
    local_names = task_locals(src, task)
    statements = task.body
    statements = weak_typed(src, task.body, precision[0], task.loop_vars, local_names, precision[1],
                            funcs=symbols.typing_funcs(precision[1]))
    updates = None
    if task.parallel:
        updates = UpdateRewriter(task, set(src.param_names), src.resolve, src.error, symbols.atomic,
                                 reductions.partial_update)
    body = lower_statements(src, statements, local_names, symbols, updates)
    cancel = isinstance(task, InterchangedTask)
    if cancel:  # its threads' passes end once kernel.cancel() sets the word
        body = cancellable_passes(body, at)
    ranges.add_locals(body, set(kind_of) | set(task.loop_vars))
    found = list(updates.reductions.values()) if updates is not None else []
    bounds = cuda_bound_params(task)
    scratch: tuple[str, ...] = ()
    # 2-D blocks for multi-dimensional loops, except deterministic reductions (their per-block slots need a 1-D grid)
    tiled = task.parallel and len(task.dims) > 1 and not (found and deterministic)
    if task.parallel and found:
        targets = _reduction_kinds(src, found, dtypes)
        rewriter = CallRewriter(src, local_names, symbols)
        init = [rewriter.visit(s) for s in reductions.initial_partials(found, at)]
        if deterministic:
            combine = [rewriter.visit(s) for s in reductions.deterministic_combine(found, at, targets)]
            scratch = tuple(reductions.scratch_params(found))
        else:
            combine = [rewriter.visit(s) for s in reductions.block_combine(found, at, symbols.atomic, targets)]
        if tiled:  # the launch caps the grid at one wave
            body = init + tiled_loops(task, body, at, early_return=False, narrow=ranges.counts_fit(task)) + combine
        else:
            loop = reductions.grid_stride_loop(flat_indices(task, at) + body, at)
            body = init + [assign("_qg_t0", thread_index(at), at)] + loop + combine
    elif tiled:
        body = tiled_loops(task, body, at, narrow=ranges.counts_fit(task))
    def is_range(func: ast.expr) -> bool:
        return isinstance(func, ast.Name) and func.id not in local_names and src.resolve(func) is range

    on_lanes = None
    if task.parallel and not found and not tiled:
        body = [ContinueToReturn().visit(s) for s in body]
        guard = ast.copy_location(ast.If(
            ast.copy_location(ast.Compare(name_node("_qg_t", at), [ast.GtE()], [name_node("_qg_n", at)]), at),
            [ast.copy_location(ast.Return(None), at)], []), at)
        if debug is None and not cancel and options.lanes:
            on_lanes = lanes.split_inner_loop(body, at, is_range, set(dtypes))
        if on_lanes is not None:  # its one inner loop on several threads while the parallel loop is small
            body = lanes.lane_prologue(at) + [guard] + flat_indices(task, at) + on_lanes
        else:
            body = [assign("_qg_t", thread_index(at), at), guard] + flat_indices(task, at) + body
    counted = CountedLoops(is_range)
    body = [s for stmt in body for s in as_list(counted.visit(stmt))]
    floats = FloatSubAsAdd({name for name, dtype in dtypes.items() if dtype.kind == "f"})
    body = [floats.visit(s) for s in body]
    if debug is not None:
        body = debug.apply(body, CUDA_ATOMICS.values())
    one_element = _one_element_targets(body, zero_d)
    body = [ZeroDIndex(one_element, frozenset(CUDA_ATOMICS.values()), rename=False).visit(s) for s in body]
    if addressed:
        rewriter = Addressing32(addressed, loop_floors(task) if task.parallel else {}, ranges)
        body = [rewriter.visit(s) for s in body]
    split = n_arrays
    record = ([RECORD] if debug is not None else []) + ([CANCEL] if cancel else [])
    params = list(bounds) + list(param_order[:split]) + list(scratch) + record + list(param_order[split:])
    fdef = function_def(task_name(task), params, body, task.lineno)
    fdef = read_from_memory(fdef, {n for n in param_order if getattr(kind_of[n], "in_memory", False)})
    return CudaTaskCode(task, fdef, bounds, tuple(param_order), one_element, tuple(found), scratch, tiled,
                        cancel=cancel, lanes=on_lanes is not None)


