"""`python -m qgraph bench`: every section, its table, its JSON and its plot.

GPU: launch overhead (bench.gpu_launch: qgraph's graphs and eager launches against a raw CUDA
graph of hand-written kernels and numba-cuda's dispatcher), device loops, reductions, compute,
struct arguments and the vector examples. CPU: qgraph against the same loops hand-written with
numba.njit(parallel=True), and the same other sections. On both: first calls in fresh
processes, cold and warm (bench.compile_time). Every figure is the median of its rounds with
their spread; a warning names the figures whose spread says the machine was busy.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field

import qgraph

from ..tools.timing import busy_figures, busy_warning
from .gpu_launch import Row, gpu_headline, gpu_launch_rows, gpu_loop_rows
from .kernels import warm_up_gpu
from .progress import StepBar

FULL_TASKS = (1, 2, 4, 8, 16, 32)
FULL_SIZES = (256, 1 << 20, 1 << 24)
QUICK_TASKS = (1, 8, 32)
QUICK_SIZES = (256, 1 << 20)
LOOP_ITERATIONS = 1000


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
    first_calls: list = field(default_factory=list)  # see bench.cpu.first_call_rows
    compile_time: list = field(default_factory=list)  # see bench.compile_time
    gradients: dict = field(default_factory=dict)  # see bench.gradients
    loop_gradients: dict = field(default_factory=dict)  # see bench.loop_gradients
    seconds: float = 0.0

    def figures(self) -> dict:
        """Every section's figures, as in the JSON (each timed figure `K` with `K_min` and `K_max`)."""
        rows = [dict(asdict(r), ratio=r.ratio) for r in self.rows]
        cpu = [dict(asdict(r), ratio=r.ratio) for r in self.cpu_rows]
        return {"rows": rows, "headline": self.headline, "cpu": cpu, "reductions": self.reductions,
                "relax": self.relax, "cpu_sums": self.cpu_sums, "compute": self.compute,
                "cpu_compute": self.cpu_compute, "structs": self.structs, "examples": self.examples,
                "nested": self.nested, "first_calls": self.first_calls, "compile_time": self.compile_time,
                "gradients": self.gradients, "loop_gradients": self.loop_gradients}

    def busy(self) -> list[str]:
        """The figures whose rounds say the machine was busy while they were timed (timing.is_busy)."""
        return [label for section, rows in self.figures().items() for label in busy_figures(rows, section)]

    def to_json(self) -> dict:
        return {"arch": self.arch, "environment": self.environment, **self.figures(), "busy": self.busy(),
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


def run(quick: bool = False, arch: str | None = None, cpu_sizes=None, show_progress: bool = False) -> Report:
    """Every section on the backend `arch` picks; with `show_progress`, a bar over the sections."""
    from . import compile_time

    started = time.perf_counter()
    qgraph.init(arch)
    report = Report(qgraph.current_arch(), environment())
    runs = 1 if quick else 3  # pairs of fresh processes per first-call figure
    many_loops = compile_time.QUICK_MANY_LOOPS if quick else compile_time.MANY_LOOPS
    if report.arch != "cuda":
        sizes = cpu_sizes or ((10**5, 10**6) if quick else (10**6, 10**7))
        with StepBar("qgraph bench", 3 * len(sizes) + 7, show_progress) as bar:
            _cpu_sections(report, quick, sizes, runs, many_loops, bar)
        report.seconds = time.perf_counter() - started
        return report
    tasks = QUICK_TASKS if quick else FULL_TASKS
    sizes = QUICK_SIZES if quick else FULL_SIZES
    budget, repeat = (0.02, 3) if quick else (0.1, 5)
    iterations = 200 if quick else LOOP_ITERATIONS
    loop_tasks = (1, 8) if quick else (1, 8, 32)
    arches = compile_time.usable_arches()
    steps = 1 + len(tasks) * len(sizes) + len(loop_tasks) + 8 + 2 * len(arches)
    with StepBar("qgraph bench", steps, show_progress) as bar:
        bar.step("warming up the GPU")
        warm_up_gpu(0.5 if quick else 2.0)
        for t in tasks:
            for size in sizes:
                bar.step(f"launch: {t} tasks, {size} elements")
                report.rows += gpu_launch_rows(t, size, budget, repeat, numba_baseline=not (quick and t == 32))
        for t in loop_tasks:
            bar.step(f"graph_while loop: {t} tasks")
            report.rows += gpu_loop_rows(t, iterations, budget, repeat)
        from . import nested_loops

        bar.step("nested loops")
        report.nested = nested_loops.rows(budget, repeat)
        bar.step("headline")
        report.headline = gpu_headline(budget, repeat)
        from . import reductions

        bar.step("reductions")
        report.reductions, report.relax, _ = reductions.run(quick, budget, repeat)
        from . import struct_bench

        bar.step("struct arguments")
        report.structs = struct_bench.rows(budget, repeat)
        from . import examples_bench

        bar.step("vector examples")
        report.examples = examples_bench.run(quick, budget, repeat)  # on CUDA, then on the CPU
        from . import gradients

        bar.step("gradients")
        report.gradients = gradients.run(repeats=5 if quick else 20)
        from . import loop_gradients

        bar.step("gradients through device loops")
        drag_steps = 100 if quick else 400  # checkpoints every 1, 10, 100 (and 20) passes
        report.loop_gradients = loop_gradients.run(65536, 200, 16384, drag_steps, 5 if quick else 10)
        from . import compute_suite

        bar.step("compute")
        # last in this process: its CPU rows re-initialise qgraph for cpu (and back), dropping compiled kernels
        report.compute, report.cpu_compute = compute_suite.run(quick, budget, repeat)
        report.compile_time = compile_time.rows(many_loops, arches, runs, on_step=bar.step)
    report.seconds = time.perf_counter() - started
    return report


def _cpu_sections(report: Report, quick: bool, sizes, runs: int, many_loops: int, bar: StepBar) -> None:
    """The CPU backend's sections: against numba, reductions, compute, structs, examples, first calls."""
    from . import compile_time, compute_suite, examples_bench, reductions, struct_bench
    from .cpu import first_call_rows, run_cpu_suite

    report.cpu_rows = run_cpu_suite(sizes=sizes, repeat=5 if quick else 20, budget=0.01 if quick else 0.02,
                                    on_step=bar.step)
    bar.step("reductions")
    _, _, report.cpu_sums = reductions.run(quick, 0.0, 0)
    bar.step("compute")
    report.cpu_compute = compute_suite.cpu_rows(quick)
    bar.step("struct arguments")
    report.structs = struct_bench.rows(0.02 if quick else 0.1, 3 if quick else 5)
    bar.step("vector examples")
    report.examples = examples_bench.run(quick, 0.05 if quick else 0.2, 3 if quick else 5)
    bar.step("first calls in fresh processes")
    report.first_calls = first_call_rows(runs)
    report.compile_time = compile_time.rows(many_loops, ["cpu"], runs, on_step=bar.step)


def table(report: Report) -> str:
    """The report as text: each figure the median of its rounds (--json adds their min and max),
    then a warning naming the figures whose rounds say the machine was busy."""
    from .compile_time import table as compile_time_table

    lines = [_cpu_table(report) if report.cpu_rows else _gpu_table(report), compile_time_table(report.compile_time)]
    if report.arch != "cuda":
        lines.append("\n(GPU rows need a CUDA GPU: run `python -m qgraph bench` on one.)")
    busy = report.busy()
    if busy:
        lines.append(f"\nwarning: {busy_warning(busy)}")
    return "\n".join(lines)


def _cpu_table(report: Report) -> str:
    from .compute_suite import table as compute_table
    from .cpu import cpu_table, first_call_table
    from .examples_bench import table as examples_table
    from .reductions import table as reduction_table
    from .struct_bench import table as struct_table

    return "\n".join(["CPU: qgraph vs hand-written numba.njit(parallel=True), per call", cpu_table(report.cpu_rows),
                      first_call_table(report.first_calls), reduction_table([], [], report.cpu_sums),
                      compute_table([], report.cpu_compute), struct_table(report.structs, report.arch),
                      examples_table(report.examples)])


def _gpu_table(report: Report) -> str:
    lines = []
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
    from .gradients import table as gradients_table

    lines.append(gradients_table(report.gradients))
    from .loop_gradients import table as loop_gradients_table

    lines.append(loop_gradients_table(report.loop_gradients))
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


def main(quick: bool, json_path: str | None, plot_path: str | None, arch: str | None,
         show_progress: bool = False) -> int:
    report = run(quick=quick, arch=arch, show_progress=show_progress)
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


__all__ = ["Report", "Row", "environment", "main", "plot", "run", "table"]
