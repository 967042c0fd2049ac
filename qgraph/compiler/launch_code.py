"""Generated launch code: parameter-block and grid expressions, straight-line launch functions.

A task's parameter block is `bounds + arg bytes + ...` (see compiler.cuda_program). Per
specialisation, launch code is generated as straight-line Python (one statement per task,
constants bound as default arguments): the hot path has no loops over tasks, no dict
lookups and no attribute chains.
"""

from __future__ import annotations

from ..lang import generated
from ..lang.cuda.lanes import lanes_expr
from .cuda_program import TaskKernel


def block_expr(tk: TaskKernel) -> str:
    """Python expression of a task's parameter block from `b` (bounds) and `p` (arg bytes)."""
    bounds = [] if tk.bounds_slot is None else [f"b[{tk.bounds_slot}]"]
    suffixes = tk.suffixes or {}
    exprs = tk.arg_exprs or tuple(f"p[{k}]" for k in tk.arg_slots)
    args = [e + (f" + {suffixes[k]!r}" if k in suffixes else "") for k, e in zip(tk.arg_slots, exprs)]
    arrays, scalars = args[:tk.arrays], args[tk.arrays:]  # the ABI's order: arrays, then scalars
    # deterministic reductions' scratch arrays, then debug mode's record, follow the array arguments
    extra = (tk.scratch.abi if tk.scratch is not None else b"") + tk.record
    parts = [*bounds, *arrays, *([repr(extra)] if extra else []), *scalars, *([repr(tk.gate)] if tk.gate else [])]
    return " + ".join(parts) if parts else "b''"


def grid_expr(tk: TaskKernel, at_least_one: bool) -> str:
    """Python expression of a task's grid from `n` (iteration counts) and `c` (per-dimension
    counts): a block count, or for a tiled task the shape `(gx, gy, gz, bx, by)` from
    `_tile` (tile_shape, which callers bind)."""
    if not tk.parallel:
        return "1"
    if tk.temporal:
        return f"_tiles(c[{tk.bounds_slot}], {tk.temporal[1]!r}, {tk.temporal[2]})"
    if tk.tiled:
        return f"_tile(c[{tk.bounds_slot}], {tk.block}, {tk.grid_limit})"
    count = f"n[{tk.bounds_slot}]"
    if tk.lanes:  # lanes_expr(count) threads an iteration, as the kernel computes them
        count = f"{count} * {lanes_expr(count)}"
    expr = f"({count} + {tk.block - 1}) // {tk.block}"
    if tk.grid_limit:
        expr = f"min({expr}, {tk.grid_limit})"
    return f"({expr} or 1)" if at_least_one else expr


MAX_GRID_YZ = 65535
MAX_INDEX = 1 << 48  # the generated code masks indices to 48 bits (lang.cuda.codegen)


def tile_shape(counts: tuple[int, ...], threads: int, limit: int = 0) -> tuple[int, int, int, int, int]:
    """(gx, gy, gz, bx, by) of a tiled task: blocks of `threads` shaped to the extents.

    x takes 32 threads (a warp reads 128 contiguous bytes of float32) unless the last
    extent is smaller, y the rest of the block unless its extent is smaller. The grid's y
    and z are limited to 65535 blocks: a 2-D loop spreads its y blocks over both, a 3-D
    loop takes one z block per index of its first dimension; the kernel runs each index
    once where that covers them (lang.cuda.loops.tiled_loops tests the shape) and loops
    over what remains otherwise. With `limit` (a task with reductions: one atomic per
    block, grid-stride loops) y and z are capped so that about `limit` blocks run.
    Every grid dimension is at least 1, so a graph node stays valid for an empty loop."""
    nx, ny = counts[-1], counts[-2]
    nz = 1
    for c in counts[:-2]:
        nz *= c
    if nx * ny * nz >= MAX_INDEX:
        raise OverflowError(f"a parallel loop of {nx * ny * nz} iterations exceeds qgraph's 2**48 limit")
    bx = 32 if nx >= 32 else 1 << max(nx - 1, 0).bit_length()
    by = min(threads // bx, 1 << max(ny - 1, 0).bit_length())
    if bx * by < threads and nx > bx:  # a short y extent: widen x instead
        bx = min(threads // by, 1 << (nx - 1).bit_length())
    gx = -(-nx // bx) or 1
    rows = -(-ny // by)  # blocks in y
    if len(counts) == 2 and not limit and rows > MAX_GRID_YZ:
        gz = -(-rows // MAX_GRID_YZ)
        if gz <= MAX_GRID_YZ:  # one pass: y blocks over the grid's y and z
            return gx, -(-rows // gz), gz, bx, by
    gy = min(rows, MAX_GRID_YZ) or 1
    gz = min(nz, MAX_GRID_YZ) or 1
    if limit:
        gz = max(1, min(gz, limit // gx))
        gy = max(1, min(gy, limit // (gx * gz)))
    return gx, gy, gz, bx, by


def tiles_of(counts, tile: tuple[int, ...], halo: int) -> tuple[int, int, int, int, int]:
    """(gx, gy, gz, bx, by) of a temporally tiled task (lang.cuda.tiling): a block per tile, x over the
    last dimension, the block its region (the tile and `halo` each side: a thread a cell); `counts`
    a 1-d loop's count or a 2-d loop's counts."""
    if type(counts) is int:
        return -(-counts // tile[0]) or 1, 1, 1, tile[0] + 2 * halo, 1
    return -(-counts[1] // tile[1]) or 1, -(-counts[0] // tile[0]) or 1, 1, tile[1] + 2 * halo, tile[0] + 2 * halo


def generate(source: str, name: str, constants: dict, label: str):
    """Compile generated launch code; `constants` become the function's default arguments."""
    fn = generated.function(source, name, label, {})
    fn.__defaults__ = tuple(constants[p] for p in fn.__code__.co_varnames[fn.__code__.co_argcount -
                                                                            len(constants):fn.__code__.co_argcount])
    return fn


def signature_with_constants(params: str, constants: dict) -> str:
    """`def f(<params>, c1=None, c2=None, ...)`: the constants arrive as fast locals."""
    extra = ", ".join(f"{c}=None" for c in constants)
    return f"{params}, {extra}" if extra else params


def graph_blocks(plan: list, kernels: list[TaskKernel], bounds, name: str):
    """blocks(args, p) -> (parameter block per node, grid per node) of a graph's `plan` (a TaskKernel's
    node, or a loop's or branch's slot writer: an item with `slot_expr` and `constants()`), generated."""
    exprs, grids = [], []
    constants = {"_bounds": bounds, "_tile": tile_shape, "_tiles": tiles_of}
    for item in plan:
        if isinstance(item, TaskKernel):
            exprs.append(block_expr(item))
            grids.append(grid_expr(item, True))
        else:
            exprs.append(item.slot_expr)
            grids.append("1")
            constants.update(item.constants())
    has_bounds = any(tk.parallel for tk in kernels)
    lines = ["    b, n, c = _bounds(*args)" if has_bounds else "    b = n = c = ()",
             f"    return [{', '.join(exprs)}], [{', '.join(grids)}]"]
    source = f"def blocks({signature_with_constants('args, p', constants)}):\n" + "\n".join(lines) + "\n"
    return generate(source, "blocks", constants, f"graph blocks of kernel {name}")
