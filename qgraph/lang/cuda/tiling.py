"""CUDA code of a temporally tiled task (lang.front.temporal_tiling): S passes of a stencil loop
per launch, each block on its tile and a halo in shared memory, a thread per cell of that region.

    set up     each thread's region coordinates, loop variables (global coordinates), depth (its
               distance from the region's edge, -1 outside the iteration space) and the flat
               shared offsets of the subscripts the parts read, once
    stage      its cell of each carried array: those live on entry whole, those first written
               outside the iteration space only (inside it the first writer's values come first)
    passes     S - 1 passes of every part, then the parts before the last once more, unrolled; part k
               of pass q runs where depth >= q * R + r0 + ... + rk (R: the parts' read radii
               summed), its carried reads and stores going to shared memory; a barrier after each
    write back its cell of the arrays the parts before the last write, where depth >= the halo

Each cell runs the part's lowered statements as the untiled task does (the same operations in the
same order: the same bits); only the subscripts of staged arrays change, to shared memory.
"""

from __future__ import annotations

import ast

from ..front import ast_clone
from ..front.names import collect_names
from ..front.temporal_tiling import TiledTask
from ..lower.lowering import Symbols, function_def, lower_statements, task_locals, task_name
from ..lower.updates import UpdateRewriter
from ..options import KernelOptions
from ..types.precision import weak_typed
from ..types.weak_types import param_type
from . import reductions
from .loops import CountedLoops, as_list

# Region extents per loop dimension count (x, the last dimension, over the contiguous axis): a tiled
# task's block is its region, one thread per cell for the whole launch; its tile is the region less
# the halo H each side. The passes per launch tried from the first, at most 48 KB of static shared
# memory per block (compiler.cuda_program launches the block so where the kernel allows its threads).
# `benchmarks/unroll_loops.py --quick --fluids` on an H100 (driver for CUDA 13.0), side by side, the
# fluids pressure solve (100 sweeps of 256x128 float32, 32x32 blocks): hand-written graph 94.8 us,
# untiled straight line 105.9, tiled S=2 86.2, S=3 63.5, S=4 52.3, S=5 54.6 (S=2 on 16x64 blocks 84.4);
# 2048x2048, tiled although its tiles exceed a wave: S=2/3/4 2232/2057/2275 us against 2117 untiled,
# 2068 hand-written (graphs.unroll.MAX_TILED_WAVES). A tiled launch costs about 2.0 us + 0.14 us a
# sweep (its nodes' time less the untiled nodes' ~1.06 us each); with a block-stride loop over the
# region's cells per thread in 64-bit arithmetic it was 1.8 us + 1.2 us a sweep.
REGIONS = {1: (1024,), 2: (32, 32)}
PASSES = (4, 3, 2)
SHARED_BYTES = 48 * 1024
CONTIGUOUS_DTYPES = "iuf"  # element kinds a tile stages (no vectors, structs or bools)


def halo(task: TiledTask, passes: int) -> int:
    """The margin a tile needs: what S - 1 passes and the parts but the last read beyond it."""
    return (passes - 1) * sum(task.radii) + sum(task.radii[:-1])


def region_of(plan: tuple) -> tuple[int, ...]:
    """A plan's region (its block's extents): the tile and its halo each side."""
    return tuple(t + 2 * plan[2] for t in plan[1])


def tile_plan(task: TiledTask, kind_of: dict, option) -> tuple[int, tuple[int, ...], int, tuple[str, ...]] | None:
    """(passes per launch S, tile extents, halo, the read-only arrays staged too) for these argument
    kinds, or None where the task cannot be tiled: a carried array not a plain numeric array of the
    loop's rank, or no S whose halo leaves a tile in the region and whose region fits the shared
    memory. The read-only arrays read near their element are staged where they fit beside the
    carried ones (their reads then wait on no global load)."""
    ndim = len(task.dims)

    def stageable(kind) -> bool:
        return kind.is_array and kind.ndim == ndim and not kind.large and kind.dtype.kind in CONTIGUOUS_DTYPES

    carried = [kind_of[name] for name in task.arrays if name in task.written]
    if not all(stageable(k) for k in carried):
        return None
    read_only = tuple(name for name in task.read_only if stageable(kind_of[name]))
    region = REGIONS[ndim]
    cells = 1
    for r in region:
        cells *= r
    for passes in (option,) if option is not True else PASSES:
        h = halo(task, passes)
        if min(region) <= 2 * h:
            continue
        for extra in (read_only, ()):
            arrays = carried + [kind_of[name] for name in extra]
            if cells * sum(k.dtype.itemsize for k in arrays) <= SHARED_BYTES:
                return passes, tuple(r - 2 * h for r in region), h, extra
    return None


