"""Unrolled device loops (issue 32), side by side in one process on a CUDA device:

- per iteration of a 1000-iteration loop of 1 and 8 one-block tasks: the raw WHILE node, the
  device loop as chosen and unrolled 2 and 4 times (gated copies), the repeat loop as chosen
  and with one copy per pass (qgraph.bench.gpu_launch.gpu_loop_rows);
- the README's relax (float64 Jacobi with a max change, qgraph.bench.reductions) at 128^2, 512^2
  and 2048^2, U = 1, 2, 4 against the hand-written CUDA C++ WHILE-node solver;
- the stable-fluids pressure solve (100 Jacobi sweeps of a 256 x 256 grid, two per pass of its
  graph_while loop) with U = 1, 2, 4, 8.

    python benchmarks/unroll_loops.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import qgraph
from qgraph.bench.gpu_launch import gpu_loop_rows
from qgraph.bench.kernels import warm_up_gpu
from qgraph.bench.timing import interleaved_spreads

UNROLLS = (1, 2, 4)


def loop_rows(iterations: int, budget: float, repeat: int) -> list[dict]:
    out = []
    for tasks in (1, 8):
        for r in gpu_loop_rows(tasks, iterations, budget, repeat):
            out.append({"section": "loop", "tasks": tasks, "mode": r.mode, "us": r.us, "vs": r.ratio})
    return out


def relax_rows(sizes, iterations: int, budget: float, repeat: int) -> list[dict]:
    from qgraph.bench.reductions import _Hand, _qgraph_module

    mod, hand = _qgraph_module(), _Hand()
    return [row for n in sizes for row in _relax_size(mod, hand, n, iterations, budget, repeat)]


def _relax_size(mod, hand, n: int, iterations: int, budget: float, repeat: int) -> list[dict]:
    u0 = np.zeros((n, n))
    u0[0, :] = 1.0
    u, un = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
    change, flag, it = qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,)), \
        qgraph.ndarray(qgraph.i64, (1,))
    hu, hun = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
    hchange, hit = qgraph.ndarray(qgraph.u64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    hand_solve = hand.relax(hu, hun, hchange, hit, n, 0.0, iterations)
    calls, results = {}, {}

    def hand_call() -> None:
        hit.fill(0)
        hand_solve()

    calls["CUDA C++"] = hand_call
    for unroll in UNROLLS:
        kernel = mod.relax._variant(unroll=unroll)

        def call(kernel=kernel) -> None:
            it.fill(0)
            kernel(u, un, change, flag, it, 0.0, iterations)

        calls[f"qgraph U={unroll}"] = call
    for who, call in calls.items():  # the same sweeps from the same start: the same bits
        (hu if who == "CUDA C++" else u).from_numpy(u0)
        call()
        qgraph.sync()
        results[who] = (hu if who == "CUDA C++" else u).to_numpy()
    spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
    floor = spreads["CUDA C++"].median
    return [{"section": "relax", "n": n, "mode": who, "us": s.median * 1e6 / iterations, "vs": s.median / floor,
             "max_abs_diff": float(np.abs(results[who] - results["CUDA C++"]).max())} for who, s in spreads.items()]


def fluid_rows(n: int, sweeps: int, budget: float, repeat: int) -> list[dict]:
    from qgraph.examples.stable_fluids import bench_state
    from qgraph.examples.stable_fluids_kernels import pressure_scalar

    f = bench_state(n)
    f.div.from_numpy(np.random.default_rng(1).standard_normal((n, n)).astype(np.float32))
    calls, results = {}, {}
    for unroll in (1, 2, 4, 8):
        kernel = pressure_scalar._variant(unroll=unroll)

        def call(kernel=kernel) -> None:
            f.iters.fill(0)
            kernel(f.p, f.p_new, f.div, f.iters, f.flag, sweeps)

        calls[f"U={unroll}"] = call
        f.p.fill(0)
        call()
        qgraph.sync()
        results[unroll] = f.p.to_numpy()
        assert kernel.stats.iterations == (sweeps // 2,), kernel.stats.iterations
    for unroll, value in results.items():
        assert np.array_equal(value, results[1]), f"U={unroll} differs from U=1"
    spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
    floor = spreads["U=1"].median
    return [{"section": "fluids pressure", "n": n, "mode": who, "us": s.median * 1e6, "vs": s.median / floor}
            for who, s in spreads.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    qgraph.init("cuda")
    warm_up_gpu()
    budget, repeat = (0.05, 5) if args.quick else (0.1, 7)
    rows = loop_rows(1000, budget, repeat)
    rows += relax_rows((128, 512, 2048), 200, budget, repeat)
    rows += fluid_rows(256, 100, budget, repeat)
    device = qgraph.runtime.STATE.cuda.info
    print(f"device: {getattr(device, 'name', '?')} cc {device.compute_capability} driver {device.driver_version}")
    for r in rows:
        what = f"{r['section']} {r.get('tasks', r.get('n'))}"
        extra = f"  diff {r['max_abs_diff']:.1e}" if "max_abs_diff" in r else ""
        vs = f"{r['vs']:.3f}" if r["vs"] is not None else "-"
        print(f"{what:<22} {r['mode']:<26} {r['us']:10.2f} us  x{vs}{extra}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
