"""A 2D Jacobi heat solve decomposed by rows over the ranks of a torch.distributed process group.

Each rank (one process, one GPU) owns a band of rows plus one halo row above and below. A step is
two Jacobi sweeps (u -> un, un -> u); after each sweep the band's edge rows go to the neighbouring
ranks by NCCL send/recv on torch views of the qgraph arrays (no copy), and the global residual is
an all-reduce (max). On CUDA the whole step, kernels and halo exchange, is captured once with
`torch.cuda.graph` and replayed; the edge rows are computed first, so the exchange overlaps the
sweep of the band's interior. On the CPU backend the same code runs with gloo.

    torchrun --nproc-per-node=2 examples/heat_multi_gpu.py --size 8192 --steps 500
    python examples/heat_multi_gpu.py --nproc 2 --arch cpu --size 256 --steps 100 --check
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

import qgraph
from qgraph.examples import ranks
from qgraph.examples.command_line import int_at_least


@qgraph.kernel(cuda_graph=True)
def sweep_edges(u, un, change, lo: int, hi: int):
    # serial task: reset this sweep's max |change|
    change[0] = 0.0
    # parallel task: the band's first and last updated rows, whose new values the neighbours need
    for e, j in qgraph.ndrange(2, (1, u.shape[1] - 1)):
        i = lo if e == 0 else hi - 1
        un[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        qgraph.atomic_max(change, 0, abs(un[i, j] - u[i, j]))


@qgraph.kernel(cuda_graph=True)
def sweep_interior(u, un, change, lo: int, hi: int):
    # parallel task: the rest of the band (reads only rows this rank owns: it overlaps the exchange)
    for i, j in qgraph.ndrange((lo + 1, hi - 1), (1, u.shape[1] - 1)):
        un[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        qgraph.atomic_max(change, 0, abs(un[i, j] - u[i, j]))


@dataclass
class Band:
    """The rows one rank owns: global rows [start, stop), local rows [lo, hi) updated.

    Local row 0 and row `stop - start + 1` are halos (copies of the neighbours' edge rows); local
    row k (1 <= k <= stop - start) is global row start + k - 1. The global first and last rows are
    the fixed boundary, so the first rank updates from local row 2 and the last up to its last
    owned row but one."""

    rank: int
    world: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def lo(self) -> int:
        return 2 if self.rank == 0 else 1

    @property
    def hi(self) -> int:
        return self.rows if self.rank == self.world - 1 else self.rows + 1


def bands(rows: int, world: int) -> list[Band]:
    """Split rows as evenly as possible (the first rows % world bands one row longer)."""
    if world < 1:
        raise ValueError(f"bands: world={world}; need at least one rank")
    cuts = [r * (rows // world) + min(r, rows % world) for r in range(world + 1)]
    out = [Band(r, world, cuts[r], cuts[r + 1]) for r in range(world)]
    for b in out:
        if b.hi - b.lo < 2:
            raise ValueError(f"a {rows}-row grid over {world} ranks leaves rank {b.rank} {b.rows} rows, "
                             f"fewer than 2 to update; use at least {4 * world} rows or fewer ranks")
    return out


def initial_field(rows: int, cols: int) -> np.ndarray:
    """Cold plate (0) with a hot top edge (1); the boundary rows and columns never change."""
    u = np.zeros((rows, cols))
    u[0, :] = 1.0
    return u


def numpy_reference(u0: np.ndarray, steps: int) -> np.ndarray:
    """The same solve on one process: 2 * steps Jacobi sweeps of the interior."""
    u = u0.copy()
    for _ in range(2 * steps):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return u


@dataclass
class HeatMultiResult:
    world: int
    rows: int
    cols: int
    steps: int  # steps taken (one step = two sweeps)
    seconds: float  # the timed steps alone (warm-up, capture and compilation excluded)
    steps_per_second: float
    max_change: float  # global max |u_new - u_old| of the last sweep
    converged: bool  # max_change < tol (always False with tol=0: a fixed step count)
    mode: str  # "graph" (one captured step replayed), "eager", or "... without halo" for timing
    arch: str
    setup_seconds: float  # warm-up (compilation, NCCL set-up) and capture
    u: np.ndarray | None = field(default=None, repr=False)  # gathered field, on rank 0 only


class Solver:
    """One rank's band, its halo exchange and its step, ready to run (and on CUDA, to capture)."""

    def __init__(self, rows: int, cols: int, group=None, *, halo: bool = True):
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.band = bands(rows, self.world)[self.rank]
        self.rows, self.cols = rows, cols
        self.cuda = qgraph.current_arch() == "cuda"
        b = self.band
        whole, local = initial_field(rows, cols), np.zeros((b.rows + 2, cols))
        first, last = max(b.start - 1, 0), min(b.stop + 1, rows)  # the band and the halos that exist
        local[first - (b.start - 1):last - (b.start - 1)] = whole[first:last]
        self.u, self.un = qgraph.from_numpy(local), qgraph.from_numpy(local)
        self._initial = local
        self.change = qgraph.ndarray(qgraph.f64, (1,))
        self.t_change = self._tensor(self.change)
        self.exchanges = {id(a): self._exchange_ops(self._tensor(a)) if halo else [] for a in (self.u, self.un)}

    def reset(self) -> None:
        """Both buffers back to the initial field (after the queued work)."""
        self.barrier()
        self.u.from_numpy(self._initial)
        self.un.from_numpy(self._initial)

    def _tensor(self, a):
        """A torch view of a qgraph array (no copy): CUDA array interface on cuda, NumPy on cpu."""
        import torch

        if self.cuda:
            return torch.as_tensor(a, device=f"cuda:{a.device_id}")
        return torch.from_numpy(np.asarray(a))

    def _exchange_ops(self, t) -> list:
        """Send the band's edge rows to the neighbours, receive theirs into the halo rows."""
        dist, b, ops = self.dist, self.band, []
        peer = (lambda r: dist.get_global_rank(self.group, r)) if self.group is not None else (lambda r: r)
        if b.rank > 0:
            ops += [dist.P2POp(dist.isend, t[1], peer(b.rank - 1), self.group),
                    dist.P2POp(dist.irecv, t[0], peer(b.rank - 1), self.group)]
        if b.rank < b.world - 1:
            ops += [dist.P2POp(dist.isend, t[b.rows], peer(b.rank + 1), self.group),
                    dist.P2POp(dist.irecv, t[b.rows + 1], peer(b.rank + 1), self.group)]
        return ops

    def _stream(self) -> dict:
        import torch

        return {"stream": torch.cuda.current_stream()} if self.cuda else {}

    def sweep(self, src, dst) -> None:
        """dst <- one Jacobi sweep of src; dst's halos hold the neighbours' new edge rows after it."""
        lo, hi, s = self.band.lo, self.band.hi, self._stream()
        sweep_edges(src, dst, self.change, lo, hi, **s)
        ops = self.exchanges[id(dst)]
        works = self.dist.batch_isend_irecv(ops) if ops else []
        sweep_interior(src, dst, self.change, lo, hi, **s)  # overlaps the exchange
        for w in works:
            w.wait()

    def step(self) -> None:
        self.sweep(self.u, self.un)
        self.sweep(self.un, self.u)

    def max_change(self) -> float:
        """The global max change of the last sweep (an all-reduce; waits for the step)."""
        self.dist.all_reduce(self.t_change, op=self.dist.ReduceOp.MAX, group=self.group)
        return float(self.t_change.item())

    def capture(self) -> Callable[[], None]:
        """The step as one replayable CUDA graph (kernels and NCCL exchange); eager on cpu."""
        if not self.cuda:
            return self.step
        import torch

        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.step()
        self._graph = graph  # keeps the graph alive as long as the solver
        return graph.replay

    def barrier(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        self.dist.barrier(group=self.group)

    def gather(self) -> np.ndarray | None:
        """The whole field on the group's first rank (None on the others)."""
        b = self.band
        mine = (b.start, self.u.to_numpy()[1:b.rows + 1])
        parts = [None] * self.world if self.rank == 0 else None
        dst = self.dist.get_global_rank(self.group, 0) if self.group is not None else 0
        self.dist.gather_object(mine, parts, dst=dst, group=self.group)
        if self.rank != 0:
            return None
        out = np.empty((self.rows, self.cols))
        for start, rows in parts:
            out[start:start + rows.shape[0]] = rows
        return out


def run(rows: int, cols: int | None = None, steps: int = 100, *, graph: bool = True, halo: bool = True,
        tol: float = 0.0, check_every: int = 50, gather: bool = True, group=None) -> HeatMultiResult:
    """Solve on the ranks of `group` (the default group when None) in an initialised process group.

    Runs `steps` steps (two sweeps each), or fewer when tol > 0 and the global max change of a
    check (every `check_every` steps, on the host) falls below tol. Every rank of the group must
    call it; rank 0 of the group gets the gathered field when gather=True."""
    cols = rows if cols is None else cols
    if steps < 1 or check_every < 1:
        raise ValueError(f"run: steps={steps} and check_every={check_every} must be at least 1")
    start = time.perf_counter()
    solver = Solver(rows, cols, group, halo=halo)
    solver.step()  # warm-up: compiles the kernels, sets up the communicators (neither can be captured)
    solver.reset()  # after the warm-up has finished everywhere: start from the initial field again
    step = solver.capture() if graph else solver.step
    solver.barrier()
    setup = time.perf_counter() - start

    start, done, change = time.perf_counter(), 0, float("inf")
    while done < steps:
        chunk = min(check_every if tol > 0 else steps, steps - done)
        for _ in range(chunk):
            step()
        done += chunk
        if tol > 0:
            change = solver.max_change()
            if change < tol:
                break
    solver.barrier()
    seconds = time.perf_counter() - start
    if tol <= 0:
        change = solver.max_change()
    mode = ("graph" if graph and solver.cuda else "eager") + ("" if halo else " without halo")
    return HeatMultiResult(world=solver.world, rows=rows, cols=cols, steps=done, seconds=seconds,
                           steps_per_second=done / seconds if seconds > 0 else 0.0, max_change=change,
                           converged=tol > 0 and change < tol, mode=mode, arch=qgraph.current_arch(),
                           setup_seconds=setup, u=solver.gather() if gather else None)


# ---------------------------------------------------------------------------------- processes


def launch(nprocs: int, arch: str, fn: Callable | None = None, timeout: float = 600.0, **kwargs):
    """run(**kwargs) (or fn(**kwargs)) on nprocs local processes, one per GPU on cuda; rank 0's result."""
    return ranks.launch(nprocs, arch, fn or run, timeout, **kwargs)


def _default_arch() -> str:
    return "cuda" if qgraph.device_count() > 0 else "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int_at_least(1), default=1024, help="grid rows (and columns unless --cols)")
    parser.add_argument("--cols", type=int_at_least(3, "the grid needs an interior"), default=None,
                        help="grid columns (default: --size)")
    parser.add_argument("--weak", action="store_true", help="--size rows per rank (weak scaling)")
    parser.add_argument("--steps", type=int_at_least(1), default=200, help="steps (two sweeps each)")
    parser.add_argument("--tol", type=float, default=0.0, help="stop below this max change (0: fixed steps)")
    parser.add_argument("--check-every", type=int_at_least(1), default=50, help="steps between host convergence checks")
    parser.add_argument("--eager", action="store_true", help="launch the step's work one call at a time (no capture)")
    parser.add_argument("--arch", choices=["cuda", "cpu"], default=None, help="default: cuda when a GPU is present")
    parser.add_argument("--nproc", type=int_at_least(1), default=1,
                        help="processes to start here when not under torchrun")
    parser.add_argument("--check", action="store_true", help="compare with a single-process NumPy solve")
    parser.add_argument("--json", default=None, help="write the result (without the field) to this file")
    args = parser.parse_args(argv)
    arch = args.arch or _default_arch()
    world = ranks.torchrun_world() or args.nproc
    rows = args.size * world if args.weak else args.size
    try:
        bands(rows, world)  # every rank needs rows to update: say so before any process starts
    except ValueError as e:
        parser.error(f"argument --size: {e}")
    r = ranks.run_everywhere(arch, args.nproc, run, rows=rows, cols=args.cols or args.size, steps=args.steps,
                             graph=not args.eager, tol=args.tol, check_every=args.check_every, gather=args.check)
    if r is None:  # a torchrun rank other than 0
        return 0
    print(f"heat {r.rows}x{r.cols} on {r.world} rank(s), {r.arch}, {r.mode}: {r.steps} steps in {r.seconds:.3f} s, "
          f"{r.steps_per_second:,.1f} steps/s, max change {r.max_change:.3e} (set-up {r.setup_seconds:.2f} s)")
    status = 0
    if args.check:
        err = float(np.abs(r.u - numpy_reference(initial_field(r.rows, r.cols), r.steps)).max())
        print(f"  max |u - numpy| = {err:.3e}")
        status = 0 if err < 1e-9 else 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: v for k, v in asdict(r).items() if k != "u"}, f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
