"""Whole-step capture against the raw graph of the same kernels, side by side in one run.

    python benchmarks/step_capture.py [--n 256] [--repeat 7]

Eight one-task kernels (256 elements: one block each, so a call measures launch and host
overhead). Rows, each a median over interleaved rounds of back-to-back calls:
- the step as 8 separate kernel calls (one graph launch each);
- the step under @qgraph.graph, the 8 calls chained on one array;
- the raw graph of the same 8 chained tasks (hand-written CUDA C++, built with
  cuGraphAddKernelNode and launched with cuGraphLaunch): the floor;
- @qgraph.graph with the 8 calls on 8 arrays (independent: concurrent branches), and the raw
  graph of the same 8 tasks as branches (no edges);
- then the same two steps with tasks that carry work (each element's update repeated --reps
  times, still one block per task): chained against independent.
Results are checked against NumPy.
"""

from __future__ import annotations

import argparse

import numpy as np

import qgraph
from qgraph.bench.kernels import module_from_source, task_constant, warm_up_gpu
from qgraph.tools.timing import interleaved_seconds

TASKS = 8


def _source() -> str:
    lines = ["import qgraph", ""]
    for k in range(TASKS):
        lines += ["@qgraph.kernel(cuda_graph=True)", f"def k{k}(x, n, a: qgraph.f32):", "    for i in range(n):",
                  f"        x[i] = x[i] * a + {task_constant(k)!r}", ""]
    lines += ["@qgraph.graph", "def chained(x, n, a: qgraph.f32):"]
    lines += [f"    k{k}(x, n, a)" for k in range(TASKS)] + [""]
    lines += ["@qgraph.graph", f"def independent({', '.join(f'x{k}' for k in range(TASKS))}, n, a: qgraph.f32):"]
    lines += [f"    k{k}(x{k}, n, a)" for k in range(TASKS)] + [""]
    lines += ["def separate(x, n, a):"] + [f"    k{k}(x, n, a)" for k in range(TASKS)] + [""]
    # the same tasks with work: each element repeats its update `reps` times (still one block)
    for k in range(TASKS):
        lines += ["@qgraph.kernel(cuda_graph=True)", f"def w{k}(x, n, a: qgraph.f32, reps: int):",
                  "    for i in range(n):", "        v = x[i]", "        for _ in range(reps):",
                  f"            v = v * a + {task_constant(k)!r}", "        x[i] = v", ""]
    lines += ["@qgraph.graph", "def work_chained(x, n, a: qgraph.f32, reps: int):"]
    lines += [f"    w{k}(x, n, a, reps)" for k in range(TASKS)] + [""]
    lines += ["@qgraph.graph",
              f"def work_independent({', '.join(f'x{k}' for k in range(TASKS))}, n, a: qgraph.f32, reps: int):"]
    lines += [f"    w{k}(x{k}, n, a, reps)" for k in range(TASKS)] + [""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--reps", type=int, default=4000, help="inner repetitions per element in the work rows")
    args = parser.parse_args()
    qgraph.init("cuda")
    warm_up_gpu()
    module = module_from_source("qgraph_bench_steps", _source())
    n, a = args.n, np.float32(1.0)
    one = qgraph.from_numpy(np.zeros(n, np.float32))
    many = [qgraph.from_numpy(np.zeros(n, np.float32)) for _ in range(TASKS)]
    expected = np.zeros(n, np.float32)
    for k in range(TASKS):
        expected = expected * a + np.float32(task_constant(k))
    for check_x, run in ((one, lambda: module.chained(one, n, a)), (one, lambda: module.separate(one, n, a))):
        check_x.from_numpy(np.zeros(n, np.float32))
        run()
        np.testing.assert_allclose(check_x.to_numpy(), expected, rtol=1e-6)
    module.independent(*many, n, a)
    for k, x in enumerate(many):
        np.testing.assert_allclose(x.to_numpy(), np.float32(task_constant(k)), rtol=1e-6)

    from qgraph.bench.baselines import RawGraphs
    from qgraph.runtime import STATE

    device = STATE.target.device
    raw = RawGraphs(device, many, n, float(a), programmatic=True)
    raw_branches = RawGraphs(device, many, n, float(a), independent=True)
    calls = {"8 separate calls": lambda: module.separate(one, n, a),
             "@qgraph.graph, chained": lambda: module.chained(one, n, a),
             "raw graph, chained (floor)": raw.launch,
             "@qgraph.graph, independent": lambda: module.independent(*many, n, a),
             "raw graph, 8 branches": raw_branches.launch}
    seconds = interleaved_seconds(calls, budget=0.05, repeat=args.repeat, sync=qgraph.sync)
    floor = seconds["raw graph, chained (floor)"]
    print(f"a step of {TASKS} one-task kernels ({n} elements each) on {device.info.name}: us per step")
    for label, value in seconds.items():
        print(f"  {label:<30}{value * 1e6:8.2f} us   {value / floor:5.2f}x the raw chained graph")
    print(f"  stats: chained {module.chained.stats.builds} build(s), waits {module.chained.stats.waits}; "
          f"independent waits {module.independent.stats.waits}")
    # one-block tasks that carry work: what concurrent branches are for
    reps = args.reps
    for x in many:
        x.from_numpy(np.zeros(n, np.float32))
    module.work_independent(*many, n, a, reps)
    for k, x in enumerate(many):
        np.testing.assert_allclose(x.to_numpy(), np.float32(task_constant(k)) * reps, rtol=1e-3)
    work = {"@qgraph.graph, chained": lambda: module.work_chained(one, n, a, reps),
            "@qgraph.graph, independent": lambda: module.work_independent(*many, n, a, reps)}
    seconds = interleaved_seconds(work, budget=0.05, repeat=args.repeat, sync=qgraph.sync)
    chained = seconds["@qgraph.graph, chained"]
    print(f"the same step with work: each element's update repeated {reps} times (one block per task): us per step")
    for label, value in seconds.items():
        print(f"  {label:<30}{value * 1e6:8.2f} us   {value / chained:5.2f}x the chained step")
    print(f"  stats: independent waits {module.work_independent.stats.waits}")


if __name__ == "__main__":
    main()
