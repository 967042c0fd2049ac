"""MLS-MPM in 88 lines: Taichi's classic "mpm88" fluid demo, one substep as one kernel call.

A block of weakly compressible fluid (8192 particles on a 128 x 128 grid) falls and splashes.
Each substep is one multi-task kernel, captured as a CUDA graph on the GPU: clear the grid,
particle-to-grid (an atomic scatter of momentum and mass, quadratic B-spline weights, APIC),
grid update (momentum to velocity, gravity, walls 3 cells thick), grid-to-particle (new
velocity, affine matrix C and volume ratio J). Checked against a NumPy float32 port of the
same substep, whose scatter is one np.add.at.

    python examples/mpm88.py --n 8192 --steps 500
    python -m qgraph.examples.mpm88 --n 2048 --steps 100
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import qgraph
from qgraph.examples.command_line import int_at_least
from qgraph.examples.mpm88_kernels import (  # noqa: F401 (the constants and kernels are this example's public names)
    APIC,
    BOUND,
    DT,
    DX,
    GRAVITY,
    GRAVITY_DV,
    N_GRID,
    P_MASS,
    P_RHO,
    P_VOL,
    STRESS,
    TOLERANCE,
    VARIANTS,
    E,
    Grid,
    Particles,
    substep_scalar,
    substep_vector,
)


@dataclass
class MPMState:
    x: np.ndarray  # particle positions (n, 2)
    v: np.ndarray  # particle velocities (n, 2)
    C: np.ndarray  # APIC affine velocity matrices (n, 2, 2)
    J: np.ndarray  # volume ratios (n,)
    grid_v: np.ndarray  # grid momentum, then velocity (N_GRID, N_GRID, 2)
    grid_m: np.ndarray  # grid mass (N_GRID, N_GRID)


@dataclass
class MPMResult:
    n: int
    steps: int
    variant: str
    seconds: float  # the substep loop alone (compilation excluded: see compile_seconds)
    steps_per_second: float
    max_abs_error: float | None  # max |kernel - NumPy| over x, v, C, J after the same substeps; None without check
    max_rel_error: float | None  # per field max |kernel - NumPy| / max |NumPy|, the largest over the fields
    arch: str
    compile_seconds: float  # the warm-up substep on 16 particles, which compiles the kernel
    state: MPMState = field(repr=False)  # the final state (NumPy copies)


def initial_state(n: int, seed: int = 0) -> MPMState:
    """n particles uniform in [0.2, 0.6]^2 falling at 1 unit/s, undeformed (J = 1, C = 0); an empty grid."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, 2)) * 0.4 + 0.2).astype(np.float32)
    v = np.zeros((n, 2), np.float32)
    v[:, 1] = -1.0
    return MPMState(x=x, v=v, C=np.zeros((n, 2, 2), np.float32), J=np.ones(n, np.float32),
                    grid_v=np.zeros((N_GRID, N_GRID, 2), np.float32), grid_m=np.zeros((N_GRID, N_GRID), np.float32))


def _stencil(x: np.ndarray):
    """Base node, fractional offset and B-spline weights per axis, as the kernel computes them (float32)."""
    xp = x / np.float32(DX)
    base = (xp - np.float32(0.5)).astype(np.int64)  # int() truncates, as in the kernel
    f = xp - base.astype(np.float32)
    w = [0.5 * (1.5 - f) * (1.5 - f), 0.75 - (f - 1.0) * (f - 1.0), 0.5 * (f - 0.5) * (f - 0.5)]
    return base, f, w


