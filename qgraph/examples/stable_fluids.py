"""2-D stable fluids (Stam 1999, after Taichi's stable_fluids demo): a dye plume driven by a jet.

Each step is three kernel calls: `advect` (semi-Lagrangian advection of velocity and dye with
clamped bilinear sampling, the constant jet source, the velocity's divergence), `pressure` (a
fixed number of Jacobi sweeps of the pressure Poisson equation in one `graph_while` call: the
loop runs on the device) and `project` (subtract the pressure gradient). The grid is staggered
(MAC): u on the n+1 vertical faces of each row, v on the n+1 horizontal faces of each column,
dye and pressure at the n x n cell centres; lengths are in cells, the walls are closed. (Taichi's
demo keeps everything at cell centres, where even an exact pressure solve leaves about 40% of
the RMS divergence: central differences cannot see the checkerboard modes; on the MAC grid the
projection's only error is the Jacobi residual.) Checked against a NumPy float32 port of the step.

    python examples/stable_fluids.py --n 128 --steps 100
    python -m qgraph.examples.stable_fluids --n 256 --steps 50 --jacobi 60
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import qgraph
from qgraph.examples.command_line import even_int_at_least, int_at_least
from qgraph.examples.stable_fluids_kernels import advect_scalar, pressure_scalar, project_scalar, sample  # noqa: F401
from qgraph.examples.stable_fluids_vector import Fluid, advect_vector, pressure_vector, project_vector  # noqa: F401
from qgraph.examples.stable_fluids_vector import calls as vector_calls

DT = 0.04
INFLOW_SPEED = 25.0  # the jet's upward velocity, cells per unit time (one cell per step at DT)
JACOBI_ITERS = 30  # pressure sweeps per step (even: the loop runs them in pairs)
TOLERANCE = 1e-4  # on max_rel_error; see main


# Per variant: calls(fluid, dt, inflow, jacobi_iters) -> [(kernel, arguments)] for one step, where
# `fluid` holds the float32 arrays u, u_new (n + 1, n), v, v_new (n, n + 1), dye, dye_new, div, p,
# p_new (n, n) and the int32 iters, flag of shape (1,).
def _scalar_calls(f: Fluid, dt: float, inflow: float, jacobi_iters: int) -> list:
    return [(advect_scalar, (f.u, f.v, f.dye, f.u_new, f.v_new, f.dye_new, f.div, f.iters, dt, inflow)),
            (pressure_scalar, (f.p, f.p_new, f.div, f.iters, f.flag, jacobi_iters)),
            (project_scalar, (f.u, f.v, f.dye, f.u_new, f.v_new, f.dye_new, f.p))]


VARIANTS: dict[str, dict] = {"scalar": {"calls": _scalar_calls}, "vector": {"calls": vector_calls}}


@dataclass
class FluidState:
    u: np.ndarray  # velocity along i on the vertical faces (n + 1, n)
    v: np.ndarray  # velocity along j on the horizontal faces (n, n + 1)
    dye: np.ndarray  # dye concentration at the cell centres (n, n)
    p: np.ndarray  # pressure (n, n), kept between steps: the next solve starts from it


@dataclass
class FluidsResult:
    n: int
    steps: int
    jacobi_iters: int
    variant: str
    seconds: float  # the step loop alone (compilation excluded: see compile_seconds)
    steps_per_second: float
    max_abs_error: float | None  # max |kernel - NumPy| over u, v, dye, p after the same steps; None without check
    max_rel_error: float | None  # per field max |kernel - NumPy| / max |NumPy|, the largest over the fields
    divergence_before: float  # RMS divergence of the last step's advected velocity (before projection)
    divergence_after: float  # RMS divergence of the final, projected velocity
    arch: str
    compile_seconds: float  # the warm-up step on an 8 x 8 grid, which compiles the kernels
    state: FluidState = field(repr=False)  # the final state (NumPy copies)


def initial_state(n: int) -> FluidState:
    """Fluid at rest, no dye, zero pressure (float32)."""
    z = np.zeros
    return FluidState(z((n + 1, n), np.float32), z((n, n + 1), np.float32), z((n, n), np.float32),
                      z((n, n), np.float32))


def _at(q: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    return q[np.clip(i, 0, q.shape[0] - 1), np.clip(j, 0, q.shape[1] - 1)]


def numpy_sample(q: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    fx, fy = np.floor(x), np.floor(y)
    s, t = x - fx, y - fy
    i, j = fx.astype(np.int64), fy.astype(np.int64)
    low = _at(q, i, j) + s * (_at(q, i + 1, j) - _at(q, i, j))
    high = _at(q, i, j + 1) + s * (_at(q, i + 1, j + 1) - _at(q, i, j + 1))
    return low + t * (high - low)


def numpy_divergence(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Net outflow of each cell, (n, n)."""
    return u[1:] - u[:-1] + v[:, 1:] - v[:, :-1]