def tiled_body(src, task: TiledTask, symbols: Symbols, kinds: list, options: KernelOptions):
    """(the statements of the tiled kernel, its plan (S, tile, halo, staged read-only arrays)), or
    ([return], None). Each thread owns one region cell: its coordinates, in-space test, depth in
    the region and shared offsets are computed once; part k of pass q is then `if depth >= margin:`
    its statements, then a barrier."""
    kind_of = dict(zip(src.param_names, kinds))
    plan = tile_plan(task, kind_of, options.temporal_tiling) if options.debug is None else None
    at = task.body[0]
    if plan is None:
        return [ast.copy_location(ast.Return(None), at)], None
    passes, tile, h, read_only = plan
    region = region_of(plan)
    carried = [name for name in task.arrays if name in task.written]
    shared = carried + list(read_only)
    ndim = len(task.dims)
    stored = set().union(*(collect_names(p.body).stored for p in task.parts))
    offsets = _SharedOffsets(set(shared), task.loop_vars, region, stored)
    parts = [offsets.lowered(_lowered(src, part, symbols, kind_of, options)) for part in task.parts]
    axes = ("x",) if ndim == 1 else ("y", "x")
    ends = ["_qg_n"] if ndim == 1 else [f"_qg_c{d}" for d in range(ndim)]
    cells = 1
    for r in region:
        cells *= r
    lines = [f"_qg_sh_{a} = _qg_cuda.shared.array(({cells},), _qg_dt_{a})" for a in shared]
    for d, (axis, v) in enumerate(zip(axes, task.loop_vars)):
        lines += [
            f"_qg_r{d} = _qg_i32(_qg_cuda.threadIdx.{axis})",
            f"_qg_o{d} = _qg_s{d} + _qg_i64(_qg_cuda.blockIdx.{axis}) * {tile[d]} - {h}",
            f"{v} = _qg_o{d} + _qg_r{d}",
        ]
    flat = "_qg_r0" if ndim == 1 else f"_qg_r0 * {region[1]} + _qg_r1"
    lines.append(f"_qg_b = _qg_u32({flat})")
    inside = " and ".join(f"{v} >= _qg_s{d} and {v} < _qg_s{d} + {ends[d]}" for d, v in enumerate(task.loop_vars))
    lines.append("_qg_depth = _qg_i32(-1)")  # the cell's distance from the region's edge, -1 outside the space
    lines.append(f"if {inside}:")
    lines.append("    _qg_depth = _qg_r0")
    for d in range(ndim):
        for e in ([f"_qg_r{d}"] if d else []) + [f"_qg_i32({region[d] - 1} - _qg_r{d})"]:
            lines.append(f"    _qg_depth = _qg_min(_qg_depth, {e})")

    def in_array(a: str) -> str:
        return " and ".join(f"{v} >= 0 and {v} < {a}.shape[{d}]" for d, v in enumerate(task.loop_vars))

    glob = ", ".join(task.loop_vars)
    for a in [*task.staged, *read_only]:
        lines.append(f"if {in_array(a)}:\n    _qg_sh_{a}[_qg_b] = {a}[{glob}]")
    for a in task.rewritten:
        lines.append(f"if _qg_depth < 0 and {in_array(a)}:\n    _qg_sh_{a}[_qg_b] = {a}[{glob}]")
    lines.append("_qg_offsets")
    lines.append("_qg_cuda.syncthreads()")
    total, count = sum(task.radii), len(task.parts)
    for q in range(passes):
        done = q * total
        for k, radius in enumerate(task.radii[: count if q < passes - 1 else count - 1]):
            done += radius
            lines.append(f"if _qg_depth >= {done}:\n    _qg_part_{k}")
            if not (q == passes - 1 and k == count - 2):  # the write back reads the thread's own cells
                lines.append("_qg_cuda.syncthreads()")
    for a in task.written_back:
        lines.append(f"if _qg_depth >= {h}:\n    {a}[{glob}] = _qg_sh_{a}[_qg_b]")
    body = reductions.parse_statements("\n".join(lines), at)
    body = [s for stmt in body for s in as_list(_Splice(parts, offsets.definitions(at)).visit(stmt))]
    return [ast.fix_missing_locations(s) for s in body], plan


def _lowered(src, part, symbols: Symbols, kind_of: dict, options: KernelOptions) -> list[ast.stmt]:
    """A part's statements lowered as lang.cuda.codegen.cuda_task lowers a task's (weak typing,
    builtins and funcs, element updates, counted loops)."""
    precision = {name: param_type(t) for name, t in kind_of.items()}
    local_names = task_locals(src, part)
    statements = weak_typed(
        src,
        part.body,
        precision,
        part.loop_vars,
        local_names,
        options.default_float,
        funcs=symbols.typing_funcs(options.default_float),
    )
    updates = UpdateRewriter(
        part, set(src.param_names), src.resolve, src.error, symbols.atomic, reductions.partial_update
    )
    body = lower_statements(src, statements, local_names, symbols, updates)
    counted = CountedLoops(
        lambda func: src.resolve(func) is range if isinstance(func, ast.Name) and func.id not in local_names else False
    )
    return [s for stmt in body for s in as_list(counted.visit(stmt))]


