"""Compute inside kernels: stencils, N-body and saxpy against hand-written CUDA C++ and numba.

    python benchmarks/compute.py [--quick] [--json PATH] [--plot PATH] [--arch cpu|cuda]

On a GPU: qgraph vs hand-written CUDA C++ side by side (interleaved rounds), then the CPU
part (qgraph's CPU backend vs hand-written numba.njit(parallel=True)); without one, or
with --arch cpu, the CPU part only. Exits with 1 when a qgraph result disagrees with the
hand-written one.
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
    args = parser.parse_args()
    gpu = []
    qgraph.init(args.arch)
    if qgraph.current_arch() == "cuda":
        budget, repeat = (0.02, 3) if args.quick else (0.1, 7)
        gpu = compute_suite.gpu_rows(args.quick, budget, repeat)
        print(compute_suite.table(gpu, []), flush=True)
    else:
        print("(no CUDA GPU in use: the CPU part only)", flush=True)
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


if __name__ == "__main__":
    raise SystemExit(main())