def numpy_step(s: FluidState, dt: float = DT, inflow: float = INFLOW_SPEED, jacobi_iters: int = JACOBI_ITERS
               ) -> np.ndarray:
    """The same step vectorised with NumPy in float32, in place; returns the divergence before projection."""
    n = s.dye.shape[0]
    dt32, r, jet = np.float32(dt), n // 16 + 1, slice(n // 2 - n // 16 - 1, n // 2 + n // 16 + 1)
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n), indexing="ij")
    vv = np.float32(0.25) * (_at(s.v, i - 1, j) + _at(s.v, i, j) + _at(s.v, i - 1, j + 1) + _at(s.v, i, j + 1))
    u_new = numpy_sample(s.u, i.astype(np.float32) - dt32 * s.u, j.astype(np.float32) - dt32 * vv)
    u_new[0] = u_new[-1] = 0.0
    i, j = np.meshgrid(np.arange(n), np.arange(n + 1), indexing="ij")
    uu = np.float32(0.25) * (_at(s.u, i, j - 1) + _at(s.u, i + 1, j - 1) + _at(s.u, i, j) + _at(s.u, i + 1, j))
    v_new = numpy_sample(s.v, i.astype(np.float32) - dt32 * uu, j.astype(np.float32) - dt32 * s.v)
    v_new[jet, 1:r + 1] = inflow
    v_new[:, 0] = v_new[:, -1] = 0.0
    i, j = np.meshgrid(np.arange(n, dtype=np.float32), np.arange(n, dtype=np.float32), indexing="ij")
    uu, vv = np.float32(0.5) * (s.u[:-1] + s.u[1:]), np.float32(0.5) * (s.v[:, :-1] + s.v[:, 1:])
    dye_new = numpy_sample(s.dye, i - dt32 * uu, j - dt32 * vv)
    dye_new[jet, :r] = 1.0
    div = numpy_divergence(u_new, v_new)
    for _ in range(jacobi_iters):
        pp = np.pad(s.p, 1, mode="edge")  # clamped neighbours
        s.p = np.float32(0.25) * (pp[:-2, 1:-1] + pp[2:, 1:-1] + pp[1:-1, :-2] + pp[1:-1, 2:] - div)
    u_new[1:-1] -= s.p[1:] - s.p[:-1]
    v_new[:, 1:-1] -= s.p[:, 1:] - s.p[:, :-1]
    s.u, s.v, s.dye = u_new, v_new, dye_new
    return div


def numpy_reference(s0: FluidState, steps: int, dt: float = DT, inflow: float = INFLOW_SPEED,
                    jacobi_iters: int = JACOBI_ITERS) -> FluidState:
    s = FluidState(*(a.copy() for a in vars(s0).values()))
    for _ in range(steps):
        numpy_step(s, dt, inflow, jacobi_iters)
    return s


def simulate(s0: FluidState, steps: int, dt: float = DT, inflow: float = INFLOW_SPEED,
             jacobi_iters: int = JACOBI_ITERS, variant: str = "scalar") -> tuple[FluidState, np.ndarray, float]:
    """Run `steps` steps (three kernel calls each): (final state, last divergence before projection, seconds)."""
    if jacobi_iters < 2 or jacobi_iters % 2:
        raise ValueError("jacobi_iters must be even and at least 2 (the sweeps run in pairs)")
    f = device_fluid(s0)
    step = VARIANTS[variant]["calls"](f, dt, inflow, jacobi_iters)
    qgraph.sync()
    start = time.perf_counter()
    for _ in range(steps):
        for kernel, args in step:
            kernel(*args)
    qgraph.sync()
    seconds = time.perf_counter() - start
    return FluidState(f.u.to_numpy(), f.v.to_numpy(), f.dye.to_numpy(), f.p.to_numpy()), f.div.to_numpy(), seconds


def device_fluid(s0: FluidState) -> Fluid:
    """The state's arrays on the device, with the step's work arrays."""
    u, v, dye, p = (qgraph.from_numpy(a) for a in (s0.u, s0.v, s0.dye, s0.p))
    u_new, v_new = qgraph.ndarray(qgraph.f32, s0.u.shape), qgraph.ndarray(qgraph.f32, s0.v.shape)
    dye_new, div, p_new = (qgraph.ndarray(qgraph.f32, s0.p.shape) for _ in range(3))
    return Fluid(u, v, dye, u_new, v_new, dye_new, div, p, p_new, qgraph.ndarray(qgraph.i32, (1,)),
                 qgraph.ndarray(qgraph.i32, (1,)))


