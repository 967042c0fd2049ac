"""Unrolled device loops (issue 32), side by side in one process on a CUDA device:

- per iteration of a 1000-iteration loop of 1 and 8 one-block tasks: the raw WHILE node, the
  device loop as chosen and unrolled 2 and 4 times (gated copies), the repeat loop as chosen
  and with one copy per pass (qgraph.bench.gpu_launch.gpu_loop_rows); the flag loop with U = 1,
  2, 4, chosen as built (the flag's serial task does the gate's work between copies) and with a
  gate kernel before each copy (graph_unroll.FOLD_GATES off), and with an IF node per copy;
- the README's relax (float64 Jacobi with a max change, qgraph.bench.reductions) at 128^2, 512^2
  and 2048^2, U = 1, 2, 4, chosen, 16 (and U = 4, chosen with gate kernels) against the hand-written
  CUDA C++ WHILE-node solver;
- the stable-fluids pressure solve of a substep (100 Jacobi sweeps of a 256 x 128 grid, as in
  Warp's example): the example's graph_while loop (two sweeps per pass, U = 1, chosen) and the same
  sweeps as `qgraph.repeat(50)` (chosen: temporally tiled; untiled, 100 nodes in a straight line; the
  WHILE form with the U it would choose, 16; and U = 1), against the same sweeps in hand-written CUDA
  C++ captured as one graph of 100 kernel nodes (qgraph.bench.fluids_pressure: programmatic edges,
  and as variants plain edges, an early launch of each successor (at the entry, or after the wait:
  at most one grid waiting ahead), and two diagnostics of the gap
  to qgraph's task: plain loads instead of ld.global.nc, and those with qgraph's 256-byte
  parameter block instead of 32 bytes; and qgraph's repeat form with every node's launch_dependents
  twin, which compiler.cuda_program.TRIGGER_BLOCKS keeps for grids of at most 8 blocks); and the
  repeat temporally tiled (lang.cuda.tiling: S chosen, S = 2 to 5, 16x64 blocks, the WHILE form),
  also on a 2048 x 2048 grid (where graph_unroll.MAX_TILED_WAVES leaves it untiled: "forced" rows
  lift it);
- short repeat loops (k x tasks = graph_unroll.MAX_STRAIGHT_NODES one-block tasks): built as a
  straight line (chosen), the WHILE form with the U it would choose, and U = 1, with each form's
  graph build time.

    python benchmarks/unroll_loops.py [--quick] [--fluids] [--repeats] [--loops] [--json PATH]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import qgraph
from qgraph.bench.gpu_launch import gpu_loop_rows
from qgraph.bench.kernels import warm_up_gpu
from qgraph.tools.timing import interleaved_spreads

UNROLLS = (1, 2, 4, None)  # None: chosen


def flag_loop_rows(tasks: int, iterations: int, budget: float, repeat: int) -> list[dict]:
    """The flag loop of `tasks` one-block tasks and the flag's serial task, U = 1, 2, 4 and chosen: as built
    (the flag's task does the gate's work between copies: graph_unroll.FOLD_GATES), with a gate kernel
    before each copy instead (as until issue 32's gate folding), and for 1 task with an IF node guarding
    each copy instead of gated task variants (PREDICATE_TASKS off)."""
    from qgraph.bench.kernels import kernels_for
    from qgraph.graphs import unroll as graph_unroll

    module = kernels_for(tasks)
    x = [qgraph.ndarray(qgraph.f32, (256,)) for _ in range(tasks)]
    counter, flag = qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    kernels = {}
    for form in ("", ", gate kernel"):
        kernels.update({f"U={u or 'chosen'}{form}": module.loop.variant(cuda_graph=True, unroll=u)
                        for u in (1, 2, 4, None) if u != 1 or not form})
    if tasks == 1:
        kernels.update({f"U={u}, IF node per copy": module.loop.variant(cuda_graph=True, unroll=u) for u in (2, 4)})
    calls = {}
    for who, kernel in kernels.items():
        def call(kernel=kernel) -> None:
            counter.fill(iterations)
            kernel(*x, counter, flag, 256, 1.0)

        graph_unroll.PREDICATE_TASKS = "IF" not in who  # the graph is built by the first call
        graph_unroll.FOLD_GATES = "gate kernel" not in who
        try:
            call()
            qgraph.sync()
        finally:
            graph_unroll.PREDICATE_TASKS = graph_unroll.FOLD_GATES = True
        assert kernel.stats.iterations == (iterations,)
        calls[who] = call
    spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
    floor = spreads["U=1"].median
    return [{"section": f"flag loop {tasks}", "mode": who, "us": s.median * 1e6 / iterations, "vs": s.median / floor,
             "nodes": kernels[who].stats.graph_nodes} for who, s in spreads.items()]


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
    from qgraph.graphs import unroll as graph_unroll

    u0 = np.zeros((n, n))
    u0[0, :] = 1.0
    u, un = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
    change, flag, it = qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,)), \
        qgraph.ndarray(qgraph.i64, (1,))
    hu, hun = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
    hchange, hit = qgraph.ndarray(qgraph.u64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    # tol -1: the cap decides (tol 0 ended the solves early once the repeated solves, which start from where
    # the last one ended, had converged u to a fixed point: at 128^2 within the timed rounds)
    hand_solve = hand.relax(hu, hun, hchange, hit, n, -1.0, iterations)
    calls, results = {}, {}

    def hand_call() -> None:
        hit.fill(0)
        hand_solve()

    calls["CUDA C++"] = hand_call
    forms = [(unroll, "") for unroll in UNROLLS + (16,)] + [(4, ", gate kernel"), (None, ", gate kernel")]
    for unroll, form in forms:
        kernel = mod.relax.variant(unroll=unroll)

        def call(kernel=kernel) -> None:
            it.fill(0)
            kernel(u, un, change, flag, it, -1.0, iterations)

        calls[f"qgraph U={unroll or 'chosen'}{form}"] = call
    for who, call in calls.items():  # the same sweeps from the same start: the same bits
        (hu if who == "CUDA C++" else u).from_numpy(u0)
        graph_unroll.FOLD_GATES = "gate kernel" not in who  # the graph is built by the first call
        try:
            call()
            qgraph.sync()
        finally:
            graph_unroll.FOLD_GATES = True
        results[who] = (hu if who == "CUDA C++" else u).to_numpy()
    spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
    floor = spreads["CUDA C++"].median
    return [{"section": "relax", "n": n, "mode": who, "us": s.median * 1e6 / iterations, "vs": s.median / floor,
             "max_abs_diff": float(np.abs(results[who] - results["CUDA C++"]).max())} for who, s in spreads.items()]


def short_repeat_rows(budget: float, repeat: int) -> list[dict]:
    """Repeats of 1 and 8 one-block tasks whose k x tasks is the straight-line threshold, per pass:
    the straight line (U chosen), the WHILE form with the chosen U (unroll= set), and U = 1."""
    from qgraph.bench.kernels import kernels_for
    from qgraph.graphs.unroll import MAX_STRAIGHT_NODES, unroll_factor

    out = []
    for tasks in (1, 8):
        module, k = kernels_for(tasks), MAX_STRAIGHT_NODES // tasks
        arrays = [qgraph.ndarray(qgraph.f32, (256,)) for _ in range(tasks)]
        u = unroll_factor(module.repeat.source.body.children[0], None)
        forms = {"straight line (chosen)": module.repeat.variant(cuda_graph=True),
                 f"WHILE form, U={u} (the chosen U)": module.repeat.variant(cuda_graph=True, unroll=u),
                 "WHILE form, U=1": module.repeat.variant(cuda_graph=True, unroll=1)}
        calls, builds = {}, {}
        for who, kernel in forms.items():
            calls[who] = lambda kernel=kernel, arrays=arrays, k=k: kernel(*arrays, k, 256, 1.0)
            calls[who]()
            qgraph.sync()
            assert kernel.stats.iterations == (k,) and kernel.stats.builds == 1
            builds[who] = kernel.stats.build_seconds * 1e3
        spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
        floor = spreads[f"WHILE form, U={u} (the chosen U)"].median
        out += [{"section": f"repeat({k})", "tasks": tasks, "mode": who, "us": s.median * 1e6 / k,
                 "vs": s.median / floor, "build_ms": builds[who]} for who, s in spreads.items()]
    return out


@qgraph.kernel
def pressure_repeat(p, p_new, div, pairs: int):
    """The stable-fluids pressure solve as the docs teach a fixed count: `pairs` passes of the same
    two Jacobi sweeps as qgraph.examples.stable_fluids_kernels.pressure_scalar."""
    for _ in qgraph.repeat(pairs):
        for i, j in qgraph.ndrange(p.shape[0], p.shape[1]):
            pl = p[max(i - 1, 0), j]
            pr = p[min(i + 1, p.shape[0] - 1), j]
            pb = p[i, max(j - 1, 0)]
            pt = p[i, min(j + 1, p.shape[1] - 1)]
            p_new[i, j] = 0.25 * (pl + pr + pb + pt - div[i, j])
        for i, j in qgraph.ndrange(p.shape[0], p.shape[1]):
            pl = p_new[max(i - 1, 0), j]
            pr = p_new[min(i + 1, p.shape[0] - 1), j]
            pb = p_new[i, max(j - 1, 0)]
            pt = p_new[i, min(j + 1, p.shape[1] - 1)]
            p[i, j] = 0.25 * (pl + pr + pb + pt - div[i, j])


def fluid_rows(shape: tuple[int, int], sweeps: int, budget: float, repeat: int, every: bool = True) -> list[dict]:
    """The pressure solve of a stable-fluids substep: the example's graph_while loop (U = 1, chosen)
    and the same sweeps as a repeat loop (chosen: temporally tiled where its tiles fit a wave, S
    passes per launch; untiled: a straight line; tiled with S = 2 to 5 and another block; the WHILE
    form; U = 1), every variant the same bits, against the hand-written CUDA C++ graph of `sweeps`
    nodes (the issue's baseline).
    `every=False`: the baseline, the graph_while loop and the repeat's chosen, untiled and S rows only."""
    from qgraph.compiler import cuda_program
    from qgraph.examples.stable_fluids_kernels import pressure_scalar
    from qgraph.graphs import unroll as graph_unroll
    from qgraph.lang.cuda import tiling

    trigger_blocks = cuda_program.TRIGGER_BLOCKS
    regions, waves = tiling.REGIONS, graph_unroll.MAX_TILED_WAVES

    p, p_new, div = (qgraph.ndarray(qgraph.f32, shape) for _ in range(3))
    div.from_numpy(np.random.default_rng(1).standard_normal(shape).astype(np.float32))
    iters, flag = qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    unrolls = (1, None) if every else (None,)
    variants = {f"graph_while U={u or 'chosen'}": pressure_scalar.variant(unroll=u) for u in unrolls}
    from qgraph.graphs.unroll import unroll_factor

    u = unroll_factor(pressure_repeat.source.body.children[0], None)  # what the WHILE form would choose
    plain = pressure_repeat.variant(temporal_tiling=False)  # untiled
    chosen = pressure_repeat  # the default: tiled where the grid's tiles fit a wave, decided per grid
    repeats = {TILED: chosen, UNTILED: plain}
    forced = "" if every else ", forced"  # a large grid: tiled although its tiles exceed MAX_TILED_WAVES
    repeats.update({f"repeat, tiled S={s}{forced}": pressure_repeat.variant(temporal_tiling=s) for s in (2, 3, 4, 5)})
    if every:
        repeats.update({OTHER_TILE: pressure_repeat.variant(temporal_tiling=2, unroll=None),
                        f"repeat, WHILE form U={u}, tiled": chosen.variant(unroll=u),
                        f"repeat, WHILE form U={u}, untiled": plain.variant(unroll=u),
                        "repeat U=1": plain.variant(unroll=1), TRIGGERED: plain.variant(unroll=None)})
    hands = _hand_sweeps(shape, div, sweeps)
    if not every:
        hands = {HAND_FLUIDS: hands[HAND_FLUIDS]}
    sides = {who: (hand.launch, hand.buffers, hand.result) for who, hand in hands.items()}
    for who, kernel in variants.items():
        sides[who] = (lambda kernel=kernel: (iters.fill(0), kernel(p, p_new, div, iters, flag, sweeps)), (p, p_new), p)
    for who, kernel in repeats.items():
        sides[who] = (lambda kernel=kernel: kernel(p, p_new, div, sweeps // 2), (p, p_new), p)
    results, builds = {}, {}
    for who, (call, buffers, field) in sides.items():  # every side: the same sweeps from p = 0
        for array in buffers:
            array.fill(0)
        # the graph is built by the first call; TRIGGERED's nodes (128 blocks) run the launch_dependents twin
        cuda_program.TRIGGER_BLOCKS = 1 << 20 if who == TRIGGERED else trigger_blocks
        tiling.REGIONS = {**regions, 2: (16, 64)} if who == OTHER_TILE else regions  # compiled by the first call
        graph_unroll.MAX_TILED_WAVES = 1 << 30 if who.endswith("forced") else waves  # built by it
        try:
            call()
            qgraph.sync()
        finally:
            cuda_program.TRIGGER_BLOCKS = trigger_blocks
            tiling.REGIONS = regions
            graph_unroll.MAX_TILED_WAVES = waves
        results[who] = field.to_numpy()
        if who in repeats:
            builds[who] = repeats[who].stats.build_seconds * 1e3
    first = results[next(iter(variants))]
    for who in (*variants, *repeats):
        assert np.array_equal(results[who], first), f"{who} differs"
    assert chosen.stats.iterations == (sweeps // 2,)
    spreads = interleaved_spreads({who: side[0] for who, side in sides.items()}, budget, repeat, qgraph.sync)
    floor = spreads[HAND_FLUIDS].median
    return [{"section": "fluids pressure", "n": f"{shape[0]}x{shape[1]}", "mode": who, "us": s.median * 1e6,
             "vs": s.median / floor, "max_abs_diff": float(np.abs(results[who] - results[HAND_FLUIDS]).max()),
             **({"build_ms": builds[who]} if who in builds else {})} for who, s in spreads.items()]


HAND_FLUIDS = "CUDA C++ unrolled graph"
TILED = "repeat, chosen (tiled where its tiles fit a wave)"
UNTILED = "repeat, untiled (straight line)"
OTHER_TILE = "repeat, tiled S=2, 16x64 blocks"
TRIGGERED = "repeat, chosen, launch_dependents"  # every node's trigger twin (TRIGGER_BLOCKS lifted)


def _hand_sweeps(shape: tuple[int, int], div, sweeps: int) -> dict:
    """The hand-written graphs (qgraph.bench.fluids_pressure.UnrolledSweeps), each on its own p and
    p_new and the shared div: programmatic edges (the baseline), plain edges (what a stream capture
    such as Warp's makes) and each successor launched early."""
    from qgraph.bench.fluids_pressure import UnrolledSweeps

    device = qgraph.runtime.STATE.cuda
    options = {HAND_FLUIDS: {}, f"{HAND_FLUIDS}, plain edges": {"programmatic": False},
               f"{HAND_FLUIDS}, early launch": {"early": True},
               f"{HAND_FLUIDS}, launch after the wait": {"variant": "late"},
               f"{HAND_FLUIDS}, plain loads": {"variant": "aliased"},
               f"{HAND_FLUIDS}, plain loads, 256 B params": {"variant": "qgraph_params"}}
    return {who: UnrolledSweeps(device, qgraph.ndarray(qgraph.f32, shape), qgraph.ndarray(qgraph.f32, shape), div,
                                sweeps, **option) for who, option in options.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fluids", action="store_true", help="only the fluids pressure rows (and --repeats)")
    parser.add_argument("--repeats", action="store_true", help="only the short repeat rows (and --fluids)")
    parser.add_argument("--loops", action="store_true", help="only the loop, flag loop and relax rows")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    qgraph.init("cuda")
    warm_up_gpu()
    budget, repeat = (0.05, 5) if args.quick else (0.1, 7)
    rows = []
    every = not (args.fluids or args.repeats or args.loops)
    if every or args.loops:
        rows += loop_rows(1000, budget, repeat)
        rows += flag_loop_rows(1, 1000, budget, repeat) + flag_loop_rows(8, 1000, budget, repeat)
        rows += relax_rows((128, 512, 2048), 200, budget, repeat)
    if every or args.repeats:
        rows += short_repeat_rows(budget, repeat)
    if every or args.fluids:
        rows += fluid_rows((256, 128), 100, budget, repeat)
        rows += fluid_rows((2048, 2048), 100, budget, repeat, every=False)  # tiling must not lose here
    device = qgraph.runtime.STATE.cuda.info
    print(f"device: {getattr(device, 'name', '?')} cc {device.compute_capability} driver {device.driver_version}")
    for r in rows:
        what = f"{r['section']} {r.get('tasks', r.get('n', ''))}"
        extra = f"  diff {r['max_abs_diff']:.1e}" if "max_abs_diff" in r else ""
        extra += f"  build {r['build_ms']:.2f} ms" if "build_ms" in r else ""
        extra += f"  {r['nodes']} nodes" if "nodes" in r else ""
        vs = f"{r['vs']:.3f}" if r["vs"] is not None else "-"
        print(f"{what:<22} {r['mode']:<38} {r['us']:10.2f} us  x{vs}{extra}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
