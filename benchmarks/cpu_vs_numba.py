"""CPU: qgraph kernels vs the same loops hand-written with numba.njit(parallel=True).

    python benchmarks/cpu_vs_numba.py [--sizes 1e6 1e7]

Runs in one process with a fresh (cold) qgraph cache, so the first-call column is the
compile time of each side.
"""

from __future__ import annotations

import argparse
import os
import tempfile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    os.environ["QGRAPH_CACHE_DIR"] = tempfile.mkdtemp(prefix="qgraph-cold-")
    from qgraph.bench.cpu import cpu_table, run_cpu_suite

    rows = run_cpu_suite(sizes=tuple(int(s) for s in args.sizes), repeat=args.repeat)
    print(f"CPU, {os.cpu_count()} cores: per call, median of {args.repeat}")
    print(cpu_table(rows))


if __name__ == "__main__":
    main()
