"""Reductions and the relax solver, side by side with hand-written CUDA C++ (and torch/CuPy/JAX).

    python benchmarks/reductions.py [--quick] [--json PATH] [--plot PATH]

The same section runs inside `python -m qgraph bench`; see qgraph/bench/reductions.py.
"""

from __future__ import annotations

import argparse
import json

import qgraph
from qgraph.bench import reductions
from qgraph.bench.kernels import warm_up_gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--plot", help="write the relax comparison as a PNG")
    args = parser.parse_args()
    qgraph.init()
    if qgraph.current_arch() == "cuda":
        warm_up_gpu(1.0)
    budget, repeat = (0.02, 3) if args.quick else (0.1, 5)
    red, relax, cpu = reductions.run(args.quick, budget, repeat)
    print(reductions.table(red, relax, cpu))
    if args.plot and relax:
        reductions.plot(relax, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(qgraph.device_info()), "reductions": red, "relax": relax, "cpu": cpu}, f, indent=1)


if __name__ == "__main__":
    main()
