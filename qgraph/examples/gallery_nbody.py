"""Taichi's gallery N-body (taichi/examples/simulation/nbody.py, Taichi 1.7.4) ported to qgraph.

N bodies of unit mass in 2-D (G = 1), all-pairs gravity softened by 1e-5 under the square root,
symplectic Euler with h = 1e-4 in `SUBSTEPS` = 10 substeps a frame; a substep is Taichi's
`compute_force` (clear the forces, then each body sums over all others) and `update`. Written
as Taichi users write it: vec2 arrays, `force[i] += f` inside the inner loop, `(1.0 / r) ** 3`;
a frame's substeps are one `@qgraph.graph` step (one graph launch a frame). On CUDA a small
body count runs each body's sum on several threads (lanes, docs/kernel-language.md), so the
sums add in another order than the CPU's: checked against NumPy within rounding.

    python -m qgraph.examples.gallery_nbody --n 2048 --frames 100
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

G = 1  # gravitational constant
MASS = 1  # unit mass
H = 1e-4  # time step of a frame
SUBSTEPS = 10
GALAXY_SIZE = 0.4
INIT_VEL = 120
TOLERANCE = 1e-3  # on the largest |qgraph - NumPy| of the positions, relative to the largest distance moved
CHECK_FRAMES = 3  # frames the check compares (NumPy's float64 all-pairs frame takes 0.1-1 s)


@qgraph.kernel
def compute_force(pos: qgraph.vec2[:], force: qgraph.vec2[:]):
    for i in range(pos.shape[0]):  # clear force
        force[i] = qgraph.vec2(0.0, 0.0)
    for i in range(pos.shape[0]):  # gravitational force
        p = pos[i]
        for j in range(pos.shape[0]):
            if i != j:
                diff = p - pos[j]
                r = math.sqrt(qgraph.dot(diff, diff) + 1e-5)
                f = -G * MASS * MASS * (1.0 / r) ** 3 * diff  # -(GMm / r^2) * (diff / r)
                force[i] += f


@qgraph.kernel
def update(pos: qgraph.vec2[:], vel: qgraph.vec2[:], force: qgraph.vec2[:], dt: qgraph.f32):
    for i in range(pos.shape[0]):  # symplectic Euler
        vel[i] += dt * force[i] / MASS
        pos[i] += dt * vel[i]


@qgraph.graph
def frame(pos, vel, force, dt):
    """A frame: SUBSTEPS substeps of force and update, as Taichi's main loop calls them."""
    for _ in range(SUBSTEPS):
        compute_force(pos, force)
        update(pos, vel, force, dt)


def initial_state(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Taichi's `initialize` drawn with NumPy: bodies in a ring around (0.5, 0.5), orbiting."""
    rng = np.random.default_rng(seed)
    theta = rng.random(n) * 2 * math.pi
    r = (np.sqrt(rng.random(n)) * 0.6 + 0.4) * GALAXY_SIZE
    offset = r[:, None] * np.stack([np.cos(theta), np.sin(theta)], 1)
    pos = (0.5 + offset).astype(np.float32)
    vel = (np.stack([-offset[:, 1], offset[:, 0]], 1) * INIT_VEL).astype(np.float32)
    return pos, vel


def numpy_frames(pos: np.ndarray, vel: np.ndarray, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """The same frames in NumPy float64 (forces summed exactly as far as float64 goes)."""
    pos, vel = pos.astype(np.float64), vel.astype(np.float64)
    dt = H / SUBSTEPS
    for _ in range(frames * SUBSTEPS):
        d = pos[:, None, :] - pos[None, :, :]
        r = np.sqrt((d * d).sum(-1) + 1e-5)
        np.fill_diagonal(r, np.inf)
        force = (-G * MASS * MASS / r ** 3)[:, :, None] * d
        vel = vel + dt * force.sum(1) / MASS
        pos = pos + dt * vel
    return pos, vel


@dataclass
class NbodyResult:
    n: int
    frames: int
    arch: str
    seconds: float  # the frame loop alone (after a warm-up frame on another state)
    frames_per_second: float
    compile_seconds: float
    max_rel_error: float | None  # after CHECK_FRAMES frames: max |pos - NumPy| / the largest distance moved
    pos: np.ndarray = field(repr=False)


def run(n: int = 2048, frames: int = 100, check: bool = True, seed: int = 0) -> NbodyResult:
    """`frames` frames of n bodies from Taichi's initial ring; with check, its first frames against NumPy."""
    dt = np.float32(H / SUBSTEPS)
    pos0, vel0 = initial_state(n, seed)
    start = time.perf_counter()
    warm = [qgraph.from_numpy(a.copy()) for a in (pos0, vel0, np.zeros_like(pos0))]
    frame(*warm, dt)  # compile and build
    qgraph.sync()
    compile_seconds = time.perf_counter() - start
    pos, vel, force = (qgraph.from_numpy(a.copy()) for a in (pos0, vel0, np.zeros_like(pos0)))
    qgraph.sync()
    start = time.perf_counter()
    for _ in range(frames):
        frame(pos, vel, force, dt)
    qgraph.sync()
    seconds = time.perf_counter() - start
    out = pos.to_numpy()
    rel = None
    if check:  # the first CHECK_FRAMES frames again, against NumPy (an all-pairs float64 frame is slow)
        checked = min(frames, CHECK_FRAMES)
        again = [qgraph.from_numpy(a.copy()) for a in (pos0, vel0, np.zeros_like(pos0))]
        for _ in range(checked):
            frame(*again, dt)
        want, _ = numpy_frames(pos0, vel0, checked)
        moved = max(float(np.abs(want - pos0).max()), 1e-30)
        rel = float(np.abs(again[0].to_numpy() - want).max()) / moved
    return NbodyResult(n, frames, qgraph.current_arch(), seconds, frames / seconds if seconds > 0 else 0.0,
                       compile_seconds, rel, out)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; 1 when the NumPy check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(2), default=2048, help="bodies")
    parser.add_argument("--frames", type=int_at_least(1), default=100, help=f"frames ({SUBSTEPS} substeps each)")
    parser.add_argument("--no-check", action="store_true", help="skip the NumPy reference run")
    args = parser.parse_args(argv)
    r = run(args.n, args.frames, check=not args.no_check)
    print(f"Taichi's gallery N-body, {r.n} bodies on {r.arch}: {r.frames} frames of {SUBSTEPS} substeps")
    print(f"  {r.seconds:.4f} s, {r.frames_per_second:,.1f} frames/s (compile/warm-up {r.compile_seconds:.2f} s)")
    if r.max_rel_error is None:
        return 0
    ok = r.max_rel_error < TOLERANCE
    print(f"  check vs NumPy (float64): max position error {r.max_rel_error:.2e} of the largest distance moved "
          f"(tolerance {TOLERANCE:g}) {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
