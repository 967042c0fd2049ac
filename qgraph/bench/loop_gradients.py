"""Gradients through device loops (issue 33): the ballistic workload of bench/gradients.py as
one kernel with `for _ in qgraph.repeat(steps):`, and a nonlinear drag simulation whose
gradient keeps checkpoints, at several spacings.

    ballistic, repeat loop: forward                 the repeat kernel and the loss, one @qgraph.graph step
    ballistic, repeat loop: forward + backward      restart, tape, loop, loss, backward: one @qgraph.graph step
    drag, every c: forward + backward               `v -= k v |v| dt; x += v dt` for `steps` passes under a
                                                    tape with checkpoint_every=c, then backward (eager calls)

    python benchmarks/loop_grad.py [--n 65536] [--steps 200] [--repeats 20]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import qgraph

from .gradients import DRAG, DT, G, Problem, _time, mean_square_distance, reference_gradient, restart


@qgraph.kernel(cuda_graph=True)
def ballistic_loop(x: qgraph.vec3[:], v: qgraph.vec3[:], g: qgraph.vec3, dt: qgraph.f32, drag: qgraph.f32, steps: int):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] += dt * (g - drag * v[i])
            x[i] += dt * v[i]


@qgraph.kernel(cuda_graph=True)
def drag_loop(x: qgraph.vec3[:], v: qgraph.vec3[:], k: qgraph.f32[:], dt: qgraph.f32, steps: int):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] -= k[0] * v[i] * qgraph.norm(v[i]) * dt
            x[i] += dt * v[i]


def _forward(x, v, x0, v0, target, loss, steps: int) -> None:
    restart(x, v, x0, v0, loss)
    ballistic_loop(x, v, qgraph.vec3(*G), DT, DRAG, steps)
    mean_square_distance(x, target, loss)


def _forward_backward(x, v, x0, v0, target, loss, steps: int) -> None:
    tape = qgraph.Tape()
    with tape:
        _forward(x, v, x0, v0, target, loss, steps)
    tape.zero()
    tape.backward(loss)


forward_step = qgraph.graph(_forward)
forward_backward_step = qgraph.graph(_forward_backward)


def ballistic_rows(n: int, steps: int, repeats: int) -> dict:
    p = Problem(n, steps)
    rows = {"ballistic, repeat loop: forward (one graph)":
            _time(lambda: forward_step(*p.arrays, steps), repeats, qgraph.sync),
            "ballistic, repeat loop: forward + backward (one graph)":
            _time(lambda: forward_backward_step(*p.arrays, steps), repeats, qgraph.sync)}
    error = np.abs(p.gradient() - reference_gradient(p)).max() / np.abs(reference_gradient(p)).max()
    rows["ballistic, repeat loop: gradient's largest relative error"] = float(error)
    return rows


def drag_rows(n: int, steps: int, repeats: int) -> dict:
    rng = np.random.default_rng(1)
    x = qgraph.from_numpy(rng.standard_normal((n, 3)).astype(np.float32), requires_grad=True)
    v = qgraph.from_numpy(rng.standard_normal((n, 3)).astype(np.float32), requires_grad=True)
    k = qgraph.from_numpy(np.array([0.3], np.float32), requires_grad=True)
    rows = {f"drag, {steps} passes: forward (eager)": _time(lambda: drag_loop(x, v, k, DT, steps), repeats,
                                                            qgraph.sync)}
    kept = [0]
    for every in (1, 10, 100, math.isqrt(steps)):
        def run(every=every, kept=kept):
            tape = qgraph.Tape(checkpoint_every=every)
            with tape:
                drag_loop(x, v, k, DT, steps)
            tape.backward(grads={x: 1.0})
            kept[0] = tape.stats.checkpoint_bytes

        rows[f"drag, every {every}: forward + backward"] = _time(run, max(3, repeats // 4), qgraph.sync)
        rows[f"drag, every {every}: MB kept"] = kept[0] / 2**20
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--drag-n", type=int, default=16384)
    parser.add_argument("--drag-steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    qgraph.init()
    rows = {}
    for fn, a in ((ballistic_rows, (args.n, args.steps)), (drag_rows, (args.drag_n, args.drag_steps))):
        try:
            rows.update(fn(*a, args.repeats))
        except Exception as e:  # a row that fails says why, the others still run
            rows[fn.__name__] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    device = qgraph.current_arch()
    print(f"device: {device}")
    for name, value in rows.items():
        print(f"  {name:60s} {value:10.3f}" if isinstance(value, float) else f"  {name:60s} {value}")
