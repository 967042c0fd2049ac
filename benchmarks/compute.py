"""Compute inside kernels: stencils, N-body and saxpy against hand-written CUDA C++ and numba.

    python benchmarks/compute.py [--quick] [--json PATH] [--plot PATH] [--arch cpu|cuda] [--only taichi,stencil3d]

On a GPU: qgraph vs hand-written CUDA C++ side by side (interleaved rounds), then the CPU
part (qgraph's CPU backend vs hand-written numba.njit(parallel=True)); without one, or
with --arch cpu, the CPU part only. Exits with 1 when a qgraph result disagrees with the
hand-written one. `--only` runs the named GPU workloads alone (no CPU part): stencil2d,
stencil3d, nbody, taichi (Taichi's N-body as ported against the same forces hand-tuned), saxpy.
"""

from __future__ import annotations

import argparse
import json
import sys

import qgraph
from qgraph.bench import compute_suite


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer rounds (under a minute)")
    parser.add_argument("--json", metavar="PATH", help="write the rows to PATH")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG of the speed ratios (needs matplotlib)")
    parser.add_argument("--arch", choices=("cpu", "cuda"), help="default: cuda when usable, else cpu")
    parser.add_argument("--only", type=_workloads, help="comma-separated GPU workloads, without the CPU part: "
                        + ", ".join(compute_suite.GPU_WORKLOADS))
    args = parser.parse_args()
    gpu = []
    qgraph.init(args.arch)
    if qgraph.current_arch() == "cuda":
        budget, repeat = (0.02, 3) if args.quick else (0.1, 7)
        gpu = compute_suite.gpu_rows(args.quick, budget, repeat, args.only)
        print(compute_suite.table(gpu, []), flush=True)
    else:
        print("(no CUDA GPU in use: the CPU part only)", flush=True)
    cpu = []
    if args.only is None:
        qgraph.init("cpu")
        cpu = compute_suite.cpu_rows(args.quick)
        print(compute_suite.table([], cpu))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "cpu": cpu}, f, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    if args.plot:
        try:
            compute_suite.plot(gpu, cpu, args.plot)
            print(f"wrote {args.plot}", file=sys.stderr)
        except ImportError:
            print("no plot: matplotlib is not installed", file=sys.stderr)
    bad = compute_suite.mismatches(gpu, cpu)
    if bad:
        print("MISMATCH with the hand-written results: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


def _workloads(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in compute_suite.GPU_WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown workload {', '.join(unknown) or '(none)'}; choose from "
                                          + ", ".join(compute_suite.GPU_WORKLOADS))
    return names


if __name__ == "__main__":
    raise SystemExit(main())
