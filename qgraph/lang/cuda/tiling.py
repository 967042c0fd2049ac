"""CUDA code of a temporally tiled task (lang.front.temporal_tiling): S passes of a stencil loop
per launch, each block on its tile and a halo in shared memory.

    stage      each carried array's region (tile + halo H each side, clipped to the array) into
               shared memory: those live on entry whole, those first written outside the
               iteration space only (inside it the first writer's values come first)
    passes     S - 1 passes of every part, then the parts before the last once more; part k of
               pass q computes the cells of the iteration space at least q * R + r0 + ... + rk
               from the region's edge (R: the parts' read radii summed), its carried reads and
               stores going to shared memory; syncthreads after each part
    write back the tile's cells of the arrays the parts before the last write

Each cell runs the part's lowered statements as the untiled task does (the same operations in the
same order: the same bits); only the subscripts of carried arrays change, to shared memory.
"""

from __future__ import annotations

import ast

from ..front.temporal_tiling import TiledTask
from ..lower.lowering import Symbols, function_def, lower_statements, task_locals, task_name
from ..lower.updates import UpdateRewriter
from ..options import KernelOptions
from ..types.precision import weak_typed
from ..types.weak_types import param_type
from . import reductions
from .loops import CountedLoops, as_list

# Tile extents per loop dimension count (x, the last dimension, over the contiguous axis), the
# passes per launch tried from the first, at most 48 KB of static shared memory per block, and the
# threads of a tiled task's block (compiler.cuda_program launches it so, where it fits).
# `benchmarks/unroll_loops.py --quick --fluids` on an H100 (driver for CUDA 13.0), the fluids pressure
# solve (100 sweeps of 256x128 float32, 512-thread blocks): hand-written graph 94.7 us, untiled
# straight line 106.5, tiled S=2 159.6, S=4 125.9, S=8 127.1 (16x32 tiles), S=8 on 32x32 tiles 173.5;
# 2048x2048: hand-written 2071, untiled 2123, tiled S=2/4/8 5670/4876/5399 us. A tiled launch costs
# about 1.8 us + 1.2 us a sweep whatever the region (S=2: 22x38, S=8: 46x62): each thread's chain
# of a few dependent cells and the barrier, more than a kernel node behind a programmatic edge
# (~1.06 us), so tiling is off by default (lang.options) until a sweep costs far less.
TILES = {1: (1024,), 2: (16, 32)}
PASSES = (4, 2)
SHARED_BYTES = 48 * 1024
BLOCK = 512
CONTIGUOUS_DTYPES = "iuf"  # element kinds a tile stages (no vectors, structs or bools)


def halo(task: TiledTask, passes: int) -> int:
    """The margin a tile needs: what S - 1 passes and the parts but the last read beyond it."""
    return (passes - 1) * sum(task.radii) + sum(task.radii[:-1])


def tile_plan(task: TiledTask, kind_of: dict, option) -> tuple[int, tuple[int, ...], int, tuple[str, ...]] | None:
    """(passes per launch S, tile extents, halo, the read-only arrays staged too) for these argument
    kinds, or None where the task cannot be tiled: a carried array not a plain numeric array of the
    loop's rank, or no S whose regions fit the shared memory. The read-only arrays read near their
    element are staged where they fit beside the carried ones (their reads then wait on no global load)."""
    ndim = len(task.dims)

    def stageable(kind) -> bool:
        return kind.is_array and kind.ndim == ndim and not kind.large and kind.dtype.kind in CONTIGUOUS_DTYPES

    carried = [kind_of[name] for name in task.arrays if name in task.written]
    if not all(stageable(k) for k in carried):
        return None
    read_only = tuple(name for name in task.read_only if stageable(kind_of[name]))
    tile = TILES[ndim]
    for passes in (option,) if option is not True else PASSES:
        h = halo(task, passes)
        cells = 1
        for t in tile:
            cells *= t + 2 * h
        for extra in (read_only, ()):
            arrays = carried + [kind_of[name] for name in extra]
            if cells * sum(k.dtype.itemsize for k in arrays) <= SHARED_BYTES:
                return passes, tile, h, extra
    return None


