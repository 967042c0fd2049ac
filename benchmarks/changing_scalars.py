"""Steps whose numbers change every call (the time, a CFL step), captured against fixed ones.

    python benchmarks/changing_scalars.py [--n 4096] [--repeat 7] [--calls 1,8,32,200] [--json PATH]

A simulation step passes the time as a Python float. A `cuda_graph=True` kernel then gets a
node update per task; a `@qgraph.graph` step is traced once and replays new numbers without its
body, through one loader node of a parameter block where many calls read the time (docs/graphs.md,
traced steps). Rows, each a median over interleaved
rounds of back-to-back calls, side by side in one process:
- a `cuda_graph=True` kernel of two tasks: the float fixed, the float changing every call
  (an annotated `dt: qgraph.f32`: the new-numbers fast path), the same with `dt` unannotated
  (a new float takes the general call path), and the kernel launched eagerly; beside them the
  driver's floor on the kernel's own instance, from Python: `cuGraphLaunch` alone, and the node
  update of each node the number lies in plus the launch;
- a `@qgraph.graph` step of K kernel calls (K/2 substeps of two kernels, as in a wave
  equation's step: the second kernel takes the time), K = --calls: `t` fixed, `t` changing,
  and the same calls made eagerly with `t` changing. The ratio changing/fixed is what a new
  number costs; the last column says whether the step replayed its trace (its body not run).
Results are checked against NumPy once per row.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

import qgraph
from qgraph.bench.kernels import module_from_source, warm_up_gpu
from qgraph.tools.timing import interleaved_seconds

SOURCE = """
import math
import qgraph


@qgraph.kernel(cuda_graph=True)
def advance(u, v, dt: qgraph.f32):
    for i in range(u.shape[0]):
        v[i] = v[i] - dt * u[i]
    for i in range(u.shape[0]):
        u[i] = u[i] + dt * v[i]


@qgraph.kernel(cuda_graph=True)
def drive(u, t: qgraph.f32):
    u[0] = math.sin(t)


@qgraph.kernel(cuda_graph=True)
def advance_free(u, v, dt):  # dt unannotated: a new float takes the general call path
    for i in range(u.shape[0]):
        v[i] = v[i] - dt * u[i]
    for i in range(u.shape[0]):
        u[i] = u[i] + dt * v[i]


@qgraph.kernel
def advance_eager(u, v, dt: qgraph.f32):
    for i in range(u.shape[0]):
        v[i] = v[i] - dt * u[i]
    for i in range(u.shape[0]):
        u[i] = u[i] + dt * v[i]


@qgraph.kernel
def drive_eager(u, t: qgraph.f32):
    u[0] = math.sin(t)


def substeps(u, v, t, dt, count):
    for k in range(count):
        advance(u, v, dt)
        drive(u, t + k * dt)


def substeps_eager(u, v, t, dt, count):
    for k in range(count):
        advance_eager(u, v, dt)
        drive_eager(u, t + k * dt)


