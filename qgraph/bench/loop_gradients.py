"""Gradients through device loops (issue 33): the ballistic workload of bench/gradients.py as
one kernel with `for _ in qgraph.repeat(steps):`, and a nonlinear drag simulation whose
gradient keeps checkpoints, at several spacings.

    ballistic, repeat loop: forward                 the repeat kernel and the loss, one @qgraph.graph step
    ballistic, repeat loop: forward + backward      restart, tape, loop, loss, backward: one @qgraph.graph step
                                                    (each with the loop interchanged, qgraph's default: one
                                                    task looping inside; and with interchange=False: a
                                                    loop of launches, WHILE nodes on CUDA)
    drag, every c: forward + backward               `v -= k v |v| dt; x += v dt` for `steps` passes under a
                                                    tape with checkpoint_every=c, then backward (eager calls);
                                                    c = 1, 10, 100 and sqrt(steps); also the backward alone and
                                                    the checkpoints' memory
    drag, every c: JAX forward + backward           jax.grad of lax.scan, an outer scan over jax.checkpoint'ed
                                                    segments of c passes (jit), XLA's temporary memory, and the
                                                    gradient's largest relative difference from qgraph's

    python benchmarks/loop_grad.py [--n 65536] [--steps 200] [--repeats 20] [--no-drag] [--json PATH] [--plot PATH.png]
    python benchmarks/loop_grad.py --plot-from PATH.json [--plot PATH.png]   (plot an earlier run's figures)
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import time

import numpy as np

import qgraph

from .gradients import DRAG, DT, G, Problem, mean_square_distance, median_ms, reference_gradient, restart


def _ballistic(x: qgraph.vec3[:], v: qgraph.vec3[:], g: qgraph.vec3, dt: qgraph.f32, drag: qgraph.f32, steps: int):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] += dt * (g - drag * v[i])
            x[i] += dt * v[i]


ballistic_loop = qgraph.kernel(cuda_graph=True)(_ballistic)  # interchanged: one task, `steps` passes inside
ballistic_launches = qgraph.kernel(cuda_graph=True, interchange=False)(_ballistic)  # a loop of launches


@qgraph.kernel(cuda_graph=True)
def drag_loop(x: qgraph.vec3[:], v: qgraph.vec3[:], k: qgraph.f32[:], dt: qgraph.f32, steps: int):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] -= k[0] * v[i] * qgraph.norm(v[i]) * dt
            x[i] += dt * v[i]


def _steps(kernel):
    """The forward and the forward + backward of the ballistic workload with `kernel`, each one @qgraph.graph step."""

    def forward(x, v, x0, v0, target, loss, steps: int) -> None:
        restart(x, v, x0, v0, loss)
        kernel(x, v, qgraph.vec3(*G), DT, DRAG, steps)
        mean_square_distance(x, target, loss)

    def forward_backward(x, v, x0, v0, target, loss, steps: int) -> None:
        tape = qgraph.Tape()
        with tape:
            forward(x, v, x0, v0, target, loss, steps)
        tape.zero()
        tape.backward(loss)

    return qgraph.graph(forward), qgraph.graph(forward_backward)


forward_step, forward_backward_step = _steps(ballistic_loop)
FORMS = {"": (forward_step, forward_backward_step), ", not interchanged": _steps(ballistic_launches)}


def ballistic_rows(n: int, steps: int, repeats: int) -> dict:
    """Forward and forward + backward with the loop interchanged and not, side by side; the
    gradient's error against the exact one, and whether both forms give the same bits."""
    p = Problem(n, steps)
    rows, found = {}, []
    for form, (forward, forward_backward) in FORMS.items():
        rows[f"ballistic, repeat loop{form}: forward (one graph)"] = median_ms(
            lambda forward=forward: forward(*p.arrays, steps), repeats, qgraph.sync
        )
        rows[f"ballistic, repeat loop{form}: forward + backward (one graph)"] = median_ms(
            lambda forward_backward=forward_backward: forward_backward(*p.arrays, steps), repeats, qgraph.sync
        )
        found.append(p.gradient())
        error = np.abs(found[-1] - reference_gradient(p)).max() / np.abs(reference_gradient(p)).max()
        rows[f"ballistic, repeat loop{form}: gradient's largest relative error"] = float(error)
    rows["ballistic, repeat loop: both forms' gradients the same bits"] = str(np.array_equal(found[0], found[1]))
    return rows


