"""The launch-overhead suite (the same as `python -m qgraph bench`), saving JSON and PNG.

    python benchmarks/launch_overhead.py [--quick] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import os

from qgraph.bench import suite
from qgraph.bench.progress import bars_wanted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    suite.main(quick=args.quick, json_path=os.path.join(args.out, "launch_overhead.json"),
               plot_path=os.path.join(args.out, "launch_overhead.png"), arch=None, show_progress=bars_wanted())


if __name__ == "__main__":
    main()
