"""CUDA code of a parallel task with reductions: a grid-stride loop and a block combine.

    partials = identity (sum) or the target's current value (min/max: idempotent)
    for t in range(thread, n, threads in the grid):      # each thread reduces many elements
        <loop variables from t> <body, accumulating into the partials>
    per partial: warp shuffle tree -> one value per warp -> shared memory
    syncthreads
    warp 0: shuffle tree over the warps' values -> lane 0: one atomic into the target

The launch caps the grid at what fits on the device at once (`TaskKernel.grid_limit`), so
the atomics per reduction are one per resident block. Partials are typed as the target's
dtype (`_qg_dt_<target>`, a numba type bound per specialisation): float32 stays float32.
"""

from __future__ import annotations

import ast

from .updates import Reduction

LANES = 32
MAX_WARPS = 32  # 1024 threads per block at most
_MASK = "0x7FFFFFFFFFFFFFFF"


def dtype_name(target: str) -> str:
    """The name bound to the numba scalar type of array parameter `target`'s elements."""
    return f"_qg_dt_{target}"


def _parse(source: str, at: ast.AST) -> list[ast.stmt]:
    """Statements from source text, every node placed at `at`'s line."""
    stmts = ast.parse(source).body
    for stmt in stmts:
        for node in ast.walk(stmt):
            if hasattr(node, "lineno") or isinstance(node, (ast.expr, ast.stmt)):
                ast.copy_location(node, at)
    return stmts


def _index_text(reduction: Reduction) -> str:
    return ast.unparse(reduction.index)


def _combine(op: str, a: str, b: str) -> str:
    return f"{a} + {b}" if op in ("add", "sub") else f"{op}({a}, {b})"


def partial_update(reduction: Reduction, value: ast.expr, at: ast.stmt) -> ast.stmt:
    """`partial = partial (+|min|max) dtype(value)`, replacing the user's update statement."""
    cast = ast.Call(ast.Name(dtype_name(reduction.target), ast.Load()), [value], [])
    var = ast.Name(reduction.var, ast.Load())
    if reduction.op in ("add", "sub"):
        new = ast.BinOp(var, ast.Add(), cast)
    else:
        new = ast.Call(ast.Name(reduction.op, ast.Load()), [var, cast], [])
    stmt = ast.Assign([ast.Name(reduction.var, ast.Store())], new)
    for node in ast.walk(stmt):
        if not hasattr(node, "lineno") or getattr(node, "lineno", None) is None:
            ast.copy_location(node, at)
    return ast.copy_location(stmt, at)


def initial_partials(reductions: list[Reduction], at: ast.AST) -> list[ast.stmt]:
    lines = []
    for r in reductions:
        if r.op in ("add", "sub"):
            lines.append(f"{r.var} = {dtype_name(r.target)}(0)")
        else:
            lines.append(f"{r.var} = {r.target}[{_index_text(r)}]")
        lines.append(f"_qg_sh{r.var} = _qg_cuda.shared.array({MAX_WARPS}, {dtype_name(r.target)})")
    return _parse("\n".join(lines), at)


def grid_stride_loop(body: list[ast.stmt], at: ast.AST) -> list[ast.stmt]:
    """`for _qg_tt in range(thread, _qg_n, grid threads): _qg_t = _qg_tt (non-negative); body`."""
    head = _parse(
        "_qg_stride = _qg_i64(_qg_u64(_qg_u32(_qg_cuda.gridDim.x)) * _qg_u64(_qg_u32(_qg_cuda.blockDim.x)))\n"
        "for _qg_tt in range(_qg_t0, _qg_n, _qg_stride):\n"
        f"    _qg_t = _qg_tt & {_MASK}\n", at)
    loop = head[1]
    loop.body = loop.body + body
    return head


def block_combine(reductions: list[Reduction], at: ast.AST, atomic_path) -> list[ast.stmt]:
    """Warp shuffles, a shared-memory step and one atomic per block for every partial."""
    lines = ["_qg_lane = _qg_i32(_qg_cuda.threadIdx.x) & 31",
             "_qg_warp = _qg_i32(_qg_cuda.threadIdx.x) >> 5",
             "_qg_nwarps = (_qg_i32(_qg_cuda.blockDim.x) + 31) >> 5"]
    for r in reductions:
        v = f"_qg_v{r.var}"
        lines.append(f"{v} = {r.var}")
        for offset in (16, 8, 4, 2, 1):
            lines.append(f"{v} = {_combine(r.op, v, f'_qg_cuda.shfl_down_sync(0xFFFFFFFF, {v}, {offset})')}")
        lines += ["if _qg_lane == 0:", f"    _qg_sh{r.var}[_qg_warp] = {v}"]
    lines += ["_qg_cuda.syncthreads()", "if _qg_warp == 0:"]
    for r in reductions:
        v = f"_qg_v{r.var}"
        # lanes past the last warp contribute the identity (min/max: warp 0's value, idempotent)
        identity = f"{dtype_name(r.target)}(0)" if r.op in ("add", "sub") else f"_qg_sh{r.var}[0]"
        lines.append(f"    {v} = _qg_sh{r.var}[_qg_lane] if _qg_lane < _qg_nwarps else {identity}")
        for offset in (16, 8, 4, 2, 1):
            lines.append(f"    {v} = {_combine(r.op, v, f'_qg_cuda.shfl_down_sync(0xFFFFFFFF, {v}, {offset})')}")
        lines += ["    if _qg_lane == 0:",
                  f"        {atomic_path(r.op)}({r.target}, {_index_text(r)}, {v})"]
    return _parse("\n".join(lines), at)
