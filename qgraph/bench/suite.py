"""`python -m qgraph bench`: launch overhead, measured side by side in one process.

GPU: for each task count and array size, per-call time of the same T-task kernel run as
- floor: a raw CUDA graph of equivalent hand-written NVRTC kernels (cuGraphAddKernelNode),
- graph: qgraph, cuda_graph=True (same arrays every call) and with two array sets swapped,
- eager: qgraph, tasks launched one by one,
- numba: the same kernels launched through numba-cuda's dispatcher;
and per iteration of a 1000-iteration loop: raw WHILE node vs qgraph's device loop, raw
host loop (replay + flag read-back) vs qgraph's host fallback.
CPU: qgraph vs hand-written numba.njit(parallel=True) loops.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field

import qgraph

from .timing import Progress, busy_warning, interleaved_seconds, is_busy, warm_up_gpu

FULL_TASKS = (1, 2, 4, 8, 16, 32)
FULL_SIZES = (256, 1 << 20, 1 << 24)
QUICK_TASKS = (1, 8, 32)
QUICK_SIZES = (256, 1 << 20)
LOOP_ITERATIONS = 1000


@dataclass
class Row:
    group: str  # "launch" (per call) or "loop" (per iteration)
    mode: str
    tasks: int
    size: int
    us: float
    floor_us: float | None = None
    us_min: float | None = None  # the fastest and slowest of the interleaved rounds
    us_max: float | None = None

    @property
    def busy(self) -> bool:
        return self.us_min is not None and is_busy((self.us_min, self.us, self.us_max))

    @property
    def ratio(self) -> float | None:
        return None if not self.floor_us else self.us / self.floor_us


@dataclass
class Report:
    arch: str
    environment: dict
    rows: list[Row] = field(default_factory=list)
    headline: dict = field(default_factory=dict)
    cpu_rows: list = field(default_factory=list)
    reductions: list = field(default_factory=list)  # see bench.reductions
    relax: list = field(default_factory=list)
    cpu_sums: list = field(default_factory=list)
    compute: list = field(default_factory=list)  # see bench.compute_suite
    cpu_compute: list = field(default_factory=list)
    structs: list = field(default_factory=list)  # see bench.struct_bench
    examples: list = field(default_factory=list)  # see bench.examples_bench
    nested: list = field(default_factory=list)  # see bench.nested_loops
    seconds: float = 0.0

    def to_json(self) -> dict:
        rows = [dict(asdict(r), ratio=r.ratio) for r in self.rows]
        cpu = [dict(asdict(r), ratio=r.ratio) for r in self.cpu_rows]
        return {"arch": self.arch, "environment": self.environment, "rows": rows, "headline": self.headline,
                "cpu": cpu, "reductions": self.reductions, "relax": self.relax, "cpu_sums": self.cpu_sums,
                "compute": self.compute, "cpu_compute": self.cpu_compute, "structs": self.structs,
                "examples": self.examples, "nested": self.nested,
                "seconds": self.seconds}


def environment() -> dict:
    from importlib import metadata

    versions = {"qgraph": qgraph.__version__}
    for dist in ("numba", "numba-cuda", "llvmlite", "cuda-bindings", "cuda-core", "numpy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    env = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
           "versions": versions, "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    info = qgraph.device_info()
    if info is not None:
        env.update(device=info.name, compute_capability=".".join(map(str, info.compute_capability)),
                   driver_version=".".join(map(str, info.driver_version_tuple)), multiprocessors=info.multiprocessors)
    return env


def gpu_launch_rows(tasks: int, size: int, budget: float, repeat: int, numba_baseline: bool = True) -> list[Row]:
    from .baselines import NumbaDispatch, RawGraphs
    from .kernels import kernels_for

    device = qgraph.runtime.STATE.cuda
    module = kernels_for(tasks)
    a = 1.0
    sets = [[qgraph.ndarray(qgraph.f32, (size,)) for _ in range(tasks)] for _ in range(2)]
    raw = RawGraphs(device, sets[0], size, a)
    graph_args = sets[0] + [size, a]
    swap_args = [sets[0] + [size, a], sets[1] + [size, a]]
    state = [0]

    def swapped() -> None:
        state[0] ^= 1
        module.graph(*swap_args[state[0]])

    calls = {"floor": raw.launch, "graph": lambda: module.graph(*graph_args),
             "graph, 2 sets swapped": swapped, "eager": lambda: module.eager(*graph_args)}
    if numba_baseline:
        calls["numba dispatcher"] = NumbaDispatch(sets[0], size, a).run
    spreads: dict = {}
    times = interleaved_seconds(calls, budget, repeat, qgraph.sync, spreads)
    floor = times["floor"] * 1e6
    return [Row("launch", mode, tasks, size, t * 1e6, floor, spreads[mode][0] * 1e6, spreads[mode][2] * 1e6)
            for mode, t in times.items()]


def gpu_loop_rows(tasks: int, iterations: int, budget: float, repeat: int) -> list[Row]:
    from .baselines import RawGraphs
    from .kernels import kernels_for

    device = qgraph.runtime.STATE.cuda
    module = kernels_for(tasks)
    size, a = 256, 1.0
    arrays = [qgraph.ndarray(qgraph.f32, (size,)) for _ in range(tasks)]
    counter, flag = qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    raw = RawGraphs(device, arrays, size, a, counter, flag)
    args = arrays + [counter, flag, size, a]
    fallback = module.loop._variant(cuda_graph=True)
    fallback._force_host_loop = True  # the same kernel on the host do-while path, side by side
    unguarded = module.loop._variant(cuda_graph=True)
    unguarded.max_iterations = None  # the runaway guard's cost: the same loop without it

    def run(fn):
        def call() -> None:
            counter.fill(iterations)
            fn()
        return call

    calls = {"raw WHILE node": run(raw.while_launch), "device loop": run(lambda: module.loop(*args)),
             "device loop, no guard": run(lambda: unguarded(*args)),
             "raw host loop": run(raw.host_loop), "host fallback": run(lambda: fallback(*args))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qgraph.FallbackWarning)
        spreads: dict = {}
        times = interleaved_seconds(calls, budget, repeat, qgraph.sync, spreads)
    us = {mode: t / iterations * 1e6 for mode, t in times.items()}
    floors = {"raw WHILE node": "raw WHILE node", "device loop": "raw WHILE node",
              "device loop, no guard": "raw WHILE node", "raw host loop": "raw host loop",
              "host fallback": "raw host loop"}
    return [Row("loop", mode, tasks, size, us[mode], us[floor], spreads[mode][0] / iterations * 1e6,
                spreads[mode][2] / iterations * 1e6) for mode, floor in floors.items()]


def gpu_headline(budget: float, repeat: int) -> dict:
    """The figures the issues track, for 8 one-block tasks, measured side by side."""
    from .baselines import CudaCoreLaunch, RawGraphs
    from .kernels import kernels_for

    device = qgraph.runtime.STATE.cuda
    module = kernels_for(8)
    size, a = 256, 1.0
    arrays = [qgraph.ndarray(qgraph.f32, (size,)) for _ in range(8)]
    args = arrays + [size, a]
    raw = RawGraphs(device, arrays, size, a)
    raw_pdl = RawGraphs(device, arrays, size, a, programmatic=True)
    sync = qgraph.sync

    def graph_sync() -> None:
        module.graph(*args)
        sync()

    core = CudaCoreLaunch(arrays[0], size, a)
    per_call = interleaved_seconds({
        "floor": raw.launch, "graph": lambda: module.graph(*args), "raw_pdl": raw_pdl.launch,
        "eager": lambda: module.eager(*args)}, budget, repeat, sync)
    with_sync = interleaved_seconds({"floor": raw.launch_sync, "graph": graph_sync}, budget, repeat, lambda: None)
    core_launch = interleaved_seconds({"core": core.launch}, budget, repeat, core.sync)["core"]
    # graph build time, compile excluded: a fresh graph of an already compiled specialisation
    qgraph.reset()
    module.graph(*args)  # compiles (from the disk cache) and builds
    build_ms = module.graph.stats.build_seconds * 1e3
    # host time of one graph call (the GPU is kept busy, so this is the Python + driver cost)
    sync()
    started = time.perf_counter()
    for _ in range(200):
        module.graph(*args)
    host_us = (time.perf_counter() - started) / 200 * 1e6
    sync()
    return {"floor_us": per_call["floor"] * 1e6, "graph_us": per_call["graph"] * 1e6,
            "raw_pdl_graph_us": per_call["raw_pdl"] * 1e6, "graph_vs_floor": per_call["graph"] / per_call["floor"],
            "graph_vs_raw_pdl": per_call["graph"] / per_call["raw_pdl"],
            "floor_launch_sync_us": with_sync["floor"] * 1e6, "graph_launch_sync_us": with_sync["graph"] * 1e6,
            "launch_sync_ratio": with_sync["graph"] / with_sync["floor"], "cuda_core_launch_us": core_launch * 1e6,
            "eager_per_task_us": per_call["eager"] * 1e6 / 8,
            "eager_per_task_ratio": per_call["eager"] / 8 / core_launch,
            "graph_build_ms": build_ms, "graph_call_host_us": host_us}


def run(quick: bool = False, arch: str | None = None, progress_stream=None, cpu_sizes=None) -> Report:
    started = time.perf_counter()
    qgraph.init(arch)
    report = Report(qgraph.current_arch(), environment())
    if report.arch != "cuda":
        from .cpu import run_cpu_suite

        sizes = cpu_sizes or ((10**5, 10**6) if quick else (10**6, 10**7))
        progress = Progress(3 * len(sizes), "cpu suite", stream=progress_stream)
        report.cpu_rows = run_cpu_suite(sizes=sizes, repeat=5 if quick else 20, progress=progress)
        progress.close()
        from . import reductions

        _, _, report.cpu_sums = reductions.run(quick, 0.0, 0)
        from . import compute_suite

        report.cpu_compute = compute_suite.cpu_rows(quick)
        from . import struct_bench

        report.structs = struct_bench.rows(0.02 if quick else 0.1, 3 if quick else 5)
        from . import examples_bench

        report.examples = examples_bench.run(quick, 0.05 if quick else 0.2, 3 if quick else 5)
        report.seconds = time.perf_counter() - started
        return report
    tasks = QUICK_TASKS if quick else FULL_TASKS
    sizes = QUICK_SIZES if quick else FULL_SIZES
    budget, repeat = (0.02, 3) if quick else (0.1, 5)
    iterations = 200 if quick else LOOP_ITERATIONS
    loop_tasks = (1, 8) if quick else (1, 8, 32)
    progress = Progress(len(tasks) * len(sizes) + len(loop_tasks) + 4, "gpu suite", stream=progress_stream)
    warm_up_gpu(0.5 if quick else 2.0)
    for t in tasks:
        for size in sizes:
            report.rows += gpu_launch_rows(t, size, budget, repeat, numba_baseline=not (quick and t == 32))
            progress(f"{t} tasks, {size} elements")
    for t in loop_tasks:
        report.rows += gpu_loop_rows(t, iterations, budget, repeat)
        progress(f"loop, {t} tasks")
    from . import nested_loops

    report.nested = nested_loops.rows(budget, repeat)
    report.headline = gpu_headline(budget, repeat)
    progress("headline")
    from . import reductions

    report.reductions, report.relax, _ = reductions.run(quick, budget, repeat)
    progress("reductions")
    from . import struct_bench

    report.structs = struct_bench.rows(budget, repeat)
    from . import examples_bench

    report.examples = examples_bench.run(quick, budget, repeat)  # on CUDA, then on the CPU
    progress("vector examples")
    from . import compute_suite

    # last: its CPU rows re-initialise qgraph for cpu (and back), dropping compiled kernels
    report.compute, report.cpu_compute = compute_suite.run(quick, budget, repeat)
    progress("compute")
    progress.close()
    report.seconds = time.perf_counter() - started
    return report


def table(report: Report) -> str:
    lines = []
    if report.cpu_rows:
        from .cpu import cpu_table
        from .reductions import table as reduction_table

        lines += ["CPU: qgraph vs hand-written numba.njit(parallel=True), per call", cpu_table(report.cpu_rows)]
        lines.append(reduction_table([], [], report.cpu_sums))
        from .compute_suite import table as compute_table

        lines.append(compute_table([], report.cpu_compute))
        from .struct_bench import table as struct_table

        lines.append(struct_table(report.structs, report.arch))
        from .examples_bench import table as examples_table

        lines.append(examples_table(report.examples))
        if report.arch != "cuda":
            lines.append("(GPU rows need a CUDA GPU: run `python -m qgraph bench` on one.)")
        return "\n".join(lines)
    env = report.environment
    lines.append(f"{env.get('device')} (cc {env.get('compute_capability')}, driver {env.get('driver_version')}), "
                 f"{report.seconds:.0f} s")
    launch = [r for r in report.rows if r.group == "launch"]
    modes = list(dict.fromkeys(r.mode for r in launch))
    lines.append("\nper call, us (ratio to floor): floor = raw CUDA graph of hand-written kernels")
    lines.append(f"{'tasks':>5} {'size':>9} " + " ".join(f"{m:>22}" for m in modes))
    keys = sorted({(r.tasks, r.size) for r in launch})
    for t, size in keys:
        cells = []
        for m in modes:
            r = next((r for r in launch if r.tasks == t and r.size == size and r.mode == m), None)
            cells.append(f"{'-':>22}" if r is None else f"{f'{r.us:.1f} ({r.ratio:.2f})':>22}")
        lines.append(f"{t:>5} {size:>9} " + " ".join(cells))
    loop = [r for r in report.rows if r.group == "loop"]
    if loop:
        lines.append("\ngraph_while, per iteration, us (ratio to its raw equivalent)")
        for r in loop:
            lines.append(f"{r.tasks:>3} tasks  {r.mode:<22} {r.us:8.2f} ({r.ratio:.2f})")
        by = {(r.tasks, r.mode): r.us for r in loop}
        for t in sorted({r.tasks for r in loop}):
            guard = by.get((t, "device loop, no guard"))
            lines.append(f"{t:>3} tasks  device loop is {by[(t, 'host fallback')] / by[(t, 'device loop')]:.2f}x "
                         "faster than the host fallback" + ("" if guard is None else
                         f"; the runaway guard costs {by[(t, 'device loop')] - guard:+.3f} us per iteration"))
    from .nested_loops import table as nested_table

    lines.append(nested_table(report.nested))
    h = report.headline
    if h:
        lines.append("\nheadline, 8 one-block tasks:")
        if "raw_pdl_graph_us" in h:
            lines.append(f"  back-to-back: qgraph {h['graph_us']:.2f} us, floor {h['floor_us']:.2f} us, the same raw "
                         f"graph with programmatic edges {h['raw_pdl_graph_us']:.2f} us "
                         f"(qgraph {h['graph_vs_raw_pdl']:.2f}x of it)")
        lines.append(f"  launch + sync: qgraph {h['graph_launch_sync_us']:.2f} us vs floor "
                     f"{h['floor_launch_sync_us']:.2f} us ({h['launch_sync_ratio']:.2f}x)")
        lines.append(f"  eager: {h['eager_per_task_us']:.2f} us per task vs cuda.core launch "
                     f"{h['cuda_core_launch_us']:.2f} us ({h['eager_per_task_ratio']:.2f}x)")
        lines.append(f"  graph build (compile excluded): {h['graph_build_ms']:.2f} ms; "
                     f"host time per graph call: {h['graph_call_host_us']:.2f} us")
    from .reductions import table as reduction_table

    lines.append(reduction_table(report.reductions, report.relax, report.cpu_sums))
    from .compute_suite import table as compute_table

    lines.append(compute_table(report.compute, report.cpu_compute))
    from .struct_bench import table as struct_table

    lines.append(struct_table(report.structs, report.arch))
    from .examples_bench import table as examples_table

    lines.append(examples_table(report.examples))
    busy = [f"{r.mode} ({r.tasks} tasks, {r.size})" for r in report.rows if r.busy]
    if busy:
        lines.append(f"\nwarning: {busy_warning(busy[:6] + (['...'] if len(busy) > 6 else []))}")
    return "\n".join(lines)


def plot(report: Report, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    launch = [r for r in report.rows if r.group == "launch"]
    if not launch:
        raise ValueError("no GPU rows to plot (the plot shows per-call time vs task count on a GPU)")
    sizes = sorted({r.size for r in launch})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 4), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        for mode in dict.fromkeys(r.mode for r in launch):
            pts = sorted((r.tasks, r.us) for r in launch if r.size == size and r.mode == mode)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=mode)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tasks per kernel")
        ax.set_ylabel("time per call (us)")
        ax.set_title(f"{size} elements per task")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    env = report.environment
    fig.suptitle(f"qgraph launch overhead on {env.get('device', report.arch)}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(quick: bool, json_path: str | None, plot_path: str | None, arch: str | None) -> int:
    report = run(quick=quick, arch=arch)
    print(table(report))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report.to_json(), f, indent=1)
        print(f"\nwrote {json_path}", file=sys.stderr)
    if plot_path:
        if report.arch == "cuda":
            plot(report, plot_path)
            print(f"wrote {plot_path}", file=sys.stderr)
        else:
            print("no plot: the plot shows GPU rows; run on a CUDA GPU", file=sys.stderr)
    return 0


__all__ = ["Report", "Row", "main", "plot", "run", "table"]