def numpy_substep(s: MPMState) -> None:
    """The same substep vectorised with NumPy in float32, in place. The scatter is one np.add.at over
    (particle, node) pairs in particle-major order: the order of a one-thread run of the kernel."""
    n = len(s.J)
    s.grid_v[...] = 0.0
    s.grid_m[...] = 0.0
    base, f, w = _stencil(s.x)
    stress = np.float32(STRESS) * (s.J - np.float32(1.0))
    a00 = stress + np.float32(P_MASS) * s.C[:, 0, 0]
    a01, a10 = np.float32(P_MASS) * s.C[:, 0, 1], np.float32(P_MASS) * s.C[:, 1, 0]
    a11 = stress + np.float32(P_MASS) * s.C[:, 1, 1]
    mv = np.float32(P_MASS) * s.v
    ii, jj = np.empty((n, 9), np.int64), np.empty((n, 9), np.int64)
    px, py, pm = (np.empty((n, 9), np.float32) for _ in range(3))
    for k, (di, dj) in enumerate((di, dj) for di in range(3) for dj in range(3)):
        dpx, dpy = (di - f[:, 0]) * np.float32(DX), (dj - f[:, 1]) * np.float32(DX)
        weight = w[di][:, 0] * w[dj][:, 1]
        ii[:, k], jj[:, k] = base[:, 0] + di, base[:, 1] + dj
        px[:, k] = weight * (mv[:, 0] + (a00 * dpx + a01 * dpy))
        py[:, k] = weight * (mv[:, 1] + (a10 * dpx + a11 * dpy))
        pm[:, k] = weight * np.float32(P_MASS)
    np.add.at(s.grid_v, (ii.ravel(), jj.ravel(), 0), px.ravel())
    np.add.at(s.grid_v, (ii.ravel(), jj.ravel(), 1), py.ravel())
    np.add.at(s.grid_m, (ii.ravel(), jj.ravel()), pm.ravel())

    g = s.grid_v
    m = s.grid_m[..., None]
    g[...] = np.where(m > 0, g / np.where(m > 0, m, np.float32(1.0)), g)
    g[..., 1] -= np.float32(GRAVITY_DV)
    i = np.arange(N_GRID)
    gx, gy = g[..., 0], g[..., 1]
    gx[((i < BOUND)[:, None] & (gx < 0)) | ((i > N_GRID - BOUND)[:, None] & (gx > 0))] = 0.0
    gy[((i < BOUND)[None, :] & (gy < 0)) | ((i > N_GRID - BOUND)[None, :] & (gy > 0))] = 0.0

    nv = np.zeros((n, 2), np.float32)
    nc = np.zeros((n, 2, 2), np.float32)
    for di in range(3):
        dpx = (di - f[:, 0]) * np.float32(DX)
        for dj in range(3):
            dpy = (dj - f[:, 1]) * np.float32(DX)
            weight = w[di][:, 0] * w[dj][:, 1]
            gv = g[base[:, 0] + di, base[:, 1] + dj]
            nv += weight[:, None] * gv
            aw = np.float32(APIC) * weight
            for a in range(2):
                nc[:, a, 0] += aw * gv[:, a] * dpx
                nc[:, a, 1] += aw * gv[:, a] * dpy
    s.v[...] = nv
    s.x += np.float32(DT) * nv
    s.J *= np.float32(1.0) + np.float32(DT) * (nc[:, 0, 0] + nc[:, 1, 1])
    s.C[...] = nc


def numpy_reference(s0: MPMState, steps: int) -> MPMState:
    s = MPMState(*(a.copy() for a in vars(s0).values()))
    for _ in range(steps):
        numpy_substep(s)
    return s


def simulate(s0: MPMState, steps: int, variant: str = "scalar") -> tuple[MPMState, float]:
    """Run `steps` substeps (one kernel call each): (final state, seconds)."""
    substep = VARIANTS[variant]["substep"]
    arrays = [qgraph.from_numpy(a) for a in vars(s0).values()]
    args = VARIANTS[variant]["args"](*arrays)
    qgraph.sync()
    start = time.perf_counter()
    for _ in range(steps):
        substep(*args)
    qgraph.sync()
    seconds = time.perf_counter() - start
    return MPMState(*(a.to_numpy() for a in arrays)), seconds


def bench_state(n: int) -> list:
    """The device arrays of a fresh n-particle state, which every variant's bench_step takes."""
    return [qgraph.from_numpy(a) for a in vars(initial_state(n)).values()]


