"""The 2-D Poisson equation solved by Jacobi sweeps until they stop changing: one call, the loop on the device.

-laplace(u) = f on the unit square, u = 0 on the boundary, on an n x n grid of float32 (spacing
h = 1 / (n - 1)). A pass is two Jacobi sweeps (u -> u_new -> u), the second taking the largest
change of the pass with an atomic max; the pass repeats in a `graph_while` loop while that change
is at least `tol` (and below `max_iters` sweeps), so the host waits only for the answer. The
source is a sum of two Gaussian bumps; the result is checked against the same sweeps in NumPy.

    python -m qgraph.examples.poisson --n 256 --tol 1e-5
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import qgraph
from qgraph.examples.command_line import int_at_least

TOLERANCE = 1e-4  # on the largest |qgraph - NumPy| relative to the largest |u|


@qgraph.kernel(graph_while="flag")
def jacobi_poisson(u, u_new, f, change, iters, flag, h2: float, tol: float, max_iters: int):
    # serial task: reset the pass's largest change
    change[0] = 0.0
    # parallel task: sweep u -> u_new over the interior (the boundary stays 0)
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        u_new[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] + h2 * f[i, j])
    # parallel task: sweep u_new -> u, keeping the largest change
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        new = 0.25 * (u_new[i - 1, j] + u_new[i + 1, j] + u_new[i, j - 1] + u_new[i, j + 1] + h2 * f[i, j])
        qgraph.atomic_max(change, 0, abs(new - u_new[i, j]))
        u[i, j] = new
    # serial task: count the sweeps and decide whether to go round again
    iters[0] += 2
    flag[0] = 1 if change[0] >= tol and iters[0] < max_iters else 0


def source(n: int) -> np.ndarray:
    """f: two Gaussian bumps of opposite sign, float32 (n, n)."""
    x = np.linspace(0.0, 1.0, n)
    xx, yy = np.meshgrid(x, x, indexing="ij")
    bump = lambda cx, cy: np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 0.01)  # noqa: E731
    return (100.0 * (bump(0.3, 0.4) - bump(0.7, 0.6))).astype(np.float32)


def numpy_solve(f: np.ndarray, tol: float, max_iters: int) -> tuple[np.ndarray, int]:
    """The same passes in NumPy float32: (u, sweeps)."""
    n = f.shape[0]
    h2 = np.float32((1.0 / (n - 1)) ** 2)
    u, u_new = np.zeros_like(f), np.zeros_like(f)
    quarter, hf = np.float32(0.25), h2 * f[1:-1, 1:-1]
    sweeps = 0
    while True:
        u_new[1:-1, 1:-1] = quarter * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] + hf)
        new = quarter * (u_new[:-2, 1:-1] + u_new[2:, 1:-1] + u_new[1:-1, :-2] + u_new[1:-1, 2:] + hf)
        change = float(np.abs(new - u_new[1:-1, 1:-1]).max())
        u[1:-1, 1:-1] = new
        sweeps += 2
        if not (change >= tol and sweeps < max_iters):
            return u, sweeps


class Solver:
    """The device arrays of one n x n problem and a call that solves it from u = 0."""

    def __init__(self, f: np.ndarray) -> None:
        n = f.shape[0]
        self.h2 = (1.0 / (n - 1)) ** 2
        self.f = qgraph.from_numpy(f)
        self.u, self.u_new = qgraph.ndarray(qgraph.f32, f.shape), qgraph.ndarray(qgraph.f32, f.shape)
        self.change = qgraph.ndarray(qgraph.f32, (1,))
        self.iters, self.flag = qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,))

    def __call__(self, tol: float, max_iters: int) -> None:
        self.u.fill(0.0)
        self.u_new.fill(0.0)
        self.iters.fill(0)
        jacobi_poisson(self.u, self.u_new, self.f, self.change, self.iters, self.flag, self.h2, tol, max_iters)


@dataclass
class PoissonResult:
    n: int
    sweeps: int
    change: float  # the last pass's largest change (the stopping criterion)
    seconds: float  # the solve alone (compilation excluded: see compile_seconds)
    sweeps_per_second: float
    compile_seconds: float  # the first solve, on a 16 x 16 grid, which compiles the kernel
    max_rel_error: float | None  # max |u - NumPy's u| / max |NumPy's u|; None without check
    arch: str
    u: np.ndarray = field(repr=False)


def run(n: int = 256, tol: float = 1e-5, max_iters: int = 20000, check: bool = True) -> PoissonResult:
    """Solve on an n x n grid from u = 0 until a pass changes u by less than tol."""
    start = time.perf_counter()
    Solver(source(16))(tol, 4)
    qgraph.sync()
    compile_seconds = time.perf_counter() - start
    f = source(n)
    solver = Solver(f)
    qgraph.sync()
    start = time.perf_counter()
    solver(tol, max_iters)
    sweeps = int(solver.iters.to_numpy()[0])
    seconds = time.perf_counter() - start
    u = solver.u.to_numpy()
    rel = None
    if check:
        want, want_sweeps = numpy_solve(f, tol, max_iters)
        rel = float(np.abs(u - want).max()) / max(float(np.abs(want).max()), 1e-30)
        if want_sweeps != sweeps:  # rounding moved the stopping pass: compare the answers all the same
            print(f"  note: NumPy stopped after {want_sweeps} sweeps, qgraph after {sweeps}")
    return PoissonResult(n, sweeps, float(solver.change.to_numpy()[0]), seconds,
                         sweeps / seconds if seconds > 0 else 0.0, compile_seconds, rel, qgraph.current_arch(), u)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; 1 when the solve did not converge or the NumPy check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(3, "the grid needs an interior"), default=256, help="grid side")
    parser.add_argument("--tol", type=float, default=1e-5, help="stop when a pass changes u by less than this")
    parser.add_argument("--max-iters", type=int_at_least(2), default=20000, help="stop after this many sweeps")
    parser.add_argument("--no-check", action="store_true", help="skip the NumPy reference run")
    args = parser.parse_args(argv)
    r = run(args.n, args.tol, args.max_iters, check=not args.no_check)
    converged = r.change < args.tol
    print(f"Poisson {r.n}x{r.n} on {r.arch}: {'converged' if converged else 'NOT converged'} after {r.sweeps} "
          f"sweeps, last change {r.change:.2e} (tol {args.tol:g})")
    print(f"  {r.seconds:.4f} s, {r.sweeps_per_second:,.0f} sweeps/s (compile/warm-up {r.compile_seconds:.2f} s)")
    ok = r.max_rel_error is None or r.max_rel_error < TOLERANCE
    if r.max_rel_error is not None:
        print(f"  check vs NumPy: max error {r.max_rel_error:.2e} of max |u| {'OK' if ok else 'MISMATCH'}")
    return 0 if converged and ok else 1


if __name__ == "__main__":
    sys.exit(main())
