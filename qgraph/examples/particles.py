"""A particle system whose time step is ONE multi-task kernel captured as a CUDA graph.

Shows why `cuda_graph=True` pays: the step is three dependent tasks (forces, integration,
walls), i.e. three GPU kernels; after the first call each step is a single graph replay
instead of three launches. `--variant kernels` writes the same step as three kernels called
by a @qgraph.graph function (the style of Warp and Taichi code): step capture makes it one
graph replay too.

    python examples/particles.py --n 4096 --steps 500
    python examples/particles.py --n 256 --pairwise     # adds O(N^2) short-range repulsion
    python examples/particles.py --variant kernels      # three kernels, one step graph
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import qgraph
from qgraph.examples.command_line import int_at_least

STIFFNESS = 4.0  # spring towards the origin
DRAG = 0.5  # linear drag coefficient
GRAVITY = 9.81  # pulls along -y
BOX = 1.0  # walls at x, y = -BOX and +BOX
REPULSION = 1e-4  # strength of the pairwise repulsion (pairwise runs only)
CUTOFF = 0.1  # pairs further apart than this do not interact


@qgraph.kernel(cuda_graph=True)
def step(pos, vel, force, dt: float, k: float, drag: float, g: float, box: float, repulsion: float, cutoff: float):
    # task 1 (parallel): forces on particle i (unit mass)
    for i in range(pos.shape[0]):
        fx = -k * pos[i, 0] - drag * vel[i, 0]
        fy = -k * pos[i, 1] - drag * vel[i, 1] - g
        if repulsion > 0.0:
            for j in range(pos.shape[0]):  # nested, so serial: each thread sums over all j
                dx = pos[i, 0] - pos[j, 0]
                dy = pos[i, 1] - pos[j, 1]
                r2 = dx * dx + dy * dy
                if j != i and r2 < cutoff * cutoff:
                    s = repulsion / (r2 * math.sqrt(r2) + 1e-9)
                    fx += s * dx
                    fy += s * dy
        force[i, 0] = fx
        force[i, 1] = fy
    # task 2 (parallel): semi-implicit Euler, the new velocity moves the particle
    for i in range(pos.shape[0]):
        vel[i, 0] += dt * force[i, 0]
        vel[i, 1] += dt * force[i, 1]
        pos[i, 0] += dt * vel[i, 0]
        pos[i, 1] += dt * vel[i, 1]
    # task 3 (parallel): reflect particles that crossed a wall and reverse that velocity component
    for i in range(pos.shape[0]):
        for d in range(2):
            if pos[i, d] < -box:
                pos[i, d] = -2.0 * box - pos[i, d]
                vel[i, d] = -vel[i, d]
            elif pos[i, d] > box:
                pos[i, d] = 2.0 * box - pos[i, d]
                vel[i, d] = -vel[i, d]


# the same step as three kernels, captured together by @qgraph.graph
@qgraph.kernel
def forces(pos, vel, force, k: float, drag: float, g: float, repulsion: float, cutoff: float):
    for i in range(pos.shape[0]):
        fx = -k * pos[i, 0] - drag * vel[i, 0]
        fy = -k * pos[i, 1] - drag * vel[i, 1] - g
        if repulsion > 0.0:
            for j in range(pos.shape[0]):
                dx = pos[i, 0] - pos[j, 0]
                dy = pos[i, 1] - pos[j, 1]
                r2 = dx * dx + dy * dy
                if j != i and r2 < cutoff * cutoff:
                    s = repulsion / (r2 * math.sqrt(r2) + 1e-9)
                    fx += s * dx
                    fy += s * dy
        force[i, 0] = fx
        force[i, 1] = fy


@qgraph.kernel
def integrate(pos, vel, force, dt: float):
    for i in range(pos.shape[0]):
        vel[i, 0] += dt * force[i, 0]
        vel[i, 1] += dt * force[i, 1]
        pos[i, 0] += dt * vel[i, 0]
        pos[i, 1] += dt * vel[i, 1]


@qgraph.kernel
def walls(pos, vel, box: float):
    for i in range(pos.shape[0]):
        for d in range(2):
            if pos[i, d] < -box:
                pos[i, d] = -2.0 * box - pos[i, d]
                vel[i, d] = -vel[i, d]
            elif pos[i, d] > box:
                pos[i, d] = 2.0 * box - pos[i, d]
                vel[i, d] = -vel[i, d]


@qgraph.graph
def step_kernels(pos, vel, force, dt: float, k: float, drag: float, g: float, box: float, repulsion: float,
                 cutoff: float):
    forces(pos, vel, force, k, drag, g, repulsion, cutoff)
    integrate(pos, vel, force, dt)
    walls(pos, vel, box)


VARIANTS = {"fused": step, "kernels": step_kernels}


@dataclass
class ParticlesResult:
    n: int
    steps: int
    pairwise: bool
    seconds: float  # the time loop alone (compilation excluded: see compile_seconds)
    steps_per_second: float
    position_error: float | None  # max |pos - pos_numpy| after the same steps; None without check
    velocity_error: float | None
    max_error: float | None  # the larger of the two
    arch: str
    compile_seconds: float  # the warm-up call on 4 particles, which compiles the kernel
    pos: np.ndarray = field(repr=False)  # final positions, shape (n, 2)
    vel: np.ndarray = field(repr=False)


def initial_state(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(-0.9 * BOX, 0.9 * BOX, (n, 2)), rng.normal(0.0, 1.0, (n, 2))


def numpy_reference(pos: np.ndarray, vel: np.ndarray, steps: int, dt: float,
                    repulsion: float) -> tuple[np.ndarray, np.ndarray]:
    """The same step vectorised with NumPy (pairs summed in the kernel's j order)."""
    pos, vel = pos.copy(), vel.copy()
    for _ in range(steps):
        force = -STIFFNESS * pos - DRAG * vel
        force[:, 1] -= GRAVITY
        if repulsion > 0.0:
            for j in range(len(pos)):
                d = pos - pos[j]
                r2 = d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]
                near = (r2 < CUTOFF * CUTOFF) & (np.arange(len(pos)) != j)
                s = repulsion / (r2[near] * np.sqrt(r2[near]) + 1e-9)
                force[near] += s[:, None] * d[near]
        vel += dt * force
        pos += dt * vel
        low, high = pos < -BOX, pos > BOX
        pos = np.where(low, -2.0 * BOX - pos, np.where(high, 2.0 * BOX - pos, pos))
        vel = np.where(low | high, -vel, vel)
    return pos, vel


