"""Compare `python -m qgraph bench --json` reports of two trees, run alternately in one session.

    python benchmarks/compare_bench.py --base base1.json base2.json --new new1.json new2.json [--over 3]

Every time in the reports (a number under a key ending in `us`, `ms` or `us_per_iteration`; the
spread's `_min`/`_max` and ratios aside) becomes a row named by its path, list items named by their
text fields (group, mode, kernel, ...) and sizes. Per row: the median over each tree's runs, and
new / base. Prints the rows slower than `--over` percent, then a summary; exits 1 if any is.
Run the trees alternately (B A B A) so drift of the machine falls on both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

TIME_SUFFIXES = ("us", "ms", "us_per_iteration")
SKIP_SUFFIXES = ("_min", "_max")
BASELINES = ("CUDA C++", "JAX", "jax", "torch", "cupy", "CuPy", "numba", "floor", "raw", "cuda_core", "copy_us",
             "C++", "hand")


def _label(item: dict) -> str:
    """A list item's name: its text and integer fields (the row's identity), in order."""
    parts = [f"{k}={v}" for k, v in item.items()
             if isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))]
    return ",".join(parts)


def times(report, path: str = "") -> dict[str, float]:
    """Every time in a report, by its row path."""
    found: dict[str, float] = {}
    if isinstance(report, dict):
        for key, value in report.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if key.endswith(TIME_SUFFIXES) and not key.endswith(SKIP_SUFFIXES):
                    found[f"{path}/{key}"] = float(value)
            else:
                found.update(times(value, f"{path}/{key}"))
    elif isinstance(report, list):
        for k, item in enumerate(report):
            name = _label(item) if isinstance(item, dict) else ""
            found.update(times(item, f"{path}[{name or k}]"))
    return found


def compare(base: list[dict], new: list[dict]) -> list[tuple[str, float, float, float]]:
    """(row, base median, new median, new / base) for each row every report has."""
    base_times, new_times = [times(r) for r in base], [times(r) for r in new]
    rows = set.intersection(*(set(t) for t in base_times + new_times))
    out = []
    for row in sorted(rows):
        b = statistics.median(t[row] for t in base_times)
        n = statistics.median(t[row] for t in new_times)
        if b > 0:
            out.append((row, b, n, n / b))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", nargs="+", required=True, help="the base tree's reports")
    parser.add_argument("--new", nargs="+", required=True, help="the new tree's reports")
    parser.add_argument("--over", type=float, default=3.0, help="report rows slower than this many percent")
    parser.add_argument("--qgraph-only", action="store_true",
                        help="leave out the baselines' rows (hand-written CUDA C++, PyTorch, JAX, CuPy, numba, raw "
                             "driver launches): what the trees themselves run")
    args = parser.parse_args(argv)
    rows = compare([json.load(open(p)) for p in args.base], [json.load(open(p)) for p in args.new])
    if args.qgraph_only:
        rows = [r for r in rows if not any(b in r[0] for b in BASELINES)]
    slower = [r for r in rows if r[3] > 1 + args.over / 100]
    for row, b, n, ratio in sorted(slower, key=lambda r: -r[3]):
        print(f"{ratio:6.3f}x  {b:12.3f} -> {n:12.3f}  {row}")
    ratios = [r[3] for r in rows]
    print(f"{len(rows)} rows: median new/base {statistics.median(ratios):.3f}, fastest {min(ratios):.3f}, "
          f"slowest {max(ratios):.3f}; {len(slower)} slower than +{args.over:g}%")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