def spacings(steps: int) -> list[int]:
    """The checkpoint spacings of issue 33, in passes: 1, 10, 100 and sqrt(steps) (those <= steps)."""
    return sorted({c for c in (1, 10, 100, math.isqrt(steps)) if 1 <= c <= steps})


def drag_state(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The drag loop's initial x, v (n vec3) and drag coefficient k, shared with JAX's rows."""
    rng = np.random.default_rng(1)
    x0, v0 = (rng.standard_normal((n, 3)).astype(np.float32) for _ in range(2))
    return x0, v0, np.array([0.3], np.float32)


def _time_split(first, second, repeats: int, sync) -> tuple[float, float]:
    """Median milliseconds of `first` and of `second` called in turn, after one warm-up pair."""
    first(), sync(), second(), sync()
    a, b = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        first()
        sync()
        t1 = time.perf_counter()
        second()
        sync()
        a.append(t1 - t0)
        b.append(time.perf_counter() - t1)
    return float(np.median(a)) * 1e3, float(np.median(b)) * 1e3


def drag_rows(n: int, steps: int, repeats: int) -> tuple[dict, list[dict], dict]:
    """The drag loop's rows, its checkpoint figures (one dict per spacing) and the gradient of
    loss = sum(x after `steps` passes) with respect to the initial x, v and k (c = sqrt(steps))."""
    x0, v0, k0 = drag_state(n)
    x, v, k = (qgraph.from_numpy(a, requires_grad=True) for a in (x0, v0, k0))
    forward_only = median_ms(lambda: drag_loop(x, v, k, DT, steps), repeats, qgraph.sync)
    rows = {f"drag, {steps} passes: forward (eager)": forward_only}
    checkpoints = []
    for every in spacings(steps):
        held = []

        def forward(every=every, held=held):
            held[:] = [qgraph.Tape(checkpoint_every=every)]
            with held[0]:
                drag_loop(x, v, k, DT, steps)

        forward_ms, backward_ms = _time_split(
            forward, lambda held=held: held[0].backward(grads={x: 1.0}), max(3, repeats // 4), qgraph.sync
        )
        mb = held[0].stats.checkpoint_bytes / 2**20
        checkpoints.append(
            {
                "every": every,
                "forward_ms": forward_ms,
                "backward_ms": backward_ms,
                "forward_backward_ms": forward_ms + backward_ms,
                "mb_kept": mb,
            }
        )
        rows[f"drag, every {every}: forward + backward"] = forward_ms + backward_ms
        rows[f"drag, every {every}: backward"] = backward_ms
        rows[f"drag, every {every}: MB kept"] = mb
    backward = {p["every"]: p["backward_ms"] for p in checkpoints}
    # issue 33: with c = sqrt(k) the backward costs at most one forward pass more than keeping every state
    rows["drag: backward at every sqrt(k) minus every 1, in forward passes"] = (
        backward[math.isqrt(steps)] - backward[1]
    ) / forward_only
    for a, a0 in ((x, x0), (v, v0), (k, k0)):
        a.from_numpy(a0)
    tape = qgraph.Tape(checkpoint_every=math.isqrt(steps))
    with tape:
        drag_loop(x, v, k, DT, steps)
    tape.zero()
    tape.backward(grads={x: 1.0})
    return rows, checkpoints, {"x": x.grad.to_numpy(), "v": v.grad.to_numpy(), "k": k.grad.to_numpy()}


JAX_ROW = "drag, JAX (jax.grad of lax.scan, jax.checkpoint)"


def jax_drag_rows(n: int, steps: int, repeats: int, ours: dict) -> tuple[dict, list[dict]]:
    """JAX's gradient of the same loss, jit-compiled: for each spacing c, an outer lax.scan over
    segments of c passes whose body (an inner scan) is under jax.checkpoint, so the forward keeps
    one state per segment and the backward recomputes each segment's states (the standard way to
    get sqrt(k) memory in JAX). Forward + backward time, XLA's temporary memory, and the largest
    relative difference of its gradient from qgraph's (`ours`, from drag_rows)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # memory shared with qgraph's arrays
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {JAX_ROW: "skipped: JAX is not installed (pip install 'jax[cuda12]')"}, []

    def one_pass(k, carry, _):
        x, v = carry
        v = v - k[0] * v * jnp.linalg.norm(v, axis=1, keepdims=True) * DT
        return (x + DT * v, v), None

    def loss(x0, v0, k, every):
        step = functools.partial(one_pass, k)
        segments, rest = divmod(steps, every)
        carry = jax.lax.scan(
            jax.checkpoint(lambda c, _: (jax.lax.scan(step, c, None, length=every)[0], None)),
            (x0, v0),
            None,
            length=segments,
        )[0]
        if rest:
            carry = jax.lax.scan(step, carry, None, length=rest)[0]
        return jnp.sum(carry[0])

    args = tuple(jnp.asarray(a) for a in drag_state(n))
    rows, figures, difference = {}, [], 0.0
    for every in spacings(steps):
        # compiled once, ahead of time: the same executable is timed and asked for its memory
        grad = jax.jit(jax.grad(functools.partial(loss, every=every), argnums=(0, 1, 2))).lower(*args).compile()
        ms = median_ms(lambda grad=grad: jax.block_until_ready(grad(*args)), repeats, lambda: None)
        try:
            mb = grad.memory_analysis().temp_size_in_bytes / 2**20
        except Exception:  # not every backend reports it
            mb = None
        theirs = dict(zip("xvk", (np.asarray(g) for g in grad(*args))))
        difference = max(
            difference, max(float(np.abs(ours[a] - theirs[a]).max() / np.abs(theirs[a]).max()) for a in "xvk")
        )
        figures.append({"every": every, "jax_forward_backward_ms": ms, "jax_mb": mb})
        rows[f"drag, every {every}: JAX forward + backward"] = ms
        rows[f"drag, every {every}: JAX MB of temporaries"] = "not reported by this backend" if mb is None else mb
    rows["drag: largest relative difference, qgraph vs JAX gradient"] = difference
    return rows, figures