def bench_state(n: int) -> Fluid:
    """A fresh n x n state on the device, which every variant's bench_step takes."""
    return device_fluid(initial_state(n))


def bench_step(variant: str, f: Fluid):
    """A callable advancing `f` by one step (three kernel calls) with `variant` (qgraph.bench)."""
    step = VARIANTS[variant]["calls"](f, DT, INFLOW_SPEED, JACOBI_ITERS)

    def advance() -> None:
        for kernel, args in step:
            kernel(*args)
    return advance


def rms(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(a.astype(np.float64) ** 2)))


def run(n: int = 128, steps: int = 100, dt: float = DT, jacobi_iters: int = JACOBI_ITERS, check: bool = True,
        variant: str = "scalar") -> FluidsResult:
    """Run `steps` stable-fluids steps on an n x n grid; with check, against the NumPy port."""
    start = time.perf_counter()
    simulate(initial_state(8), 1, dt, INFLOW_SPEED, 2, variant)  # compile (and capture) on an 8 x 8 grid
    compile_seconds = time.perf_counter() - start

    s0 = initial_state(n)
    s, div, seconds = simulate(s0, steps, dt, INFLOW_SPEED, jacobi_iters, variant)
    abs_err = rel_err = None
    if check:
        ref = numpy_reference(s0, steps, dt, INFLOW_SPEED, jacobi_iters)
        errors = [(float(np.abs(getattr(s, f).astype(np.float64) - getattr(ref, f)).max()),
                   max(float(np.abs(getattr(ref, f)).max()), 1e-30)) for f in ("u", "v", "dye", "p")]
        abs_err, rel_err = max(e for e, _ in errors), max(e / scale for e, scale in errors)
    return FluidsResult(n=n, steps=steps, jacobi_iters=jacobi_iters, variant=variant, seconds=seconds,
                        steps_per_second=steps / seconds if seconds > 0 else 0.0, max_abs_error=abs_err,
                        max_rel_error=rel_err, divergence_before=rms(div),
                        divergence_after=rms(numpy_divergence(s.u, s.v)), arch=qgraph.current_arch(),
                        compile_seconds=compile_seconds, state=s)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 when the NumPy check fails).

    Kernel and NumPy do the same float32 operations in the same order, with no atomics and no
    reductions: on the CPU they agree to the last bit. On the GPU fused multiply-adds round
    differently; advection moves those ulp-sized differences around without growing them
    (bilinear weights are at most 1): 1.7e-6 (n = 128) and 4.6e-6 (n = 512) after 100 steps on an
    H100, hence TOLERANCE = 1e-4 on the error relative to each field's largest value."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(1), default=128, help="grid size (n x n)")
    parser.add_argument("--steps", type=int_at_least(1), default=100, help="time steps (three kernel calls each)")
    parser.add_argument("--dt", type=float, default=DT, help="time step")
    parser.add_argument("--jacobi", type=even_int_at_least(2, "the sweeps run in pairs"), default=JACOBI_ITERS,
                        help="pressure sweeps per step (even)")
    parser.add_argument("--variant", default="scalar", choices=sorted(VARIANTS), help="kernel variant")
    parser.add_argument("--no-check", action="store_true", help="skip the NumPy reference run")
    args = parser.parse_args(argv)

    r = run(n=args.n, steps=args.steps, dt=args.dt, jacobi_iters=args.jacobi, check=not args.no_check,
            variant=args.variant)
    print(f"stable fluids {r.n}x{r.n} on {r.arch} ({r.variant}), {r.steps} steps of dt={args.dt:g}, "
          f"{r.jacobi_iters} Jacobi sweeps each")
    print(f"  {r.seconds:.4f} s, {r.steps_per_second:,.1f} steps/s (compile/warm-up {r.compile_seconds:.2f} s)")
    print(f"  RMS divergence {r.divergence_before:.2e} before projection, {r.divergence_after:.2e} after; "
          f"dye {r.state.dye.sum():.1f} cells")
    if r.max_rel_error is None:
        return 0
    ok = r.max_rel_error < TOLERANCE
    print(f"  check vs NumPy: max abs error {r.max_abs_error:.2e}, max rel error {r.max_rel_error:.2e} "
          f"(tolerance {TOLERANCE:g}) {'OK' if ok else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
