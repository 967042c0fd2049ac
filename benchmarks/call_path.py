"""Where a 1-task graph call's host time goes, layer by layer, beside a raw cuGraphLaunch.

    python benchmarks/call_path.py [--calls 20000] [--rounds 9]

Rows (interleaved rounds of back-to-back calls, then one synchronise; median us per call):
the raw graph launch of the kernel's own instantiated graph (`cuGraphLaunch` through
cuda.bindings, the floor); the kernel's replay function with prebuilt arguments (graph
lookup and launch); the launcher's generated launch (resolution, lookup, lock, replay);
the full call `kernel(x, n, a)` (binding and the generation check too). The differences are
what each layer costs.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qgraph
from qgraph.driver.device import driver


@qgraph.kernel(cuda_graph=True)
def one_task(x, n, a: qgraph.f32):
    for i in range(n):
        x[i] = x[i] * a + 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    qgraph.init("cuda")
    x = qgraph.ndarray(np.float32, 256)
    a = np.float32(1.0)
    one_task(x, 256, a)
    qgraph.sync()
    launcher = one_task.launchers["cuda:0"]
    runner = launcher.last_runner()
    stream = launcher.device.stream_handle
    call_args = (x, 256, a)
    p, instance = next(iter(runner.graph._instances.items()))  # the parameter bytes of these arguments
    glaunch = driver().cuGraphLaunch
    exec_ = instance.exec
    launch = launcher.launch
    run = runner.run
    rows = {
        "raw cuGraphLaunch (floor)": lambda: glaunch(exec_, stream),
        "graph replay (lookup + launch)": lambda: run(call_args, p, stream),
        "launcher launch (resolve, lock, replay)": lambda: launch(x, 256, a, None),
        "kernel call": lambda: one_task(x, 256, a),
    }
    times: dict = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            qgraph.sync()
            start = time.perf_counter()
            for _ in range(args.calls):
                fn()
            qgraph.sync()
            times[name].append((time.perf_counter() - start) / args.calls * 1e6)
    floor = np.median(times["raw cuGraphLaunch (floor)"])
    previous = None
    for name, values in times.items():
        median = float(np.median(values))
        step = "" if previous is None else f"  (+{median - previous:.2f})"
        print(f"{name:42s} {median:6.2f} us  {median / floor:5.2f}x{step}")
        previous = median


if __name__ == "__main__":
    main()
