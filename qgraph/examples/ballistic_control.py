"""Aim a particle system by gradient descent: the initial velocities that make it hit a target.

A ballistic simulation with drag, written in place the way simulation code is written
(`v += dt * (g - drag * v); x += dt * v`, one kernel call per step), recorded on a
`qgraph.Tape`; `tape.backward(loss)` gives the gradient of the loss (the mean squared
distance of the final positions to their targets) with respect to the initial velocities,
and a kernel takes one descent step. The update is linear, so the tape copies nothing
(its stats say so). One training iteration is a `@qgraph.graph` step: on CUDA the forward
pass, the backward pass and the update replay as one graph.

    python examples/ballistic_control.py --n 4096 --iterations 30
    python examples/ballistic_control.py --plot loss.png     # the loss curve (needs matplotlib)
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from dataclasses import dataclass, field

import numpy as np

import qgraph
from qgraph.examples.command_line import int_at_least

DT = 0.02  # time step
DRAG = 0.3  # linear drag coefficient
GRAVITY = qgraph.vec3(0.0, 0.0, -9.81)


@qgraph.kernel
def launch(x: qgraph.vec3[:], v: qgraph.vec3[:], x_start: qgraph.vec3[:], v0: qgraph.vec3[:], loss):
    """The state at time 0: start positions and the velocities being optimised; the loss zeroed."""
    loss[0] = 0.0
    for i in range(x.shape[0]):
        x[i] = x_start[i]
        v[i] = v0[i]


@qgraph.kernel
def ballistic(x: qgraph.vec3[:], v: qgraph.vec3[:], g: qgraph.vec3, dt: float, drag: float):
    """One step, in place: semi-implicit Euler with gravity and linear drag."""
    for i in range(x.shape[0]):
        v[i] += dt * (g - drag * v[i])
        x[i] += dt * v[i]


@qgraph.kernel
def distance(x: qgraph.vec3[:], target: qgraph.vec3[:], loss):
    """loss = mean over particles of |x - target|^2."""
    for i in range(x.shape[0]):
        d = x[i] - target[i]
        loss[0] += qgraph.dot(d, d) / x.shape[0]


@qgraph.kernel
def descend(v0: qgraph.vec3[:], grad: qgraph.vec3[:], rate: float):
    """One gradient-descent step on v0; the gradient is zeroed for the next iteration."""
    for i in range(v0.shape[0]):
        v0[i] -= rate * grad[i]
        grad[i] = qgraph.vec3(0.0, 0.0, 0.0)


@qgraph.graph
def train_step(x, v, x_start, v0, target, loss, steps: int, rate: float):
    """Forward pass on a tape, its backward pass, one descent step: one graph replay on CUDA."""
    with qgraph.Tape() as tape:
        launch(x, v, x_start, v0, loss)
        for _ in range(steps):
            ballistic(x, v, GRAVITY, DT, DRAG)
        distance(x, target, loss)
    tape.backward(loss)
    descend(v0, v0.grad, rate)
    return tape.stats


@dataclass
class Result:
    arch: str
    n: int
    steps: int
    losses: list[float] = field(default_factory=list)  # the loss before each descent step
    final_loss: float = 0.0  # after the last step
    seconds: float = 0.0  # the iterations after the first (compile) one
    extra_bytes: int = 0  # what the tape kept beyond the arrays (copies, temporary gradients)
    snapshots: int = 0  # arrays the tape copied (0: the update is linear)


def setup(n: int, seed: int = 0):
    """Start positions on the ground, targets 1-3 units away, velocities to learn (zero at first)."""
    rng = np.random.default_rng(seed)
    x_start = np.zeros((n, 3), np.float32)
    x_start[:, :2] = rng.uniform(-1, 1, (n, 2))
    target = x_start + rng.uniform(1, 3, (n, 3)).astype(np.float32) * np.array([1, 1, 0.5], np.float32)
    return x_start, target


def run(n: int = 256, steps: int = 50, iterations: int = 25, lr: float = 0.25, seed: int = 0) -> Result:
    """Optimise the initial velocities for `iterations` steps of gradient descent. The loss is a
    mean over n particles (each particle's gradient is 1/n of its own), and a velocity moves a
    particle about T = steps * DT times as far: the step is lr * n / T^2, whatever n and T."""
    x_start, target = setup(n, seed)
    x, v = qgraph.ndarray(qgraph.vec3, (n,)), qgraph.ndarray(qgraph.vec3, (n,))
    v0 = qgraph.ndarray(qgraph.vec3, (n,), requires_grad=True)
    loss = qgraph.ndarray(qgraph.f64, (1,))
    x_start, target = qgraph.from_numpy(x_start), qgraph.from_numpy(target)
    r = Result(qgraph.current_arch(), n, steps)
    start = None
    for k in range(iterations + 1):
        if k == 1:
            qgraph.sync()
            start = time.perf_counter()
        if k == iterations:  # the final loss: a forward pass only
            launch(x, v, x_start, v0, loss)
            for _ in range(steps):
                ballistic(x, v, GRAVITY, DT, DRAG)
            distance(x, target, loss)
        else:
            stats = train_step(x, v, x_start, v0, target, loss, steps, lr * n / (steps * DT) ** 2)
        r.losses.append(float(loss.to_numpy()[0]))
    r.seconds = time.perf_counter() - start if start is not None else 0.0
    r.final_loss = r.losses.pop()
    r.extra_bytes, r.snapshots = stats.extra_bytes, stats.snapshots
    return r


def plot(losses: list[float], path: str) -> str:
    """Write the loss curve to `path`; what was done, as one line."""
    if importlib.util.find_spec("matplotlib") is None:
        return f"no plot: matplotlib is not installed (pip install matplotlib), {path} not written"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.semilogy(range(len(losses)), losses, marker="o")
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss (mean squared miss)")
    ax.set_title("ballistic control by gradient descent")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return f"loss plot written to {path}"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status (1 when the loss did not fall 1000-fold)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int_at_least(1), default=256, help="number of particles")
    parser.add_argument("--steps", type=int_at_least(1), default=50, help="simulation steps per forward pass")
    parser.add_argument("--iterations", type=int_at_least(1), default=25, help="gradient-descent iterations")
    parser.add_argument("--lr", type=float, default=0.25, help="learning rate (per particle)")
    parser.add_argument("--plot", metavar="PATH", help="write the loss curve to PATH, a PNG (needs matplotlib); "
                        "no plot without it")
    args = parser.parse_args(argv)

    r = run(n=args.n, steps=args.steps, iterations=args.iterations, lr=args.lr)
    print(f"ballistic control: {r.n} particles on {r.arch}, {r.steps} steps per pass")
    for k, value in enumerate(r.losses):
        print(f"  iteration {k:3d}  loss {value:.6e}")
    print(f"  final loss {r.final_loss:.6e}; {r.seconds / max(len(r.losses) - 1, 1) * 1e3:.2f} ms per iteration; "
          f"tape extra memory {r.extra_bytes} bytes, {r.snapshots} copies")
    if args.plot:
        print(f"  {plot(r.losses + [r.final_loss], args.plot)}")
    ok = r.final_loss < 1e-3 * r.losses[0]
    print(f"  {'OK' if ok else 'NOT converged'}: the loss fell {r.losses[0] / max(r.final_loss, 1e-300):.3g}-fold")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
