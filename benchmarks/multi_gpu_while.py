"""A solve to a global tolerance on 1 and 2 GPUs: the device loop (NCCL inside the WHILE node) against
the same solve written with PyTorch and torch.distributed, checked on the host every pass.

Every configuration runs in this one job (one process per GPU, started here), so the ratios are
side by side: weak scaling (--size rows per GPU), strong scaling (--size rows in all), and per
pass the PyTorch solve's time over qgraph's. A pass is two Jacobi sweeps, two halo exchanges and
the all-reduce (max) of the pass's change; qgraph's passes run in one graph launch per solve
(examples/relax_multi_gpu.py), PyTorch's end with `change.item()`.

    python benchmarks/multi_gpu_while.py --size 8192 --tol 1.25e-4 --json while.json
    python benchmarks/multi_gpu_while.py --plot while.json while.png   # the plot, anywhere
"""

from __future__ import annotations

import argparse
import json
import time

from qgraph.examples import ranks
from qgraph.examples import relax_multi_gpu as relax


def torch_solve(rows: int, cols: int, tol: float, passes: int) -> dict:
    """The same passes in PyTorch (the code a user would otherwise write): up to `passes` of them,
    stopping early below `tol`; microseconds per pass."""
    import torch
    import torch.distributed as dist

    from qgraph.examples.heat_multi_gpu import bands, initial_field

    rank, world = dist.get_rank(), dist.get_world_size()
    band = bands(rows, world)[rank]
    dev = torch.device("cuda", torch.cuda.current_device())
    whole = initial_field(rows, cols)
    local = torch.zeros((band.rows + 2, cols), dtype=torch.float64, device=dev)
    first, last = max(band.start - 1, 0), min(band.stop + 1, rows)
    local[first - (band.start - 1):last - (band.start - 1)] = torch.from_numpy(whole[first:last]).to(dev)
    u, un = local, local.clone()
    lo, hi, n = band.lo, band.hi, band.rows + 2

    def exchange(t):
        ops = []
        if rank > 0:
            ops += [dist.P2POp(dist.isend, t[1], rank - 1), dist.P2POp(dist.irecv, t[0], rank - 1)]
        if rank < world - 1:
            ops += [dist.P2POp(dist.isend, t[n - 2], rank + 1), dist.P2POp(dist.irecv, t[n - 1], rank + 1)]
        for w in dist.batch_isend_irecv(ops) if ops else []:
            w.wait()

    def one_pass() -> float:
        change = torch.zeros((), dtype=torch.float64, device=dev)
        for a, b in ((u, un), (un, u)):
            b[lo:hi, 1:-1] = 0.25 * (a[lo - 1:hi - 1, 1:-1] + a[lo + 1:hi + 1, 1:-1] + a[lo:hi, :-2] + a[lo:hi, 2:])
            change = torch.maximum(change, (b[lo:hi, 1:-1] - a[lo:hi, 1:-1]).abs().max())
            exchange(b)
        dist.all_reduce(change, op=dist.ReduceOp.MAX)
        return change.item()

    one_pass()  # warm-up: NCCL's connections, PyTorch's kernels
    torch.cuda.synchronize()
    dist.barrier()
    start, done = time.perf_counter(), 0
    while done < passes:
        done += 1
        if not one_pass() > tol:
            break
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"passes": done, "pass_us": 1e6 * seconds / done}


def plot(rows: list[dict], path: str) -> None:
    """Microseconds per pass of each configuration, qgraph's device loop beside the PyTorch solve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['config']}\n{r['world']} GPU{'s' if r['world'] > 1 else ''}, {r['grid']}" for r in rows]
    xs = range(len(rows))
    fig, ax = plt.subplots(figsize=(7, 4))
    for offset, key, name in ((-0.2, "qgraph_pass_us", "qgraph: NCCL inside the WHILE node"),
                              (0.2, "torch_pass_us", "PyTorch + torch.distributed, .item() every pass")):
        bars = ax.bar([x + offset for x in xs], [r[key] for r in rows], 0.4, label=name)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylabel("microseconds per pass (two sweeps)")
    ax.set_title("Jacobi to a global tolerance, per pass (lower is better)")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192, help="rows per GPU (weak) and in all (strong); square")
    parser.add_argument("--tol", type=float, default=1.25e-4, help="the solve's tolerance (about 0.125/tol passes)")
    parser.add_argument("--torch-passes", type=int, default=200, help="passes timed for the PyTorch solve")
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", nargs=2, metavar=("JSON", "PNG"), default=None, help="only draw JSON's rows to PNG")
    args = parser.parse_args(argv)
    if args.plot:
        with open(args.plot[0]) as f:
            plot(json.load(f), args.plot[1])
        return 0
    n, rows = args.size, []
    configs = [("1 GPU", 1, n), ("weak", args.gpus, n * args.gpus), ("strong", args.gpus, n)]
    for name, world, size in configs:
        r = ranks.launch(world, "cuda", relax.solve, 1200, rows=size, cols=n, tol=args.tol, gather=False)
        t = ranks.launch(world, "cuda", torch_solve, 1200, rows=size, cols=n, tol=args.tol, passes=args.torch_passes)
        rows.append({"config": name, "world": world, "grid": f"{size}x{n}", "passes": r.passes,
                     "qgraph_pass_us": r.pass_us, "torch_pass_us": t["pass_us"], "torch_passes": t["passes"]})
        print(json.dumps(rows[-1]), flush=True)
    one = rows[0]["qgraph_pass_us"]
    print(f"\n{'config':8s} {'GPUs':>4s} {'grid':>12s} {'passes':>7s} {'qgraph us/pass':>15s} "
          f"{'torch us/pass':>14s} {'torch/qgraph':>12s} {'vs 1 GPU':>9s}")
    for r in rows:
        vs = r["qgraph_pass_us"] / one if r["config"] != "strong" else one / r["qgraph_pass_us"]
        label = "x pass" if r["config"] != "strong" else "x speed"
        print(f"{r['config']:8s} {r['world']:4d} {r['grid']:>12s} {r['passes']:7d} {r['qgraph_pass_us']:15.1f} "
              f"{r['torch_pass_us']:14.1f} {r['torch_pass_us'] / r['qgraph_pass_us']:12.2f} {vs:6.2f} {label}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
