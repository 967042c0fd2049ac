"""Warp's 2-D stable-fluids example (warp/examples/core/example_fluid.py, Warp 1.19) ported to qgraph.

The same grid (256 x 128 cells, a vec2 velocity and a float density at each), the same
substep (an emitter whose direction swings with the time, gravity on the density, the
divergence, 100 Jacobi sweeps of the pressure from zero, the pressure gradient, then
semi-Lagrangian advection of velocity and density) and the same float32 operations in the
same order. Written as the docs teach: one kernel per Warp kernel, the pressure sweeps as a
`qgraph.repeat` loop of two sweeps (Warp swaps p0 and p1 after each of its 100 launches; two
sweeps a pass swap them back), and a frame's two substeps as one traced `@qgraph.graph` step,
so a frame is one graph launch and the changing time costs no Python body run. Checked against
a NumPy float32 port of the same substep; `benchmarks/warp_fluid.py` runs it beside Warp's own.

    python -m qgraph.examples.warp_fluid --frames 100
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

WIDTH, HEIGHT = 256, 128  # Warp's grid_width, grid_height
FPS, SUBSTEPS, ITERATIONS = 60, 2, 100  # Warp's frame rate, sim_substeps, pressure iterations
SPEED, RADIUS = 400.0, 5  # the emitter's speed and radius
TOLERANCE = 1e-3  # on the largest |qgraph - NumPy| over the fields, relative to each field's largest value


@qgraph.func
def lookup_float(f, x, y):
    """f at (x, y), the indices clamped to the grid."""
    return f[qgraph.clamp(x, 0, f.shape[0] - 1), qgraph.clamp(y, 0, f.shape[1] - 1)]


@qgraph.func
def sample_float(f, x, y):
    lx = math.floor(x)
    ly = math.floor(y)
    tx = x - float(lx)
    ty = y - float(ly)
    s0 = lookup_float(f, lx, ly) * (1.0 - tx) + lookup_float(f, lx + 1, ly) * tx
    s1 = lookup_float(f, lx, ly + 1) * (1.0 - tx) + lookup_float(f, lx + 1, ly + 1) * tx
    return s0 * (1.0 - ty) + s1 * ty


@qgraph.func
def lookup_vel(f, x, y):
    """f at (x, y); zero outside the grid."""
    if x < 0 or x >= f.shape[0] or y < 0 or y >= f.shape[1]:
        return qgraph.vec2(0.0, 0.0)
    return f[x, y]


@qgraph.func
def sample_vel(f, x, y):
    lx = math.floor(x)
    ly = math.floor(y)
    tx = x - float(lx)
    ty = y - float(ly)
    s0 = lookup_vel(f, lx, ly) * (1.0 - tx) + lookup_vel(f, lx + 1, ly) * tx
    s1 = lookup_vel(f, lx, ly + 1) * (1.0 - tx) + lookup_vel(f, lx + 1, ly + 1) * tx
    return s0 * (1.0 - ty) + s1 * ty


@qgraph.kernel
def emit(rho: qgraph.f32[:, :], u: qgraph.vec2[:, :], radius: int, vx: qgraph.f32, vy: qgraph.f32):
    for i, j in qgraph.ndrange(rho.shape[0], rho.shape[1]):
        d = qgraph.norm(qgraph.vec2(float(i - rho.shape[0] // 2), float(j - rho.shape[1] // 2)))
        if d < radius:
            rho[i, j] = 1.0
            u[i, j] = qgraph.vec2(vx, vy)


@qgraph.kernel
def integrate(u: qgraph.vec2[:, :], rho: qgraph.f32[:, :], dt: qgraph.f32):
    for i, j in qgraph.ndrange(rho.shape[0], rho.shape[1]):
        u[i, j] = u[i, j] + dt * (qgraph.vec2(-90.8, 0.0) * rho[i, j])  # gravity
        rho[i, j] = rho[i, j] * (1.0 - 0.1 * dt)  # fade


@qgraph.kernel
def divergence(u: qgraph.vec2[:, :], div: qgraph.f32[:, :]):
    for i, j in qgraph.ndrange(div.shape[0] - 1, div.shape[1] - 1):  # Warp returns at the last row and column
        dx = (u[i + 1, j].x - u[i, j].x) * 0.5
        dy = (u[i, j + 1].y - u[i, j].y) * 0.5
        div[i, j] = dx + dy


@qgraph.kernel
def pressure_solve(p0: qgraph.f32[:, :], p1: qgraph.f32[:, :], div: qgraph.f32[:, :], pairs: int):
    for i, j in qgraph.ndrange(p0.shape[0], p0.shape[1]):  # Warp's p0.zero_(), p1.zero_()
        p0[i, j] = 0.0
        p1[i, j] = 0.0
    for _ in qgraph.repeat(pairs):  # Jacobi sweeps p0 -> p1 -> p0
        for i, j in qgraph.ndrange(p0.shape[0], p0.shape[1]):
            p1[i, j] = (p0[max(i - 1, 0), j] + p0[min(i + 1, p0.shape[0] - 1), j] + p0[i, max(j - 1, 0)]
                        + p0[i, min(j + 1, p0.shape[1] - 1)] - div[i, j]) * 0.25
        for i, j in qgraph.ndrange(p0.shape[0], p0.shape[1]):
            p0[i, j] = (p1[max(i - 1, 0), j] + p1[min(i + 1, p0.shape[0] - 1), j] + p1[i, max(j - 1, 0)]
                        + p1[i, min(j + 1, p0.shape[1] - 1)] - div[i, j]) * 0.25


@qgraph.kernel
def pressure_apply(p: qgraph.f32[:, :], u: qgraph.vec2[:, :]):
    for i, j in qgraph.ndrange((1, p.shape[0] - 1), (1, p.shape[1] - 1)):  # the interior
        f_p = qgraph.vec2(p[i + 1, j] - p[i - 1, j], p[i, j + 1] - p[i, j - 1]) * 0.5
        u[i, j] = u[i, j] - f_p


@qgraph.kernel
def advect(u0: qgraph.vec2[:, :], u1: qgraph.vec2[:, :], rho0: qgraph.f32[:, :], rho1: qgraph.f32[:, :],
           dt: qgraph.f32):
    for i, j in qgraph.ndrange(rho0.shape[0], rho0.shape[1]):
        p = qgraph.vec2(float(i), float(j)) - u0[i, j] * dt  # trace backward
        u1[i, j] = sample_vel(u0, p.x, p.y)
        rho1[i, j] = sample_float(rho0, p.x, p.y)


@qgraph.graph
def frame(u0, u1, rho0, rho1, p0, p1, div, sim_time, dt, iterations: int):
    """A frame's substeps as one graph; returns the time after them. Each substep ends with the
    new fields in u1 and rho1, which the next one reads as its u0 and rho0 (Warp's swap)."""
    for _ in range(SUBSTEPS):
        angle = np.sin(sim_time * 4.0) * 1.5
        emit(rho0, u0, RADIUS, np.cos(angle) * SPEED, np.sin(angle) * SPEED)
        integrate(u0, rho0, dt)
        divergence(u0, div)
        pressure_solve(p0, p1, div, iterations // 2)
        pressure_apply(p0, u0)
        advect(u0, u1, rho0, rho1, dt)
        u0, u1, rho0, rho1 = u1, u0, rho1, rho0
        sim_time = sim_time + dt
    return sim_time


@dataclass
class FluidArrays:
    """The example's fields (Warp's Example attributes), u the vec2 velocity, rho the density."""

    u0: object
    u1: object
    rho0: object
    rho1: object
    p0: object
    p1: object
    div: object

    @classmethod
    def zeros(cls, width: int = WIDTH, height: int = HEIGHT) -> FluidArrays:
        vec = [qgraph.ndarray(qgraph.vec2, (width, height)) for _ in range(2)]
        return cls(*vec[:1], vec[1], *(qgraph.ndarray(qgraph.f32, (width, height)) for _ in range(5)))

    def frame(self, sim_time: float, dt: float, iterations: int = ITERATIONS) -> float:
        """Advance one frame (SUBSTEPS substeps); returns the new time. With an odd SUBSTEPS the
        swapped pairs are swapped here too, so u0 and rho0 always hold the current fields."""
        t = frame(self.u0, self.u1, self.rho0, self.rho1, self.p0, self.p1, self.div, sim_time, dt, iterations)
        if SUBSTEPS % 2:
            self.u0, self.u1, self.rho0, self.rho1 = self.u1, self.u0, self.rho1, self.rho0
        return t


# ---------------------------------------------------------------------------------- NumPy port

def _numpy_sample(f: np.ndarray, x: np.ndarray, y: np.ndarray, clamp: bool) -> np.ndarray:
    """Bilinear sampling as sample_float (clamp) and sample_vel (zero outside) do it."""
    lx, ly = np.floor(x).astype(np.int64), np.floor(y).astype(np.int64)
    tx, ty = x - lx.astype(np.float32), y - ly.astype(np.float32)
    one = np.float32(1.0)
    if f.ndim == 3:
        tx, ty = tx[..., None], ty[..., None]

    def at(a, b):
        if clamp:
            return f[np.clip(a, 0, f.shape[0] - 1), np.clip(b, 0, f.shape[1] - 1)]
        inside = (a >= 0) & (a < f.shape[0]) & (b >= 0) & (b < f.shape[1])
        v = f[np.clip(a, 0, f.shape[0] - 1), np.clip(b, 0, f.shape[1] - 1)]
        return np.where(inside[..., None] if f.ndim == 3 else inside, v, np.float32(0.0))

    s0 = at(lx, ly) * (one - tx) + at(lx + 1, ly) * tx
    s1 = at(lx, ly + 1) * (one - tx) + at(lx + 1, ly + 1) * tx
    return s0 * (one - ty) + s1 * ty


def numpy_substep(s: dict, sim_time: float, dt: float, iterations: int = ITERATIONS) -> None:
    """One substep of Warp's example in NumPy float32, in place on s (u0 (w, h, 2), rho0, p0, div)."""
    f32 = np.float32
    w, h = s["rho0"].shape
    i, j = np.meshgrid(np.arange(w), np.arange(h), indexing="ij")
    angle = math.sin(sim_time * 4.0) * 1.5
    d = np.sqrt((i - w // 2).astype(f32) ** 2 + (j - h // 2).astype(f32) ** 2)
    s["rho0"][d < RADIUS] = 1.0
    s["u0"][d < RADIUS] = np.array([math.cos(angle) * SPEED, math.sin(angle) * SPEED], f32)
    dt32 = f32(dt)
    s["u0"][..., 0] += dt32 * (f32(-90.8) * s["rho0"])
    s["u0"][..., 1] += dt32 * (f32(0.0) * s["rho0"])
    s["rho0"] *= f32(1.0) - f32(0.1) * dt32
    u = s["u0"]
    div = s["div"]
    div[:-1, :-1] = (u[1:, :-1, 0] - u[:-1, :-1, 0]) * f32(0.5) + (u[:-1, 1:, 1] - u[:-1, :-1, 1]) * f32(0.5)
    p = np.zeros((w, h), f32)
    for _ in range(iterations):
        pp = np.pad(p, 1, mode="edge")  # the clamped lookups
        p = (pp[:-2, 1:-1] + pp[2:, 1:-1] + pp[1:-1, :-2] + pp[1:-1, 2:] - div) * f32(0.25)
    s["p0"] = p
    u[1:-1, 1:-1, 0] -= (p[2:, 1:-1] - p[:-2, 1:-1]) * f32(0.5)
    u[1:-1, 1:-1, 1] -= (p[1:-1, 2:] - p[1:-1, :-2]) * f32(0.5)
    x, y = i.astype(f32) - u[..., 0] * dt32, j.astype(f32) - u[..., 1] * dt32
    s["u0"], s["rho0"] = _numpy_sample(u, x, y, clamp=False), _numpy_sample(s["rho0"], x, y, clamp=True)


@dataclass
class FluidResult:
    frames: int
    arch: str
    seconds: float  # the frame loop alone, after a warm-up frame that compiles and builds
    frames_per_second: float
    compile_seconds: float
    max_rel_error: float | None  # the largest over u, rho, p of max |qgraph - NumPy| / max |NumPy|; None unchecked
    rho: np.ndarray = field(repr=False)


def run(frames: int = 100, width: int = WIDTH, height: int = HEIGHT, iterations: int = ITERATIONS,
        check: bool = True) -> FluidResult:
    """`frames` frames from rest (after one warm-up frame on another state); with check, against NumPy."""
    dt = 1.0 / FPS / SUBSTEPS
    start = time.perf_counter()
    FluidArrays.zeros(width, height).frame(0.0, dt, iterations)  # compile and build
    qgraph.sync()
    compile_seconds = time.perf_counter() - start
    f, t = FluidArrays.zeros(width, height), 0.0
    qgraph.sync()
    start = time.perf_counter()
    for _ in range(frames):
        t = f.frame(t, dt, iterations)
    qgraph.sync()
    seconds = time.perf_counter() - start
    rho = f.rho0.to_numpy()
    rel = None
    if check:
        s = {"u0": np.zeros((width, height, 2), np.float32), "rho0": np.zeros((width, height), np.float32),
             "div": np.zeros((width, height), np.float32), "p0": None}
        t = 0.0
        for _ in range(frames * SUBSTEPS):
            numpy_substep(s, t, dt, iterations)
            t += dt
        mine = {"u0": f.u0.to_numpy(), "rho0": rho, "p0": f.p0.to_numpy()}
        rel = max(float(np.abs(mine[k].astype(np.float64) - s[k]).max()) / max(float(np.abs(s[k]).max()), 1e-30)
                  for k in mine)
    return FluidResult(frames, qgraph.current_arch(), seconds, frames / seconds if seconds > 0 else 0.0,
                       compile_seconds, rel, rho)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; 1 when the NumPy check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int_at_least(1), default=100, help="frames (two substeps each)")
    parser.add_argument("--width", type=int_at_least(3), default=WIDTH, help="grid cells along i")
    parser.add_argument("--height", type=int_at_least(3), default=HEIGHT, help="grid cells along j")
    parser.add_argument("--iterations", type=int_at_least(2), default=ITERATIONS,
                        help="pressure sweeps per substep (even: two a pass)")
    parser.add_argument("--no-check", action="store_true", help="skip the NumPy reference run")
    args = parser.parse_args(argv)
    if args.iterations % 2:
        parser.error("--iterations must be even (the sweeps run in pairs)")
    r = run(args.frames, args.width, args.height, args.iterations, check=not args.no_check)
    print(f"Warp's example_fluid {args.width}x{args.height} on {r.arch}: {r.frames} frames of {SUBSTEPS} substeps, "
          f"{args.iterations} pressure sweeps each")
    print(f"  {r.seconds:.4f} s, {r.frames_per_second:,.1f} frames/s (compile/warm-up {r.compile_seconds:.2f} s); "
          f"density {r.rho.sum():.1f}")
    if r.max_rel_error is None:
        return 0
    ok = r.max_rel_error < TOLERANCE
    print(f"  check vs NumPy: max rel error {r.max_rel_error:.2e} (tolerance {TOLERANCE:g}) "
          f"{'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
