"""Recover a heat source from the final temperature of a diffusion run, through a device loop.

A rod starts cold; a source q heats it while it diffuses and cools (a nonlinear loss,
`-beta * u^3`) for a fixed number of steps, written as one kernel with
`for _ in qgraph.repeat(steps):`. Given only the final temperature of a run with an unknown
source, gradient descent on q finds the source: each iteration records the run on a
`qgraph.Tape`, whose backward pass runs the loop's adjoint on the device, recomputing its
passes from checkpoints (the cooling term makes the adjoint read each pass's temperature).

    python -m qgraph.examples.heat_source --n 64 --steps 200 --iterations 60
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np

import qgraph
from qgraph.examples.command_line import int_at_least

ALPHA = 0.2  # diffusion number (stable below 0.5)
DT = 0.05  # time step of the source and the cooling
BETA = 0.5  # cooling coefficient


@qgraph.kernel
def cold(u):
    """The rod at time 0."""
    for i in range(u.shape[0]):
        u[i] = 0.0


@qgraph.kernel
def heat(u, w, q, steps: int, alpha: float, dt: float, beta: float):
    """`steps` explicit steps of diffusion with a source and cubic cooling; the ends stay at 0."""
    for _ in qgraph.repeat(steps):
        for i in range(1, u.shape[0] - 1):
            w[i] = u[i] + alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1]) + dt * (q[i] - beta * u[i] * u[i] * u[i])
        for i in range(1, u.shape[0] - 1):
            u[i] = w[i]


@qgraph.kernel
def misfit(u, target, loss):
    """loss = mean squared difference of the final temperature from the measured one."""
    for i in range(u.shape[0]):
        d = u[i] - target[i]
        loss[0] += d * d / u.shape[0]


@qgraph.kernel
def descend(q, grad, rate: float):
    """One gradient-descent step on the source; the gradient zeroed for the next iteration."""
    for i in range(q.shape[0]):
        q[i] -= rate * grad[i]
        grad[i] = 0.0


@dataclass
class Result:
    arch: str
    n: int
    steps: int
    losses: list[float] = field(default_factory=list)  # the loss before each descent step
    source_error: float = 0.0  # max |q - q_true| / max |q_true| at the end
    checkpoint_bytes: int = 0  # what the tape kept for the loop's gradient


def true_source(n: int) -> np.ndarray:
    """Two smooth bumps: the source to recover."""
    s = np.linspace(0.0, 1.0, n)
    return 4.0 * np.exp(-((s - 0.3) / 0.08) ** 2) + 2.0 * np.exp(-((s - 0.7) / 0.12) ** 2)


def forward(u, w, q, target, loss, steps: int) -> None:
    cold(u)
    cold(w)
    heat(u, w, q, steps, ALPHA, DT, BETA)
    loss.fill(0.0)
    misfit(u, target, loss)


def run(n: int = 64, steps: int = 200, iterations: int = 60, rate: float = 5.0) -> Result:
    """Measure the final temperature of the true source, then fit q to it from q = 0."""
    u, w = qgraph.ndarray(qgraph.f64, (n,)), qgraph.ndarray(qgraph.f64, (n,))
    q = qgraph.from_numpy(true_source(n))
    heat_target = qgraph.ndarray(qgraph.f64, (n,))
    loss = qgraph.ndarray(qgraph.f64, (1,))
    forward(u, w, q, heat_target, loss, steps)  # the measurement
    target = qgraph.from_numpy(u.to_numpy())
    q = qgraph.ndarray(qgraph.f64, (n,), requires_grad=True)
    r = Result(qgraph.current_arch(), n, steps)
    for _ in range(iterations):
        with qgraph.Tape() as tape:
            forward(u, w, q, target, loss, steps)
        r.losses.append(float(loss.to_numpy()[0]))
        tape.backward(loss)
        descend(q, q.grad, rate * n / (steps * DT) ** 2)
        r.checkpoint_bytes = tape.stats.checkpoint_bytes
    truth = true_source(n)
    r.source_error = float(np.abs(q.to_numpy()[1:-1] - truth[1:-1]).max() / np.abs(truth).max())
    return r


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 when the misfit did not fall 100-fold)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(3, "the rod needs an interior point"), default=64,
                        help="points on the rod")
    parser.add_argument("--steps", type=int_at_least(1), default=200, help="diffusion steps per run")
    parser.add_argument("--iterations", type=int_at_least(1), default=60, help="gradient-descent iterations")
    args = parser.parse_args(argv)
    r = run(args.n, args.steps, args.iterations)
    print(f"heat source: {r.n} points on {r.arch}, {r.steps} steps per run in one qgraph.repeat loop")
    for k, value in enumerate(r.losses):
        print(f"  iteration {k:3d}  misfit {value:.6e}")
    print(f"  largest source error {r.source_error:.3f} of the peak; checkpoints kept {r.checkpoint_bytes} bytes")
    ok = r.losses[-1] < 1e-2 * r.losses[0]
    print(f"  {'OK' if ok else 'NOT converged'}: the misfit fell {r.losses[0] / max(r.losses[-1], 1e-300):.3g}-fold")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
