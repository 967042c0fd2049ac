"""Device control flow: nested qgraph.loop regions against a raw CUDA graph with the same nested
WHILE nodes, and graph_while with and without the runaway guard, side by side in one run.

    python benchmarks/control_flow.py [--quick] [--json PATH]

The same rows run inside `python -m qgraph bench`; see qgraph/bench/nested_loops.py and
qgraph/bench/suite.py (gpu_loop_rows).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

import qgraph
from qgraph.bench import nested_loops, suite
from qgraph.bench.kernels import warm_up_gpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    qgraph.init()
    if qgraph.current_arch() != "cuda":
        print("control_flow.py measures CUDA graphs: run it on a CUDA GPU", file=sys.stderr)
        return 1
    warm_up_gpu(1.0)
    budget, repeat = (0.02, 3) if args.quick else (0.1, 7)
    nested = nested_loops.rows(budget, repeat)
    loops = [row for t in (1, 8) for row in suite.gpu_loop_rows(t, 1000, budget, repeat)]
    print(nested_loops.table(nested))
    print(suite.table(suite.Report("cuda", {}, rows=loops)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(qgraph.device_info()), "nested": nested, "loops": [asdict(r) for r in loops]},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
