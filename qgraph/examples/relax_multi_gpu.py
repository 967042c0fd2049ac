"""The README's relax decomposed by rows over the ranks of a process group, solved to a global
tolerance in one device loop per GPU.

Each rank owns a band of rows with a halo row above and below (the layout of heat_multi_gpu.py).
A pass is two Jacobi sweeps, each followed by the halo exchange, then the all-reduce (max) of the
pass's change and the decision; `@qgraph.graph(graph_while="flag")` puts the whole pass, NCCL's
collectives included, in a WHILE node on every GPU, so the solve never returns to the host
until the global change is below the tolerance. Every rank takes the same decision at the same
pass (the flag comes from the all-reduced value). On the CPU the same code runs with gloo.

    torchrun --nproc-per-node=2 examples/relax_multi_gpu.py --size 8192 --tol 1e-3
    python examples/relax_multi_gpu.py --nproc 2 --arch cpu --size 64 --tol 1e-4 --check
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import qgraph
import qgraph.distributed
from qgraph.examples import ranks
from qgraph.examples.command_line import int_at_least
from qgraph.examples.heat_multi_gpu import bands, initial_field


@qgraph.kernel
def sweep(u, un, change, lo: int, hi: int):
    for i, j in qgraph.ndrange((lo, hi), (1, u.shape[1] - 1)):
        un[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        qgraph.atomic_max(change, 0, abs(un[i, j] - u[i, j]))


@qgraph.kernel
def decide(change, last, passes, flag, tol: float):
    last[0] = change[0]
    passes[0] += 1
    flag[0] = 1 if change[0] > tol else 0
    change[0] = 0.0


def relax_step(group: qgraph.distributed.Group, max_passes: int | None = None):
    """The pass as a graph_while step over `group`: on one rank it is the one-GPU solver."""

    @qgraph.graph(graph_while="flag", max_iterations=max_passes)
    def relax(u, un, change, last, passes, flag, tol: float, lo: int, hi: int):
        sweep(u, un, change, lo, hi)
        group.exchange_rows(un)
        sweep(un, u, change, lo, hi)
        group.exchange_rows(u)
        group.all_reduce(change, "max")
        decide(change, last, passes, flag, tol)

    return relax


def numpy_solve(u0: np.ndarray, tol: float, max_passes: int = 1_000_000) -> tuple[np.ndarray, int]:
    """The same solve in one process: passes of two sweeps until the pass's max change <= tol."""
    u, passes = u0.copy(), 0
    while passes < max_passes:
        change = 0.0
        for _ in range(2):
            new = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
            change = max(change, float(np.abs(new - u[1:-1, 1:-1]).max()))
            u[1:-1, 1:-1] = new
        passes += 1
        if not change > tol:
            break
    return u, passes


@dataclass
class RelaxResult:
    world: int
    rows: int
    cols: int
    passes: int  # passes to the tolerance (two sweeps each)
    seconds: float  # the timed solve alone (compilation, NCCL set-up and the graph's build excluded)
    pass_us: float  # microseconds per pass
    change: float  # the global max change of the last pass
    arch: str
    launches: int  # graph launches of the timed solve on cuda (1: every pass ran in the device loop)
    u: np.ndarray | None = field(default=None, repr=False)  # the gathered field, on rank 0 only


