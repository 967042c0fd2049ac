"""Vectors and structs: the examples' vector variants against their scalar twins (on the
backend qgraph runs on, then on the CPU), and a struct argument's per-call cost against
its arrays passed separately; each pair timed in interleaved rounds in one run.

    python benchmarks/vectors.py [--quick] [--json PATH]

The same sections run inside `python -m qgraph bench`; see qgraph/bench/examples_bench.py and
qgraph/bench/struct_bench.py.
"""

from __future__ import annotations

import argparse
import json

import qgraph
from qgraph.bench import examples_bench, struct_bench
from qgraph.bench.kernels import warm_up_gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    qgraph.init()
    arch = qgraph.current_arch()
    if arch == "cuda":
        warm_up_gpu(1.0)
    budget, repeat = (0.05, 3) if args.quick else (0.2, 7)
    structs = struct_bench.rows(budget, repeat)
    examples = examples_bench.run(args.quick, budget, repeat)
    print(struct_bench.table(structs, arch))
    print(examples_bench.table(examples))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(qgraph.device_info()), "structs": structs, "examples": examples}, f, indent=1)


if __name__ == "__main__":
    main()
