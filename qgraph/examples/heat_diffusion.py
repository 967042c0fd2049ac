"""2D heat diffusion stepped to convergence inside one `graph_while` kernel call.

Shows why `graph_while` exists: the whole solver loop (stencil, copy, max-change reduction,
stopping test) runs on the device with no host round trip per step; the host launches once
and reads the result when the loop has stopped.

    python examples/heat_diffusion.py --n 128 --tol 1e-5
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import qgraph
from qgraph.examples.command_line import int_at_least

ALPHA = 0.2  # diffusion number dt*k/h^2; the explicit 5-point scheme is stable up to 0.25


@qgraph.kernel(graph_while="flag")
def diffuse(u, un, change, steps, flag, alpha: float, tol: float, max_steps: int):
    # serial task: reset this step's max |change|
    change[0] = 0.0
    # parallel task: explicit 5-point stencil on the interior (the boundary stays fixed)
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        un[i, j] = u[i, j] + alpha * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j])
    # parallel task: max-reduce the change (a reduction: one atomic per block), copy the field back
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        qgraph.atomic_max(change, 0, abs(un[i, j] - u[i, j]))
        u[i, j] = un[i, j]
    # serial task: count the step and decide whether to go round again
    steps[0] += 1
    flag[0] = 1 if change[0] >= tol and steps[0] < max_steps else 0


@qgraph.kernel(graph_while="flag")
def diffuse_watched(u, un, change, steps, flag, alpha: float, tol: float, max_steps: int):
    """`diffuse` reporting its max change every step (qgraph.report: python -m qgraph demo)."""
    change[0] = 0.0
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        un[i, j] = u[i, j] + alpha * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j])
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        qgraph.atomic_max(change, 0, abs(un[i, j] - u[i, j]))
        u[i, j] = un[i, j]
    steps[0] += 1
    qgraph.report("max change", change[0])
    flag[0] = 1 if change[0] >= tol and steps[0] < max_steps else 0


@dataclass
class HeatResult:
    n: int
    steps: int
    seconds: float  # the solve alone (compilation excluded: see compile_seconds)
    steps_per_second: float
    max_change: float  # max |u_new - u_old| of the last step
    converged: bool  # max_change < tol
    reference_error: float | None  # max |u - u_numpy| after the same number of steps; None without check
    arch: str
    compile_seconds: float  # the warm-up call on a tiny grid, which compiles the kernel
    u: np.ndarray = field(repr=False)  # the final temperature field


def initial_field(n: int) -> np.ndarray:
    """Cold plate (0) with a hot top edge (1); the boundary rows and columns never change."""
    u = np.zeros((n, n))
    u[0, :] = 1.0
    return u


def numpy_reference(u0: np.ndarray, steps: int, alpha: float = ALPHA) -> np.ndarray:
    """The same update, vectorised with NumPy, run for a fixed number of steps."""
    u = u0.copy()
    for _ in range(steps):
        c = u[1:-1, 1:-1]
        u[1:-1, 1:-1] = c + alpha * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c)
    return u


def solve(u0: np.ndarray, tol: float, max_steps: int, progress=None) -> tuple[np.ndarray, int, float, float]:
    """Run the kernel once: (final field, steps, max change of the last step, seconds). With
    `progress` (a kernel call's progress=), `diffuse_watched` runs instead and reports each step."""
    u, un = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
    change, steps = qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    flag = qgraph.ndarray(qgraph.i32, (1,))
    qgraph.sync()
    start = time.perf_counter()
    if progress is None:
        diffuse(u, un, change, steps, flag, ALPHA, tol, max_steps)
    else:
        diffuse_watched(u, un, change, steps, flag, ALPHA, tol, max_steps, progress=progress)
    qgraph.sync()
    seconds = time.perf_counter() - start
    return u.to_numpy(), int(steps.to_numpy()[0]), float(change.to_numpy()[0]), seconds


def run(n: int = 64, tol: float = 1e-4, max_steps: int = 20000, check: bool = True,
        on_step: Callable[[str], None] | None = None, progress=None) -> HeatResult:
    """Diffuse on an n x n grid until the max change per step is below tol (or max_steps).

    `on_step(name)` is called as each stage starts (compiling, solving, checking against NumPy):
    the command line's progress bar follows them. `progress` (see `solve`) watches the solve."""
    if n < 3:
        raise ValueError("n must be at least 3 (an interior is needed)")
    on_step = on_step or (lambda name: None)
    on_step("compiling the heat kernel")
    start = time.perf_counter()
    solve(initial_field(4), tol, 2, progress)  # compile (and cache) the kernel on a tiny grid
    compile_seconds = time.perf_counter() - start

    u0 = initial_field(n)
    on_step(f"solving {n}x{n} to convergence")
    u, steps, max_change, seconds = solve(u0, tol, max_steps, progress)
    if check:
        on_step(f"checking against NumPy ({steps} steps)")
    error = float(np.abs(u - numpy_reference(u0, steps)).max()) if check else None
    return HeatResult(n=n, steps=steps, seconds=seconds, steps_per_second=steps / seconds if seconds > 0 else 0.0,
                      max_change=max_change, converged=max_change < tol, reference_error=error,
                      arch=qgraph.current_arch(), compile_seconds=compile_seconds, u=u)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 when the NumPy check fails)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(3, "the grid needs an interior"), default=64, help="grid size (n x n)")
    parser.add_argument("--tol", type=float, default=1e-4, help="stop when max |change| per step is below this")
    parser.add_argument("--max-steps", type=int_at_least(1), default=20000, help="stop after this many steps")
    parser.add_argument("--no-check", action="store_true", help="skip the NumPy reference run")
    args = parser.parse_args(argv)

    r = run(n=args.n, tol=args.tol, max_steps=args.max_steps, check=not args.no_check)
    status = "converged" if r.converged else "NOT converged (hit --max-steps)"
    print(f"heat diffusion {r.n}x{r.n} on {r.arch}: {status} after {r.steps} steps, "
          f"max change {r.max_change:.3e} (tol {args.tol:g})")
    print(f"  {r.seconds:.4f} s, {r.steps_per_second:,.0f} steps/s (compile/warm-up {r.compile_seconds:.2f} s)")
    if r.reference_error is None:
        return 0
    ok = r.reference_error < 1e-9
    print(f"  check vs NumPy: max abs error {r.reference_error:.2e} {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