def simulate(pos0: np.ndarray, vel0: np.ndarray, steps: int, dt: float,
             repulsion: float, variant: str = "fused") -> tuple[np.ndarray, np.ndarray, float]:
    """Run `steps` step calls: (final positions, final velocities, seconds)."""
    pos, vel = qgraph.from_numpy(pos0), qgraph.from_numpy(vel0)
    force = qgraph.ndarray(qgraph.f64, pos0.shape)
    one_step = VARIANTS[variant]
    qgraph.sync()
    start = time.perf_counter()
    for _ in range(steps):
        one_step(pos, vel, force, dt, STIFFNESS, DRAG, GRAVITY, BOX, repulsion, CUTOFF)
    qgraph.sync()
    seconds = time.perf_counter() - start
    return pos.to_numpy(), vel.to_numpy(), seconds


def run(n: int = 1000, steps: int = 200, dt: float = 1e-3, pairwise: bool = False,
        check: bool = True, seed: int = 0, variant: str = "fused") -> ParticlesResult:
    """Step n particles `steps` times; with pairwise, add an O(n^2) short-range repulsion.
    `variant`: "fused" (one three-task kernel) or "kernels" (three kernels, one step graph)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    repulsion = REPULSION if pairwise else 0.0
    start = time.perf_counter()
    simulate(*initial_state(4, seed), 2, dt, repulsion, variant)  # compile (and capture) on 4 particles
    compile_seconds = time.perf_counter() - start

    pos0, vel0 = initial_state(n, seed)
    pos, vel, seconds = simulate(pos0, vel0, steps, dt, repulsion, variant)
    pos_err = vel_err = max_err = None
    if check:
        ref_pos, ref_vel = numpy_reference(pos0, vel0, steps, dt, repulsion)
        pos_err, vel_err = float(np.abs(pos - ref_pos).max()), float(np.abs(vel - ref_vel).max())
        max_err = max(pos_err, vel_err)
    return ParticlesResult(n=n, steps=steps, pairwise=pairwise, seconds=seconds,
                           steps_per_second=steps / seconds if seconds > 0 else 0.0,
                           position_error=pos_err, velocity_error=vel_err, max_error=max_err,
                           arch=qgraph.current_arch(), compile_seconds=compile_seconds, pos=pos, vel=vel)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 when the NumPy check fails)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(1), default=1000, help="number of particles")
    parser.add_argument("--steps", type=int_at_least(1), default=200, help="time steps (one kernel call each)")
    parser.add_argument("--dt", type=float, default=1e-3, help="time step")
    parser.add_argument("--pairwise", action="store_true", help="add O(n^2) short-range repulsion")
    parser.add_argument("--no-check", action="store_true", help="skip the NumPy reference run")
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="fused",
                        help="fused: one three-task kernel; kernels: three kernels in a @qgraph.graph step")
    args = parser.parse_args(argv)

    r = run(n=args.n, steps=args.steps, dt=args.dt, pairwise=args.pairwise, check=not args.no_check,
            variant=args.variant)
    kind = "with pairwise repulsion" if r.pairwise else "independent"
    print(f"particles: {r.n} {kind} on {r.arch}, {r.steps} steps of dt={args.dt:g} ({args.variant})")
    print(f"  {r.seconds:.4f} s, {r.steps_per_second:,.0f} steps/s (compile/warm-up {r.compile_seconds:.2f} s)")
    if r.max_error is None:
        return 0
    ok = r.max_error < 1e-9
    print(f"  check vs NumPy: max abs error {r.max_error:.2e} (positions {r.position_error:.2e}, "
          f"velocities {r.velocity_error:.2e}) {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
