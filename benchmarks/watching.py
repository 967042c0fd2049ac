"""Watching device loops: the cost of a qgraph.report per pass and of the cancel-word check on the
README's relax at 128^2 (also with the former condition kernel), and how soon kernel.cancel() stops
a loop, side by side in one process.

    python benchmarks/watching.py [--json PATH]

See qgraph/bench/watching.py and docs/watching.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

import qgraph
from qgraph.bench import watching
from qgraph.bench.kernels import warm_up_gpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--n", type=int, default=128)
    args = parser.parse_args()
    qgraph.init()
    if qgraph.current_arch() != "cuda":
        print("watching.py measures device loops: run it on a CUDA GPU", file=sys.stderr)
        return 1
    warnings.simplefilter("ignore", qgraph.FallbackWarning)
    warm_up_gpu(1.0)
    cost = watching.report_cost(args.n)
    cancel = watching.cancel_latency()
    print(f"device: {qgraph.device_info()}")
    print(
        f"relax {args.n}^2, passes {cost['passes']}, bit-identical {cost['bit_identical']}, "
        f"history rows {cost['history_rows']} (last pass {cost['history_last_pass']})"
    )
    for name, us in cost["us_per_pass"].items():
        low, high = cost["spread"][name]
        print(f"  {name:<24} {us:8.3f} us/pass  (spread {low:.3f}-{high:.3f})")
    us = cost["us_per_pass"]
    print(
        f"  report costs {us['relax + report'] - us['relax']:+.3f} us/pass; the cancel check "
        f"{us['relax'] - us['relax, no cancel check']:+.3f} us/pass (before: "
        f"{us['before: relax'] - us['before: no cancel check']:+.3f}, of which its clock without the bus read "
        f"{us['before: clock, no bus read'] - us['before: no cancel check']:+.3f}); relax now vs before "
        f"{us['relax'] - us['before: relax']:+.3f} us/pass"
    )
    for name, row in cancel.items():
        print(f"cancel -> stopped, {name:<14} median {row['median_ms']:.3f} ms, max {row['max_ms']:.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(qgraph.device_info()), "report_cost": cost, "cancel": cancel}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
