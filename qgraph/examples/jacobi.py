"""Jacobi iteration for a dense, diagonally dominant system A x = b, run to convergence in one call.

Shows an iterative solver as a `graph_while` kernel: each sweep is a parallel loop over rows
(with a serial loop over columns per row), an atomic max-reduction of the update and a serial
stopping test, and the host waits only for the converged answer.

    python examples/jacobi.py --n 500 --tol 1e-10
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import qgraph
from qgraph.examples.command_line import int_at_least


@qgraph.kernel(graph_while="flag")
def jacobi(a, b, x, x_new, update, iters, flag, tol: float, max_iters: int):
    # serial task: reset the reduction
    update[0] = 0.0
    # parallel task, one row per thread: x_new[i] = (b[i] - sum_{j != i} a[i, j] x[j]) / a[i, i]
    for i in range(x.shape[0]):
        s = b[i]
        for j in range(x.shape[0]):  # nested, so serial
            if j != i:
                s -= a[i, j] * x[j]
        x_new[i] = s / a[i, i]
        qgraph.atomic_max(update, 0, abs(x_new[i] - x[i]))
    # parallel task: x <- x_new (after every row has read the old x)
    for i in range(x.shape[0]):
        x[i] = x_new[i]
    # serial task: count the sweep and decide whether to go round again
    iters[0] += 1
    flag[0] = 1 if update[0] >= tol and iters[0] < max_iters else 0


@dataclass
class JacobiResult:
    n: int
    iterations: int
    residual: float  # ||x_k - x_{k-1}||_inf of the last sweep (the stopping criterion)
    true_residual: float  # ||A x - b||_inf, computed on the host
    error: float  # ||x - np.linalg.solve(A, b)||_inf
    converged: bool  # residual < tol
    seconds: float  # the solve alone (compilation excluded: see compile_seconds)
    iterations_per_second: float
    arch: str
    compile_seconds: float  # the warm-up call on a 4 x 4 system, which compiles the kernel
    x: np.ndarray = field(repr=False)


def make_system(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random A >= 0 with a_ii = 1.2 * sum_{j != i} a_ij, and random b.

    Strict diagonal dominance makes Jacobi contract; with non-negative entries its rate is
    close to 1/1.2, so about 100 sweeps reach 1e-8 (random signs would converge in a handful).
    """
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.0, 1.0, (n, n))
    np.fill_diagonal(a, 0.0)
    np.fill_diagonal(a, 1.2 * a.sum(axis=1))
    return a, rng.uniform(-1.0, 1.0, n)


def solve(a_np: np.ndarray, b_np: np.ndarray, tol: float, max_iters: int) -> tuple[np.ndarray, int, float, float]:
    """Run the kernel once from x = 0: (x, iterations, last update norm, seconds)."""
    a, b = qgraph.from_numpy(a_np), qgraph.from_numpy(b_np)
    x, x_new = qgraph.ndarray(qgraph.f64, b_np.shape), qgraph.ndarray(qgraph.f64, b_np.shape)
    update, iters = qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    flag = qgraph.ndarray(qgraph.i32, (1,))
    qgraph.sync()
    start = time.perf_counter()
    jacobi(a, b, x, x_new, update, iters, flag, tol, max_iters)
    qgraph.sync()
    seconds = time.perf_counter() - start
    return x.to_numpy(), int(iters.to_numpy()[0]), float(update.to_numpy()[0]), seconds


def run(n: int = 200, tol: float = 1e-8, max_iters: int = 10000, seed: int = 0) -> JacobiResult:
    """Solve a seeded random n x n system by Jacobi until the update is below tol (or max_iters)."""
    start = time.perf_counter()
    solve(*make_system(4, seed), tol, 2)  # compile (and cache) the kernel on a tiny system
    compile_seconds = time.perf_counter() - start

    a, b = make_system(n, seed)
    x, iterations, residual, seconds = solve(a, b, tol, max_iters)
    return JacobiResult(n=n, iterations=iterations, residual=residual,
                        true_residual=float(np.abs(a @ x - b).max()),
                        error=float(np.abs(x - np.linalg.solve(a, b)).max()), converged=residual < tol,
                        seconds=seconds, iterations_per_second=iterations / seconds if seconds > 0 else 0.0,
                        arch=qgraph.current_arch(), compile_seconds=compile_seconds, x=x)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 when the solve did not converge)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(2, "a 1 x 1 system has no off-diagonal"), default=200,
                        help="system size (n x n)")
    parser.add_argument("--tol", type=float, default=1e-8, help="stop when max |x_k - x_(k-1)| is below this")
    parser.add_argument("--max-iters", type=int_at_least(1), default=10000, help="stop after this many sweeps")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random system")
    args = parser.parse_args(argv)

    r = run(n=args.n, tol=args.tol, max_iters=args.max_iters, seed=args.seed)
    status = "converged" if r.converged else "NOT converged (hit --max-iters)"
    print(f"jacobi {r.n}x{r.n} on {r.arch}: {status} after {r.iterations} iterations, "
          f"update {r.residual:.2e} (tol {args.tol:g})")
    print(f"  {r.seconds:.4f} s, {r.iterations_per_second:,.0f} iterations/s "
          f"(compile/warm-up {r.compile_seconds:.2f} s)")
    print(f"  ||Ax - b||_inf = {r.true_residual:.2e}, error vs np.linalg.solve = {r.error:.2e}")
    return 0 if r.converged else 1


if __name__ == "__main__":
    sys.exit(main())