step = qgraph.graph(substeps)
"""


def _reference(u, v, t, dt, count):
    u, v = u.astype(np.float32), v.astype(np.float32)
    dt32 = np.float32(dt)
    for k in range(count):
        v = (v - dt32 * u).astype(np.float32)
        u = (u + dt32 * v).astype(np.float32)
        u[0] = np.float32(math.sin(np.float32(t + k * dt)))
    return u, v


def _driver_floor(kernel, u, v) -> dict:
    """What a new number costs the driver alone, on the kernel's own graph instance, from Python with
    no qgraph code in between: the raw cuGraphLaunch (a fixed number's floor), and the node update
    of each node the number lies in (cuGraphExecKernelNodeSetParams, new bytes every call) plus the
    launch (a changing number's floor by node updates). Their ratio bounds what any call path that
    updates nodes can reach."""
    import struct

    from qgraph.driver.device import driver

    launcher = kernel.launchers["cuda:0"]
    kernel(u, v, np.float32(1e-9))  # the instance these rows use is the last call's
    graph = launcher.last_runner().graph
    one, other = (u, v, np.float32(1e-9)), (u, v, np.float32(2e-9))
    instance = graph._instances[launcher.resolve(one)[1]]  # noqa: SLF001 (a benchmark's reach, as call_path.py)
    places = graph.number_places(instance, 2, (one, launcher.resolve(one)[1]), (other, launcher.resolve(other)[1]))
    assert places, "the number was found in no node"
    d = driver()
    glaunch, set_params = d.cuGraphLaunch, d.cuGraphExecKernelNodeSetParams
    stream = launcher.device.stream_handle
    values, turn = [struct.pack("<f", 1e-9), struct.pack("<f", 2e-9)], [0]

    def updated_launch():
        turn[0] ^= 1
        for place in places:
            place.data[place.offset:place.offset + 4] = values[turn[0]]
            place.blocks[place.index] = None  # the kernel's own calls set this node again
            set_params(place.exec, place.handle, place.params)
        glaunch(instance.exec, stream)
    return {"driver floor: cuGraphLaunch alone": lambda: glaunch(instance.exec, stream),
            f"driver floor: {len(places)} node updates + launch": updated_launch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--calls", default="2,8,32,200", help="kernel calls per step, comma-separated (even)")
    parser.add_argument("--json", default=None, help="write the figures there")
    args = parser.parse_args()
    qgraph.init("cuda")
    warm_up_gpu()
    m = module_from_source("qgraph_bench_changing", SOURCE)
    rng = np.random.default_rng(1)
    u0, v0 = rng.standard_normal(args.n).astype(np.float32), rng.standard_normal(args.n).astype(np.float32)
    u, v = qgraph.from_numpy(u0), qgraph.from_numpy(v0)
    dt = 1e-3
    report: dict = {"device": None, "kernel": {}, "steps": {}}

    clock = [0.0]

    def ticking(fn):
        def call():
            clock[0] += dt
            fn(clock[0])
        return call

    # one kernel, two tasks
    m.advance(u, v, np.float32(dt))
    ref_u, ref_v = u0 - 0, v0 - 0
    ref_v = (ref_v - np.float32(dt) * ref_u).astype(np.float32)
    ref_u = (ref_u + np.float32(dt) * ref_v).astype(np.float32)
    np.testing.assert_allclose(u.to_numpy(), ref_u, rtol=1e-5, atol=1e-6)
    fixed = np.float32(dt)
    rows = {"graph kernel, dt fixed": lambda: m.advance(u, v, fixed),
            "graph kernel, dt changing": ticking(lambda t: m.advance(u, v, t * 1e-9)),
            "same, dt unannotated (general path)": ticking(lambda t: m.advance_free(u, v, np.float32(t * 1e-9))),
            "eager kernel, dt changing": ticking(lambda t: m.advance_eager(u, v, t * 1e-9))}
    rows.update(_driver_floor(m.advance, u, v))
    before = m.advance.stats.builds
    seconds = interleaved_seconds(rows, budget=0.05, repeat=args.repeat, sync=qgraph.sync)
    assert m.advance.stats.builds == before, "a changing float rebuilt the kernel's graph"
    base = seconds["graph kernel, dt fixed"]
    from qgraph.runtime import STATE

    report["device"] = STATE.target.device.info.name
    print(f"a cuda_graph=True kernel of 2 tasks ({args.n} elements) on {report['device']}: us per call")
    for label, value in seconds.items():
        print(f"  {label:<34}{value * 1e6:8.2f} us   {value / base:5.2f}x dt fixed")
        report["kernel"][label] = value * 1e6

    print("@qgraph.graph steps of K kernel calls (K/2 substeps of advance + drive): us per step")
    print(f"  {'K':>4} {'t fixed':>10} {'t changing':>11} {'eager':>10} {'changing/fixed':>15} {'builds':>7} "
          f"{'traced':>7}")
    for calls in (int(c) for c in args.calls.split(",")):
        count = calls // 2
        u.from_numpy(u0)
        v.from_numpy(v0)
        m.step(u, v, 0.25, dt, count)
        want_u, want_v = _reference(u0, v0, 0.25, dt, count)
        np.testing.assert_allclose(u.to_numpy(), want_u, rtol=1e-4, atol=1e-5)
        builds = m.step.stats.builds
        rows = {"fixed": lambda count=count: m.step(u, v, 0.25, dt, count),
                "changing": ticking(lambda t, count=count: m.step(u, v, t, dt, count)),
                "eager": ticking(lambda t, count=count: m.substeps_eager(u, v, t, dt, count))}
        s = interleaved_seconds(rows, budget=0.05, repeat=args.repeat, sync=qgraph.sync)
        built = m.step.stats.builds - builds
        traced = m.step.stats.traced
        print(f"  {calls:>4} {s['fixed'] * 1e6:10.1f} {s['changing'] * 1e6:11.1f} {s['eager'] * 1e6:10.1f} "
              f"{s['changing'] / s['fixed']:15.2f} {built:>7} {str(traced):>7}")
        report["steps"][str(calls)] = {label: value * 1e6 for label, value in s.items()} | {"builds": built,
                                                                                           "traced": traced}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
