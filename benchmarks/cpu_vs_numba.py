"""CPU: qgraph kernels vs the same loops hand-written with numba.njit(parallel=True).

    python benchmarks/cpu_vs_numba.py [--sizes 1e6 1e7] [--repeat 20] [--runs 3]

Per call: both sides in one process, in interleaved rounds (medians; a warning names any
figure whose rounds say the machine was busy). First call: each side in fresh processes,
cold (empty cache directories, a compile) and warm (the same directories again, a load).
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--repeat", type=int, default=20, help="rounds per figure")
    parser.add_argument("--runs", type=int, default=3, help="pairs of cold and warm processes per first call")
    args = parser.parse_args()
    from qgraph.bench.cpu import cpu_table, first_call_rows, first_call_table, run_cpu_suite
    from qgraph.bench.suite import Report
    from qgraph.tools.timing import busy_warning

    report = Report("cpu", {})
    report.cpu_rows = run_cpu_suite(sizes=tuple(int(s) for s in args.sizes), repeat=args.repeat)
    report.first_calls = first_call_rows(args.runs)
    print(f"CPU, {os.cpu_count()} cores: per call, median of {args.repeat} rounds")
    print(cpu_table(report.cpu_rows))
    print(first_call_table(report.first_calls))
    if report.busy():
        print(f"warning: {busy_warning(report.busy())}")


if __name__ == "__main__":
    main()
