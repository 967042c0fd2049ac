"""Compute inside kernels: stencils, N-body and saxpy against hand-written CUDA C++ and numba.

    python benchmarks/compute.py [--quick] [--json PATH] [--arch cpu|cuda]

On a GPU: qgraph vs hand-written CUDA C++ side by side (interleaved rounds), then the CPU
part (qgraph's CPU backend vs hand-written numba.njit(parallel=True)).
"""

from __future__ import annotations

import argparse
import json

import qgraph
from qgraph.bench import compute_suite


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--arch", choices=("cpu", "cuda"))
    args = parser.parse_args()
    gpu = []
    qgraph.init(args.arch)
    if qgraph.current_arch() == "cuda":
        budget, repeat = (0.02, 3) if args.quick else (0.1, 7)
        gpu = compute_suite.gpu_rows(args.quick, budget, repeat)
        print(compute_suite.table(gpu, []), flush=True)
    qgraph.init("cpu")
    cpu = compute_suite.cpu_rows(args.quick)
    print(compute_suite.table([], cpu))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": gpu, "cpu": cpu}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
