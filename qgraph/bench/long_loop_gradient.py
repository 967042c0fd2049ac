"""The long run of issue 33: the gradient of 10,000 passes of a nonlinear body on about a million
particles within a 2 GB checkpoint budget, whose all-states tape would not fit in GPU memory.

    python benchmarks/loop_grad.py --long [--n 1048576] [--outer 100] [--inner 100] [--budget-mb 2048]

The drag body `v -= k v |v| dt; x += dt v` (vec3, float32) runs as a repeat loop of `outer` passes
around a repeat loop of `inner` passes: a two-level schedule (each loop's checkpoints every
sqrt(passes), the inner loop recorded again inside each outer pass), about 0.9 GB at a million
particles and 10,000 passes, where one flat loop keeps at least 2 sqrt(k C S) = 3.3 GB (C, S: the
bytes of a checkpoint and of a pass's inputs) and every state 234 GB. Rows: the memory kept and the
all-states tape's bytes, the time of the recording forward pass and of the backward pass, the
gradient of loss = sum(x) with respect to the initial x, v and k. The check: 1,000 passes (10 x 100) under
the same budget against the flat loop with a checkpoint every pass (every state kept).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qgraph

from .loop_gradients import DT, drag_loop, drag_state


@qgraph.kernel(cuda_graph=True)
def drag_nested(x: qgraph.vec3[:], v: qgraph.vec3[:], k: qgraph.f32[:], dt: qgraph.f32, outer: int, inner: int):
    for _ in qgraph.repeat(outer):
        for _ in qgraph.repeat(inner):
            for i in range(x.shape[0]):
                v[i] -= k[0] * v[i] * qgraph.norm(v[i]) * dt
                x[i] += dt * v[i]


def gradient(n: int, outer: int, inner: int, budget: int | None, flat_every: int | None = None) -> dict:
    """The gradient of sum(x) after outer x inner passes from drag_state(n), with its figures:
    the nested kernel under a tape of `budget` bytes, or (`flat_every`) the flat loop with that spacing."""
    x0, v0, k0 = drag_state(n)
    x, v, k = (qgraph.from_numpy(a, requires_grad=True) for a in (x0, v0, k0))
    tape = qgraph.Tape(checkpoint_bytes=budget, checkpoint_every=flat_every)
    qgraph.sync()
    t0 = time.perf_counter()
    with tape:
        if flat_every is None:
            drag_nested(x, v, k, DT, outer, inner)
        else:
            drag_loop(x, v, k, DT, outer * inner)
    qgraph.sync()
    t1 = time.perf_counter()
    tape.backward(grads={x: 1.0})
    grads = {name: a.grad.to_numpy() for name, a in (("x", x), ("v", v), ("k", k))}
    t2 = time.perf_counter()
    return {"forward_s": t1 - t0, "backward_s": t2 - t1, "bytes": tape.stats.checkpoint_bytes, "grads": grads,
            "states_bytes": outer * inner * (x.nbytes + v.nbytes)}


def largest_difference(a: dict, b: dict) -> float:
    """The largest relative difference of two gradients (per array, against its largest element)."""
    return max(float(np.abs(a[n] - b[n]).max() / max(np.abs(b[n]).max(), 1e-30)) for n in a)


def run(n: int, outer: int, inner: int, budget: int, check_outer: int = 10) -> dict:
    """The long run's rows, and the check against the all-states flat loop on check_outer x inner passes."""
    gradient(min(n, 1024), 2, 2, budget)  # compiles both kernels' recordings and adjoints
    gradient(min(n, 1024), 2, 2, None, flat_every=1)
    long = gradient(n, outer, inner, budget)
    short = gradient(n, check_outer, inner, budget)
    reference = gradient(n, check_outer, inner, None, flat_every=1)
    g = long["grads"]
    return {
        "device": qgraph.device_info().name if qgraph.device_info() else qgraph.current_arch(),
        "rows": {
            f"{outer * inner} passes x {n} particles: checkpoint budget (MB)": budget / 2**20,
            "  kept (MB)": long["bytes"] / 2**20,
            "  all states would keep (MB)": long["states_bytes"] / 2**20,
            "  recording forward pass (s)": long["forward_s"],
            "  backward pass (s)": long["backward_s"],
            "  |d sum(x) / d x0| max": float(np.abs(g["x"]).max()),
            "  d sum(x) / d v0, mean": float(g["v"].mean()),
            "  d sum(x) / d k": float(g["k"][0]),
            f"check, {check_outer * inner} passes: budgeted kept (MB)": short["bytes"] / 2**20,
            "  every state kept (MB)": reference["bytes"] / 2**20,
            "  largest relative difference of the gradients": largest_difference(short["grads"], reference["grads"]),
        },
    }


def table(result: dict) -> str:
    lines = [f"\nthe long run of issue 33 on {result['device']}"]
    lines += [f"  {name:58s} {value:12.6g}" for name, value in result["rows"].items()]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true", help="(the switch benchmarks/loop_grad.py passes on)")
    parser.add_argument("--n", type=int, default=2**20)
    parser.add_argument("--outer", type=int, default=100)
    parser.add_argument("--inner", type=int, default=100)
    parser.add_argument("--budget-mb", type=int, default=2048)
    args = parser.parse_args(argv)
    qgraph.init()
    print(table(run(args.n, args.outer, args.inner, args.budget_mb * 2**20)))