def plot(result: dict, path: str) -> None:
    """Two panels against the checkpoint spacing c (log-log): time (backward, and forward + backward),
    and memory kept."""
    plt = _pyplot()
    points = sorted(result["checkpoints"], key=lambda p: p["every"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, series, ylabel in (
        (
            left,
            (
                ("backward_ms", "qgraph backward"),
                ("forward_backward_ms", "qgraph forward + backward"),
                ("jax_forward_backward_ms", "JAX forward + backward"),
            ),
            "time (ms)",
        ),
        (right, (("mb_kept", "qgraph checkpoints kept"), ("jax_mb", "JAX temporaries (XLA)")), "memory (MB)"),
    ):
        for key, label in series:
            found = [(p["every"], p[key]) for p in points if p.get(key) is not None]
            if found:
                ax.plot(*zip(*found), marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")  # c = 1 can cost an order of magnitude more than the rest
        ax.set_xticks([p["every"] for p in points], [str(p["every"]) for p in points])
        ax.set_xlabel("passes between checkpoints (c)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    left.set_title("time")
    right.set_title("memory")
    fig.suptitle(
        f"gradient of a drag loop, {result['drag_n']} particles, {result['drag_steps']} passes, {result['device']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _output_path(text: str) -> str:
    """--json's and --plot's path, checked before the run, not after it (as `python -m qgraph bench` does)."""
    folder = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text) or not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"give a file name in an existing directory, not {text}")
    return text


def _plot_path(text: str) -> str:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise argparse.ArgumentTypeError("drawing the plot needs matplotlib: pip install matplotlib") from None
    return _output_path(text)


def _json_run(text: str) -> dict:
    try:
        with open(text) as f:
            return json.load(f) | {"path": text}
    except (OSError, ValueError) as e:
        raise argparse.ArgumentTypeError(f"cannot read the figures of an earlier --json run: {e}") from None


def run(n: int, steps: int, drag_n: int, drag_steps: int, repeats: int, drag: bool = True) -> dict:
    """Every row (ms, MB or a relative difference) and the checkpoint figures, as in the JSON;
    `drag=False` runs the ballistic rows only."""
    rows = {}
    try:
        rows.update(ballistic_rows(n, steps, repeats))
    except Exception as e:  # a row that fails says why, the others still run
        rows["ballistic_rows"] = _failed(e)
    checkpoints = _drag_section(rows, drag_n, drag_steps, repeats) if drag else []
    return {
        "device": _device_name(),
        "n": n,
        "steps": steps,
        "drag_n": drag_n,
        "drag_steps": drag_steps,
        "repeats": repeats,
        "rows": rows,
        "checkpoints": checkpoints,
    }


def _drag_section(rows: dict, drag_n: int, drag_steps: int, repeats: int) -> list[dict]:
    """The drag rows and JAX's into `rows`; the checkpoint figures."""
    checkpoints = []
    try:
        drag, checkpoints, ours = drag_rows(drag_n, drag_steps, repeats)
        rows.update(drag)
        found, theirs = jax_drag_rows(drag_n, drag_steps, repeats, ours)
        rows.update(found)
        by_every = {p["every"]: p for p in checkpoints}
        for p in theirs:
            by_every[p["every"]].update(p)
    except Exception as e:
        rows["drag_rows"] = _failed(e)
    return checkpoints


def table(result: dict) -> str:
    """The rows as text (ms, MB, or a relative difference), under a line naming the workloads."""
    if not result:
        return ""
    drag = any(name.startswith("drag") for name in result["rows"])  # --no-drag: the ballistic rows only
    lines = [
        f"\ngradients through device loops on {result['device']}: ballistic {result['n']} particles x "
        f"{result['steps']} passes"
        + (f", drag {result['drag_n']} x {result['drag_steps']}" if drag else "")
        + " (ms, MB)"
    ]
    lines += [f"  {name:60s} {_figure(value)}" for name, value in result["rows"].items()]
    return "\n".join(lines)


def _figure(value) -> str:
    """A row's value as printed: small figures (relative differences) in exponent form."""
    if not isinstance(value, float):
        return str(value)
    return f"{value:10.3f}" if value == 0 or abs(value) >= 0.01 else f"{value:10.1e}"


def _device_name() -> str:
    info = qgraph.device_info()
    return qgraph.current_arch() if info is None else info.name


def _failed(e: Exception) -> str:
    return f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--drag-n", type=int, default=16384)
    parser.add_argument("--drag-steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-drag", action="store_true", help="only the ballistic rows (no drag loop, no JAX)")
    parser.add_argument("--json", metavar="PATH", type=_output_path, help="write every figure as JSON")
    parser.add_argument("--plot", metavar="PATH", type=_plot_path, help="write the checkpoint plot (PNG)")
    parser.add_argument("--plot-from", metavar="JSON", type=_json_run, help="only plot an earlier --json run")
    args = parser.parse_args(argv)
    if args.plot_from:
        if args.plot is None:  # the PNG beside the JSON
            try:
                args.plot = _plot_path(args.plot_from["path"].removesuffix(".json") + ".png")
            except argparse.ArgumentTypeError as e:
                parser.error(f"argument --plot-from: {e}")
        plot(args.plot_from, args.plot)
        return
    qgraph.init()
    result = run(args.n, args.steps, args.drag_n, args.drag_steps, args.repeats, drag=not args.no_drag)
    print(table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(result, args.plot)