def solve(rows: int, cols: int | None = None, tol: float = 1e-4, max_passes: int = 1_000_000,
          gather: bool = True, group=None) -> RelaxResult:
    """Solve on every rank of `group` (the default torch.distributed group when None) to `tol`."""
    import torch.distributed as dist

    cols = rows if cols is None else cols
    g = qgraph.distributed.Group(group)
    band = bands(rows, g.world)[g.rank]
    whole, local = initial_field(rows, cols), np.zeros((band.rows + 2, cols))
    first, last_row = max(band.start - 1, 0), min(band.stop + 1, rows)
    local[first - (band.start - 1):last_row - (band.start - 1)] = whole[first:last_row]
    u, un = qgraph.from_numpy(local), qgraph.from_numpy(local)
    change, last = qgraph.from_numpy(np.zeros(1)), qgraph.from_numpy(np.zeros(1))
    passes, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    relax = relax_step(g, max_passes)
    relax(u, un, change, last, passes, flag, float("inf"), band.lo, band.hi)  # one pass: compiles and builds
    for a, v in ((u, local), (un, local), (change, np.zeros(1)), (passes, np.zeros(1, np.int64))):
        a.from_numpy(v)
    g.barrier()
    launched = relax.stats.replays
    start = time.perf_counter()
    relax(u, un, change, last, passes, flag, tol, band.lo, band.hi)
    qgraph.sync()
    seconds = time.perf_counter() - start
    launched = relax.stats.replays - launched
    done = int(passes.to_numpy()[0])
    field_u = None
    if gather:
        parts = [None] * g.world if g.rank == 0 else None
        dst = dist.get_global_rank(group, 0) if group is not None else 0
        dist.gather_object((band.start, u.to_numpy()[1:band.rows + 1]), parts, dst=dst, group=group)
        if g.rank == 0:
            field_u = np.empty((rows, cols))
            for start_row, block in parts:
                field_u[start_row:start_row + block.shape[0]] = block
    g.barrier()
    return RelaxResult(world=g.world, rows=rows, cols=cols, passes=done, seconds=seconds,
                       pass_us=1e6 * seconds / max(done, 1), change=float(last.to_numpy()[0]),
                       arch=qgraph.current_arch(), launches=launched, u=field_u)


def launch(nprocs: int, arch: str, timeout: float = 600.0, **kwargs) -> RelaxResult:
    """solve(**kwargs) on nprocs local processes (one per GPU on cuda); rank 0's result."""
    return ranks.launch(nprocs, arch, solve, timeout, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int_at_least(8), default=1024, help="grid rows (and columns unless --cols)")
    parser.add_argument("--cols", type=int_at_least(3, "the grid needs an interior"), default=None)
    parser.add_argument("--weak", action="store_true", help="--size rows per rank (weak scaling)")
    parser.add_argument("--tol", type=float, default=1e-4, help="stop when a pass changes no cell by more")
    parser.add_argument("--max-passes", type=int_at_least(1), default=1_000_000, help="the runaway guard")
    parser.add_argument("--arch", choices=["cuda", "cpu"], default=None, help="default: cuda when a GPU is present")
    parser.add_argument("--nproc", type=int_at_least(1), default=1, help="processes to start when not under torchrun")
    parser.add_argument("--check", action="store_true", help="compare with a single-process NumPy solve")
    args = parser.parse_args(argv)
    arch = args.arch or ("cuda" if qgraph.device_count() > 0 else "cpu")
    world = ranks.torchrun_world() or args.nproc
    rows = args.size * world if args.weak else args.size
    try:
        bands(rows, world)
    except ValueError as e:
        parser.error(f"argument --size: {e}")
    r = ranks.run_everywhere(arch, args.nproc, solve, rows=rows, cols=args.cols or args.size, tol=args.tol,
                             max_passes=args.max_passes, gather=args.check)
    if r is None:  # a torchrun rank other than 0
        return 0
    print(f"relax {r.rows}x{r.cols} on {r.world} rank(s), {r.arch}: {r.passes} passes to tol {args.tol:g} in "
          f"{r.seconds:.3f} s ({r.pass_us:.1f} us/pass), last change {r.change:.3e}")
    if args.check:
        expected, passes = numpy_solve(initial_field(r.rows, r.cols), args.tol, args.max_passes)
        err = float(np.abs(r.u - expected).max())
        print(f"  numpy: {passes} passes, max |u - numpy| = {err:.3e}")
        return 0 if err < 1e-9 and passes == r.passes else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
