"""Strong and weak scaling of the row-decomposed heat solve (examples/heat_multi_gpu.py) over GPUs.

One process per GPU, all started in one job, so every world size runs side by side on the same
host: strong scaling at 8192^2 and 16384^2, weak scaling at 8192^2 per GPU, each as a captured step
(kernels + NCCL halo exchange in one CUDA graph), as eager launches, and as a captured step
without the halo exchange (its gap to the captured step is the exchange's share of a step). The
1-GPU rows also time the same Jacobi step written with PyTorch tensor ops under a CUDA graph.

    python benchmarks/multi_gpu_scaling.py --json results.json          # on a host with 2+ GPUs
    python benchmarks/multi_gpu_scaling.py --plot results.json out.png  # the plot, anywhere
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from qgraph.examples import heat_multi_gpu as heat  # noqa: E402


def _timed(step, steps: int, solver) -> float:
    """Seconds for `steps` steps on every rank (barriers on both sides)."""
    solver.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    solver.barrier()
    return time.perf_counter() - start


def _torch_step_rate(rows: int, cols: int, steps: int, rounds: int) -> float:
    """Steps/s of the same two-sweep Jacobi step in PyTorch ops, captured in a CUDA graph."""
    import torch

    u = torch.from_numpy(heat.initial_field(rows, cols)).cuda()
    un = u.clone()

    def sweep(a, b):
        b[1:-1, 1:-1] = 0.25 * (a[:-2, 1:-1] + a[2:, 1:-1] + a[1:-1, :-2] + a[1:-1, 2:])

    def step():
        sweep(u, un)
        sweep(un, u)

    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            graph.replay()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    graph.reset()
    return steps / statistics.median(times)


def measure(configs: list[dict], rounds: int = 3) -> list[dict]:
    """Run on every rank of the default group; each config on its first `world` ranks."""
    import torch
    import torch.distributed as dist

    import qgraph

    size, rank, out = dist.get_world_size(), dist.get_rank(), []
    solver_cuda = qgraph.current_arch() == "cuda"
    groups = {w: (None if w == size else dist.new_group(list(range(w)))) for w in sorted({c["world"] for c in configs})}
    for c in configs:
        row = dict(c)
        if rank < c["world"]:
            for halo in (True, False):
                solver = heat.Solver(c["rows"], c["cols"], groups[c["world"]], halo=halo)
                solver.step()  # compile, set up the communicators
                graph_step = solver.capture()
                modes = [("graph", graph_step), ("eager", solver.step)] if halo else [("graph_no_halo", graph_step)]
                for name, fn in modes:
                    fn()
                    times = [_timed(fn, c["steps"], solver) for _ in range(rounds)]
                    row[f"{name}_steps_per_s"] = c["steps"] / statistics.median(times)
                    row[f"{name}_spread"] = max(times) / min(times)
                solver.barrier()
                del solver, graph_step, modes
                gc.collect()
                if solver_cuda:
                    torch.cuda.empty_cache()
            if c["world"] == 1 and c.get("torch") and solver_cuda:
                row["torch_graph_steps_per_s"] = _torch_step_rate(c["rows"], c["cols"], c["steps"], rounds)
        dist.barrier()
        out.append(row)
    return out if rank == 0 else []


def configs_for(worlds: list[int], strong: list[int], weak: int, steps_at_8192: int) -> list[dict]:
    """Strong: each size on every world; weak: weak rows per GPU. Steps scale to ~equal time."""
    out = []

    def steps(rows: int, cols: int, world: int) -> int:
        return max(50, int(steps_at_8192 * 8192 * 8192 * world / (rows * cols)))

    for n in strong:
        for w in worlds:
            out.append(dict(kind="strong", world=w, rows=n, cols=n, steps=steps(n, n, w), torch=w == 1))
    for w in worlds:
        out.append(dict(kind="weak", world=w, rows=weak * w, cols=weak, steps=steps(weak * w, weak, w), torch=False))
    return out


def table(rows: list[dict]) -> str:
    base = {(r["kind"], r["cols"]): r for r in rows if r["world"] == 1}
    lines = [f"{'case':9s} {'grid':>12s} {'GPUs':>4s} {'graph st/s':>10s} {'eager st/s':>10s} {'graph/eager':>11s} "
             f"{'halo share':>10s} {'speed-up':>8s} {'efficiency':>10s} {'GB/s/GPU':>8s}"]
    for r in rows:
        b = base[(r["kind"], r["cols"])]
        g = r["graph_steps_per_s"]
        speedup = g / b["graph_steps_per_s"]
        eff = speedup / r["world"] if r["kind"] == "strong" else speedup
        if r["kind"] == "weak":
            speedup = g * r["rows"] / (b["graph_steps_per_s"] * b["rows"])  # cells per second, relative
        halo = 1.0 - g / r["graph_no_halo_steps_per_s"]
        gbs = g * 2 * 2 * 8 * r["rows"] * r["cols"] / r["world"] / 1e9  # two sweeps, read + write, f64
        lines.append(f"{r['kind']:9s} {r['rows']:>5d}x{r['cols']:<6d} {r['world']:>4d} {g:10.1f} "
                     f"{r['eager_steps_per_s']:10.1f} {g / r['eager_steps_per_s']:10.2f}x {halo:9.1%} "
                     f"{speedup:7.2f}x {eff:9.1%} {gbs:8.0f}")
        if "torch_graph_steps_per_s" in r:
            t = r["torch_graph_steps_per_s"]
            lines.append(f"{'  torch':9s} {r['rows']:>5d}x{r['cols']:<6d} {1:>4d} {t:10.1f} {'':10s} "
                         f"{'':11s} {'':10s} {'':8s} {'':10s} {t * 32 * r['rows'] * r['cols'] / 1e9:8.0f}"
                         f"   (qgraph {g / t:.2f}x torch)")
    return "\n".join(lines)


def plot(rows: list[dict], path: str, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    worlds = sorted({r["world"] for r in rows})
    for (kind, cols), marker in zip(sorted({(r["kind"], r["cols"]) for r in rows}), "osd^"):
        sel = sorted((r for r in rows if (r["kind"], r["cols"]) == (kind, cols)), key=lambda r: r["world"])
        base = sel[0]["graph_steps_per_s"] * sel[0]["rows"]
        label = f"strong {cols}²" if kind == "strong" else f"weak {cols}² per GPU"
        ys = [r["graph_steps_per_s"] * r["rows"] / base for r in sel]
        ax1.plot([r["world"] for r in sel], ys, marker=marker, label=label)
        if kind == "strong":
            many = [r for r in sel if r["world"] > 1]  # one GPU has no exchange
            ax2.bar([f"{cols}²\n{r['world']} GPUs" for r in many],
                    [1 - r["graph_steps_per_s"] / r["graph_no_halo_steps_per_s"] for r in many], alpha=0.7)
    ax1.plot(worlds, worlds, "k--", lw=0.8, label="ideal")
    ax1.set_xlabel("GPUs")
    ax1.set_ylabel("cell updates per second, relative to 1 GPU")
    ax1.set_xticks(worlds)
    ax1.legend()
    ax1.set_title(f"Jacobi heat solve, captured step ({device})")
    ax2.set_ylabel("share of a step spent in halo exchange")
    ax2.set_title("halo exchange (after overlap)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=None, help="largest world (default: every GPU)")
    parser.add_argument("--strong", type=int, nargs="*", default=[8192, 16384], help="strong-scaling grid sizes")
    parser.add_argument("--weak", type=int, default=8192, help="weak scaling: rows (and columns) per GPU")
    parser.add_argument("--steps", type=int, default=800, help="steps at 8192^2 on one GPU (others scale to match)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per mode (median)")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--plot", nargs=2, metavar=("JSON", "PNG"), default=None, help="only draw JSON's rows to PNG")
    args = parser.parse_args(argv)
    if args.plot:
        data = json.loads(Path(args.plot[0]).read_text())
        plot(data["rows"], args.plot[1], data.get("device", ""))
        print(table(data["rows"]))
        return 0

    import qgraph

    gpus = args.gpus or qgraph.device_count()
    if gpus < 1:
        print("no CUDA device: this benchmark needs at least one GPU (the CPU path is tested, not timed)")
        return 1
    worlds = [w for w in (1, 2, 4, 8) if w <= gpus] + ([gpus] if gpus not in (1, 2, 4, 8) else [])
    configs = configs_for(worlds, args.strong, args.weak, args.steps)
    start = time.perf_counter()
    rows = heat.launch(gpus, "cuda", fn=measure, timeout=3000, configs=configs, rounds=args.rounds)
    import torch

    device = torch.cuda.get_device_name(0)
    print(f"{len(configs)} configurations on up to {gpus} x {device} in {time.perf_counter() - start:.0f} s "
          f"(one step = two sweeps; halo share = 1 - graph / graph without exchange)")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "gpus": gpus, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