def bench_step(variant: str, arrays: list):
    """A callable advancing `arrays` (bench_state) by one substep with `variant` (qgraph.bench).
    The variants compute the same bits, so they may take turns on one state."""
    kernel = VARIANTS[variant]["substep"]
    args = VARIANTS[variant]["args"](*arrays)
    return lambda: kernel(*args)


def compare(s: MPMState, ref: MPMState) -> tuple[float, float]:
    """(max abs error, max relative error) over x, v, C and J.

    C is compared as C * DX, the velocity change across one cell, and relative errors of v and
    C * DX are taken against the largest reference speed: C of a nearly rigid motion is float32
    rounding noise (APIC scales grid velocities by 4 / DX^2), so C's own maximum means nothing."""
    speed = max(float(np.abs(ref.v).max()), 1e-30)
    fields = [(s.x, ref.x, float(np.abs(ref.x).max())), (s.v, ref.v, speed),
              (s.C * np.float32(DX), ref.C * np.float32(DX), speed), (s.J, ref.J, float(np.abs(ref.J).max()))]
    errors = [(float(np.abs(a.astype(np.float64) - b).max()), scale) for a, b, scale in fields]
    return max(e for e, _ in errors), max(e / scale for e, scale in errors)


def run(n: int = 8192, steps: int = 200, check: bool = True, seed: int = 0, variant: str = "scalar") -> MPMResult:
    """Run `steps` MPM substeps of n particles; with check, against the NumPy port."""
    start = time.perf_counter()
    simulate(initial_state(16, seed), 1, variant)  # compile (and capture) on 16 particles
    compile_seconds = time.perf_counter() - start

    s0 = initial_state(n, seed)
    s, seconds = simulate(s0, steps, variant)
    abs_err = rel_err = None
    if check:
        abs_err, rel_err = compare(s, numpy_reference(s0, steps))
    return MPMResult(n=n, steps=steps, variant=variant, seconds=seconds,
                     steps_per_second=steps / seconds if seconds > 0 else 0.0, max_abs_error=abs_err,
                     max_rel_error=rel_err, arch=qgraph.current_arch(), compile_seconds=compile_seconds, state=s)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 when the NumPy check fails).

    The kernel and NumPy differ only in the order of the float32 atomic adds of the scatter (a
    one-thread CPU run matches bit for bit) and, on the GPU, in fused multiply-adds: a few ulp
    per substep (measured after 200 substeps: 1.4e-6 relative on 2 CPU threads, 2.5e-6 on an
    H100). Before the block reaches the floor (about 800 substeps) that stays far below
    TOLERANCE (1e-4 after 1000); after the splash particle paths are chaotic and rounding grows
    to order one, so check runs of a few hundred substeps."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(1), default=8192, help="number of particles")
    parser.add_argument("--steps", type=int_at_least(1), default=200, help="substeps of dt=2e-4 (one kernel call each)")
    parser.add_argument("--variant", default="scalar", choices=sorted(VARIANTS), help="kernel variant")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial positions")
    parser.add_argument("--no-check", action="store_true", help="skip the NumPy reference run")
    args = parser.parse_args(argv)

    r = run(n=args.n, steps=args.steps, check=not args.no_check, seed=args.seed, variant=args.variant)
    print(f"mpm88: {r.n} particles on a {N_GRID}x{N_GRID} grid on {r.arch} ({r.variant}), {r.steps} substeps")
    print(f"  {r.seconds:.4f} s, {r.steps_per_second:,.0f} substeps/s (compile/warm-up {r.compile_seconds:.2f} s)")
    if r.max_rel_error is None:
        return 0
    ok = r.max_rel_error < TOLERANCE
    print(f"  check vs NumPy: max abs error {r.max_abs_error:.2e}, max rel error {r.max_rel_error:.2e} "
          f"(tolerance {TOLERANCE:g}) {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