class _SharedOffsets(ast.NodeTransformer):
    """`a[e0, e1]` of a staged array -> `_qg_sh_a[x]`, x its flat offset in the region
    `(e0 - o0) * W + (e1 - o1)` (W the region's width): `_qg_b + c` where each e is its loop
    variable plus a constant c_d (c = c0 * W + c1), else each e less the region's origin (a clamp
    `min(i + 1, n - 1)` keeps its clamped cell). Offsets of names no part stores are computed once,
    before the passes (`definitions`), in 32 bits: a region has at most 1024 cells."""

    def __init__(self, staged: set[str], loop_vars, region: tuple[int, ...], stored: set[str]) -> None:
        self.staged, self.loop_vars, self.region, self.stored = staged, list(loop_vars), region, stored
        self.found: dict[str, tuple[str, ast.expr]] = {}  # ast.dump of an index -> (its variable, its offset)

    def lowered(self, body: list[ast.stmt]) -> list[ast.stmt]:
        return [self.visit(s) for s in body]

    def definitions(self, at: ast.AST) -> list[ast.stmt]:
        return [
            ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], offset), at)
            for name, offset in self.found.values()
        ]

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not (isinstance(node.value, ast.Name) and node.value.id in self.staged):
            return node
        parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        key = ast.dump(ast.Tuple(parts, ast.Load()))
        if key in self.found:
            index = ast.Name(self.found[key][0], ast.Load())
        else:
            offset = self._offset(parts)
            if any(isinstance(n, ast.Name) and n.id in self.stored for n in ast.walk(offset)):
                index = offset  # an index of a part's locals: computed where it is read
            elif isinstance(offset, ast.Name):
                index = offset
            else:
                name = f"_qg_x{len(self.found)}"
                self.found[key] = (name, offset)
                index = ast.Name(name, ast.Load())
        new = ast.Subscript(ast.Name(f"_qg_sh_{node.value.id}", ast.Load()), index, node.ctx)
        return ast.fix_missing_locations(ast.copy_location(new, node))

    def _offset(self, parts: list[ast.expr]) -> ast.expr:
        shifts = [self._shift(p, v) for p, v in zip(parts, self.loop_vars)]
        if all(s is not None for s in shifts):
            shift = shifts[-1] + (shifts[0] * self.region[1] if len(shifts) == 2 else 0)
            if shift == 0:
                return ast.Name("_qg_b", ast.Load())
            return _call("_qg_u32", ast.BinOp(ast.Name("_qg_b", ast.Load()), ast.Add(), ast.Constant(shift)))
        local = [
            _call("_qg_i32", ast.BinOp(p, ast.Sub(), ast.Name(f"_qg_o{d}", ast.Load()))) for d, p in enumerate(parts)
        ]
        flat = local[0]
        if len(local) == 2:
            flat = ast.BinOp(ast.BinOp(flat, ast.Mult(), ast.Constant(self.region[1])), ast.Add(), local[1])
        return _call("_qg_u32", flat)

    @staticmethod
    def _shift(expr: ast.expr, var: str) -> int | None:
        """c where `expr` is `var`, `var + c` or `var - c` (c an int literal), else None."""
        if isinstance(expr, ast.Name) and expr.id == var:
            return 0
        if (
            isinstance(expr, ast.BinOp)
            and isinstance(expr.op, (ast.Add, ast.Sub))
            and isinstance(expr.left, ast.Name)
            and expr.left.id == var
            and isinstance(expr.right, ast.Constant)
            and type(expr.right.value) is int
        ):
            return expr.right.value if isinstance(expr.op, ast.Add) else -expr.right.value
        return None


def _call(func: str, arg: ast.expr) -> ast.expr:
    return ast.Call(ast.Name(func, ast.Load()), [arg], [])


class _Splice(ast.NodeTransformer):
    """The marker statements `_qg_part_k` replaced by a copy of part k's lowered statements and
    `_qg_offsets` by the shared offsets' definitions."""

    def __init__(self, parts: list[list[ast.stmt]], offsets: list[ast.stmt]) -> None:
        self.parts, self.offsets = parts, offsets

    def visit_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Name) and node.value.id == "_qg_offsets":
            return self.offsets
        if isinstance(node.value, ast.Name) and node.value.id.startswith("_qg_part_"):
            return ast_clone.clone(self.parts[int(node.value.id.rsplit("_", 1)[1])])
        return node


def tiled_function(src, task: TiledTask, params: list[str], symbols: Symbols, kinds: list, options: KernelOptions):
    """(the kernel function of a tiled task with these parameters, its plan or None)."""
    body, plan = tiled_body(src, task, symbols, kinds, options)
    return function_def(task_name(task), params, body, task.lineno), plan
