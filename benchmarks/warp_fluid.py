"""Warp's stable-fluids example beside its qgraph port, frames per second side by side.

    python benchmarks/warp_fluid.py [--frames 20] [--repeat 7] [--check-frames 50] [--json PATH]

Warp's own program (warp/examples/core/example_fluid.py from the installed warp-lang, its
ScopedTimer switched off: it prints every step) against `qgraph.examples.warp_fluid`, the port
written as the docs teach, in one process on one GPU, in interleaved rounds of `--frames`
frames (two substeps each: 6 launches, two memsets and the captured 100-sweep pressure graph per
substep in Warp; one graph launch per frame in qgraph). Rows:
- Warp's example as shipped;
- Warp with a whole frame captured (`wp.ScopedCapture` around `step()`): the emitter's
  direction is frozen at the captured time, so this row is not the same simulation; it is a
  bound on what capturing more would give Warp;
- the qgraph port; and the port with temporal tiling off (`temporal_tiling=False`, one node
  per sweep as Warp's graph), to show where the difference comes from.
Before timing, both programs run `--check-frames` frames from rest and their densities and
velocities are compared (the largest difference relative to the field's largest value), and
the port is checked against its NumPy twin on the same frames.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import qgraph
from qgraph.bench.kernels import warm_up_gpu
from qgraph.examples import warp_fluid
from qgraph.tools.timing import interleaved_spreads


def warp_example():
    """Warp's example module with its per-step timer off, or None without warp-lang."""
    try:
        import warp as wp
        from warp.examples.core import example_fluid
    except ImportError:
        return None, None
    wp.config.quiet = True
    wp.init()
    wp.ScopedTimer.enabled = False
    return wp, example_fluid


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max()) / max(float(np.abs(b).max()), 1e-30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20, help="frames per timed round")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--check-frames", type=int, default=50, help="frames from rest compared before timing")
    parser.add_argument("--json", default=None, help="write the figures there")
    args = parser.parse_args()
    qgraph.init("cuda")
    warm_up_gpu()
    wp, example_fluid = warp_example()
    dt = 1.0 / warp_fluid.FPS / warp_fluid.SUBSTEPS
    report: dict = {"frames": args.frames, "check_frames": args.check_frames, "rows": {}, "checks": {}}

    # the same frames from rest: the port against NumPy, and against Warp's example
    mine, t = warp_fluid.FluidArrays.zeros(), 0.0
    for _ in range(args.check_frames):
        t = mine.frame(t, dt)
    port = warp_fluid.run(frames=args.check_frames, check=True)
    report["checks"]["port vs NumPy (max rel)"] = port.max_rel_error
    if example_fluid is not None:
        ex = example_fluid.Example()
        for _ in range(args.check_frames):
            ex.step()
        wp.synchronize()
        report["checks"]["port vs Warp, density"] = relative_difference(mine.rho0.to_numpy(), ex.rho0.numpy())
        report["checks"]["port vs Warp, velocity"] = relative_difference(mine.u0.to_numpy(), ex.u0.numpy())

    # timed rounds
    untiled = warp_fluid.pressure_solve.variant(temporal_tiling=False)

    @qgraph.graph
    def frame_untiled(u0, u1, rho0, rho1, p0, p1, div, sim_time, dt, iterations: int):
        for _ in range(warp_fluid.SUBSTEPS):
            angle = np.sin(sim_time * 4.0) * 1.5
            warp_fluid.emit(rho0, u0, warp_fluid.RADIUS, np.cos(angle) * warp_fluid.SPEED,
                            np.sin(angle) * warp_fluid.SPEED)
            warp_fluid.integrate(u0, rho0, dt)
            warp_fluid.divergence(u0, div)
            untiled(p0, p1, div, iterations // 2)
            warp_fluid.pressure_apply(p0, u0)
            warp_fluid.advect(u0, u1, rho0, rho1, dt)
            u0, u1, rho0, rho1 = u1, u0, rho1, rho0
            sim_time = sim_time + dt
        return sim_time

    clock = {"port": 0.0, "untiled": 0.0}
    f, g = warp_fluid.FluidArrays.zeros(), warp_fluid.FluidArrays.zeros()

    def port_frames():
        t = clock["port"]
        for _ in range(args.frames):
            t = f.frame(t, dt)
        clock["port"] = t

    def untiled_frames():
        t = clock["untiled"]
        for _ in range(args.frames):
            t = frame_untiled(g.u0, g.u1, g.rho0, g.rho1, g.p0, g.p1, g.div, t, dt, warp_fluid.ITERATIONS)
        clock["untiled"] = t

    rows = {}
    if example_fluid is not None:
        ex = example_fluid.Example()
        whole = example_fluid.Example()
        whole.use_graph_capture = False  # its pressure launches go into the frame's graph (no nested launch)
        whole.step()  # compile its kernels before the capture
        with wp.ScopedCapture() as capture:
            whole.step()
        frame_graph = capture.graph

        def warp_frames():
            for _ in range(args.frames):
                ex.step()

        def warp_captured_frames():
            for _ in range(args.frames):
                wp.capture_launch(frame_graph)
        rows["Warp 1.19 example, as shipped"] = warp_frames
        rows["Warp, whole frame captured (bound)"] = warp_captured_frames
    rows["qgraph port"] = port_frames
    rows["qgraph port, temporal tiling off"] = untiled_frames

    def sync():
        qgraph.sync()
        if wp is not None:
            wp.synchronize()

    spreads = interleaved_spreads(rows, budget=0.05, repeat=args.repeat, sync=sync)
    from qgraph.runtime import STATE

    report["device"] = STATE.target.device.info.name
    report["warp"] = None if wp is None else wp.config.version
    print(f"Warp's example_fluid, {warp_fluid.WIDTH}x{warp_fluid.HEIGHT}, {warp_fluid.SUBSTEPS} substeps of "
          f"{warp_fluid.ITERATIONS} pressure sweeps a frame, on {report['device']}")
    for label, value in report["checks"].items():
        print(f"  check: {label:<28}{value:.2e}")
    base = spreads.get("Warp 1.19 example, as shipped")
    print(f"  {'row':<40}{'us/frame':>10}{'frames/s':>10}{'vs Warp':>9}")
    for label, s in spreads.items():
        per_frame = s.median / args.frames
        speed = "" if base is None else f"{base.median / s.median:8.2f}x"
        print(f"  {label:<40}{per_frame * 1e6:10.1f}{1 / per_frame:10.0f}{speed:>9}")
        report["rows"][label] = {"us_per_frame": per_frame * 1e6, "us_per_frame_min": s.min / args.frames * 1e6,
                                 "us_per_frame_max": s.max / args.frames * 1e6}
    print(f"  qgraph step stats: {warp_fluid.frame.stats}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