def tiled_body(src, task: TiledTask, symbols: Symbols, kinds: list, options: KernelOptions):
    """(the statements of the tiled kernel, its plan (S, tile, halo, staged read-only arrays)), or
    ([return], None)."""
    kind_of = dict(zip(src.param_names, kinds))
    plan = tile_plan(task, kind_of, options.temporal_tiling) if options.debug is None else None
    at = task.body[0]
    if plan is None:
        return [ast.copy_location(ast.Return(None), at)], None
    passes, tile, h, read_only = plan
    carried = [name for name in task.arrays if name in task.written]
    shared = carried + list(read_only)
    parts = [_lowered(src, part, symbols, kind_of, options, shared) for part in task.parts]
    ndim = len(task.dims)
    axes = ("x",) if ndim == 1 else ("y", "x")
    region = [t + 2 * h for t in tile]
    ends = ["_qg_n"] if ndim == 1 else [f"_qg_c{d}" for d in range(ndim)]
    shape = ", ".join(str(r) for r in region)
    lines = [f"_qg_sh_{a} = _qg_cuda.shared.array(({shape},), _qg_dt_{a})" for a in shared]
    for d, axis in enumerate(axes):
        lines += [
            f"_qg_o{d} = _qg_s{d} + _qg_i64(_qg_cuda.blockIdx.{axis}) * {tile[d]} - {h}",
            f"_qg_e{d} = _qg_s{d} + {ends[d]}",
            f"_qg_u{d} = _qg_i64(_qg_cuda.threadIdx.{axis})",
            f"_qg_w{d} = _qg_i64(_qg_cuda.blockDim.{axis})",
        ]
    cell = ", ".join(f"_qg_u64(_qg_r{d})" for d in range(ndim))
    glob = ", ".join(f"_qg_g{d}" for d in range(ndim))
    inside = " and ".join(f"_qg_g{d} >= _qg_s{d} and _qg_g{d} < _qg_e{d}" for d in range(ndim))

    def in_array(a: str) -> str:
        return " and ".join(f"_qg_g{d} >= 0 and _qg_g{d} < {a}.shape[{d}]" for d in range(ndim))

    whole = [*task.staged, *read_only]
    stage = [f"if {in_array(a)}:\n    _qg_sh_{a}[{cell}] = {a}[{glob}]" for a in whole]
    stage += [f"if not ({inside}) and {in_array(a)}:\n    _qg_sh_{a}[{cell}] = {a}[{glob}]" for a in task.rewritten]
    every = [("0", str(r)) for r in region]
    lines += _nest(every, [f"_qg_g{d} = _qg_o{d} + _qg_r{d}" for d in range(ndim)], [None] * ndim, stage)
    lines.append("_qg_cuda.syncthreads()")
    lines.append(f"for _qg_pass in range({passes}):")
    total, done = sum(task.radii), 0
    for k, radius in enumerate(task.radii):
        done += radius
        last = k == len(task.radii) - 1
        pad = "        " if last else "    "
        if last:
            lines.append(f"    if _qg_pass < {passes - 1}:")
        lines.append(f"{pad}_qg_m = _qg_pass * {total} + {done}")
        loop = _nest(
            [("_qg_m", f"{r} - _qg_m") for r in region],
            [f"{v} = _qg_o{d} + _qg_r{d}" for d, v in enumerate(task.loop_vars)],
            [f"{v} >= _qg_s{d} and {v} < _qg_e{d}" for d, v in enumerate(task.loop_vars)],
            [f"_qg_part_{k}"],
        )
        lines += [pad + line for line in loop] + [f"{pad}_qg_cuda.syncthreads()"]
    back = [f"{a}[{glob}] = _qg_sh_{a}[{cell}]" for a in task.written_back]
    lines += _nest(
        [(str(h), str(h + t)) for t in tile],
        [f"_qg_g{d} = _qg_o{d} + _qg_r{d}" for d in range(ndim)],
        [f"_qg_g{d} < _qg_e{d}" for d in range(ndim)],
        back,
    )
    body = reductions._parse("\n".join(lines), at)
    body = [_Splice(parts).visit(s) for s in body]
    return [ast.fix_missing_locations(s) for s in body], plan


def _nest(spans: list[tuple[str, str]], heads: list[str], guards: list, inner: list[str]) -> list[str]:
    """Block-strided loops over region cells `_qg_r{d}` in [spans[d][0], spans[d][1]), outermost
    first, each starting with heads[d] and running the next behind guards[d] (None: no guard), the
    innermost `inner`'s lines. While loops: a `for` over a range with a variable step divides."""
    if not spans:
        return [line for text in inner for line in text.split("\n")]
    d = len(heads) - len(spans)
    (start, stop), rest = spans[0], _nest(spans[1:], heads, guards, inner)
    body = [heads[d]] + ([f"if {guards[d]}:"] + ["    " + line for line in rest] if guards[d] else rest)
    body.append(f"_qg_r{d} += _qg_w{d}")
    return [f"_qg_r{d} = _qg_u{d} + {start}", f"while _qg_r{d} < {stop}:"] + ["    " + line for line in body]


def _lowered(src, part, symbols: Symbols, kind_of: dict, options: KernelOptions, carried: list) -> list[ast.stmt]:
    """A part's statements lowered as lang.cuda.codegen.cuda_task lowers a task's (weak typing,
    builtins and funcs, element updates, counted loops), then its carried subscripts to shared memory."""
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
    body = [s for stmt in body for s in as_list(counted.visit(stmt))]
    return [_ToShared(set(carried)).visit(s) for s in body]


class _ToShared(ast.NodeTransformer):
    """`a[e0, e1]` of a carried array -> `_qg_sh_a[e0 - _qg_o0, e1 - _qg_o1]` (its tile region)."""

    def __init__(self, carried: set[str]) -> None:
        self.carried = carried

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not (isinstance(node.value, ast.Name) and node.value.id in self.carried):
            return node
        parts = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
        shifted = [  # non-negative: an unsigned index needs no wraparound
            ast.Call(ast.Name("_qg_u64", ast.Load()), [ast.BinOp(p, ast.Sub(), ast.Name(f"_qg_o{d}", ast.Load()))], [])
            for d, p in enumerate(parts)
        ]
        index = ast.Tuple(shifted, ast.Load()) if len(shifted) > 1 else shifted[0]
        new = ast.Subscript(ast.Name(f"_qg_sh_{node.value.id}", ast.Load()), index, node.ctx)
        return ast.fix_missing_locations(ast.copy_location(new, node))


class _Splice(ast.NodeTransformer):
    """The marker statement `_qg_part_k` replaced by part k's lowered statements."""

    def __init__(self, parts: list[list[ast.stmt]]) -> None:
        self.parts = parts

    def visit_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Name) and node.value.id.startswith("_qg_part_"):
            return self.parts[int(node.value.id.rsplit("_", 1)[1])]
        return node


def tiled_function(src, task: TiledTask, params: list[str], symbols: Symbols, kinds: list, options: KernelOptions):
    """(the kernel function of a tiled task with these parameters, its plan or None)."""
    body, plan = tiled_body(src, task, symbols, kinds, options)
    return function_def(task_name(task), params, body, task.lineno), plan
