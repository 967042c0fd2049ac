"""`python -m qgraph.fuzz`: check random programs' gradients, print counts by verdict and by
feature, write the failing cases (sources, details) and a JSON summary; exit 1 on any wrong
gradient or crash."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from .check import FAILURES, VERDICTS, Result

REPRODUCE = '''

if __name__ == "__main__":  # reproduce: the fuzzer's check of this program (same fuzzer version)
    import sys

    from qgraph.fuzz.cli import main

    sys.exit(main(["--seeds", "{seed}", "--arch", "{arch}", "--verbose"{host}]))
'''


def parse_seeds(text: str) -> list[int]:
    """'0:2000' (a range), '17' (one), '3,17,40' (a list), or a mix of them joined by commas."""
    out: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.partition(":")
        out += list(range(int(lo), int(hi))) if sep else [int(lo)]
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m qgraph.fuzz",
                                description="Gradient fuzzer: random qgraph programs, their adjoint checked "
                                            "against float64 central differences.")
    p.add_argument("--seeds", default="0:100", help="programs to run: 0:2000, 17, or 3,17,40 (default 0:100)")
    p.add_argument("--arch", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--graph-while-host", action="store_true",
                   help="QGRAPH_GRAPH_WHILE=host: device loops run as the host fallback (CUDA)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (compiles dominate)")
    p.add_argument("--out", default=None, help="where failing cases and summary.json go (default: a temp dir)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per program before it counts as a crash")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no failing sources on the terminal")
    p.add_argument("--verbose", action="store_true", help="print every program's report, right ones included")
    p.add_argument("--shrink", action="store_true",
                   help="shrink each seed's program (in this process) to the fewest lines that keep its verdict")
    p.add_argument("--key", default="", help="with --shrink: a phrase the verdict's detail must keep")
    return p


def table(results: list[Result]) -> str:
    """Counts by verdict, then by feature (programs showing it, and their verdicts)."""
    counts = Counter(r.verdict for r in results)
    lines = ["verdict        programs"] + [f"{v:<14} {counts[v]:>8}" for v in VERDICTS]
    lines.append(f"{'total':<14} {len(results):>8}")
    by_feature: dict[str, Counter] = {}
    for r in results:
        for f in r.features:
            by_feature.setdefault(f, Counter())[r.verdict] += 1
    shown = [v[:5] for v in VERDICTS]
    lines += ["", f"{'feature':<26} {'total':>6} " + " ".join(f"{s:>6}" for s in shown)]
    for f in sorted(by_feature, key=lambda f: (-sum(by_feature[f].values()), f)):
        c = by_feature[f]
        lines.append(f"{f:<26} {sum(c.values()):>6} " + " ".join(f"{c[v]:>6}" for v in VERDICTS))
    return "\n".join(lines)


def write_out(out: Path, results: list[Result], args, seconds: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    host = ', "--graph-while-host"' if args.graph_while_host else ""
    for r in results:
        if r.verdict in FAILURES or r.verdict in ("invalid", "inconclusive"):
            detail = "\n".join(f"# {line}" for line in (r.report().split("\n--- source")[0]).splitlines())
            text = f"{detail}\n\n{r.source}" + REPRODUCE.format(seed=r.seed, arch=args.arch, host=host)
            (out / f"seed{r.seed}_{r.verdict}.py").write_text(text)
    summary = {"arch": args.arch, "graph_while_host": args.graph_while_host, "seeds": args.seeds,
               "seconds": round(seconds, 1), "counts": dict(Counter(r.verdict for r in results)),
               "results": [{k: v for k, v in asdict(r).items() if k != "source"} for r in
                           sorted(results, key=lambda r: r.seed)]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer; 1 when any program's gradient is wrong or it crashed, else 0."""
    args = _parser().parse_args(argv)
    if args.graph_while_host:
        os.environ["QGRAPH_GRAPH_WHILE"] = "host"  # before qgraph initialises in the workers
    seeds = parse_seeds(args.seeds)
    if args.shrink:
        return _shrink(seeds, args)
    out = Path(args.out or tempfile.mkdtemp(prefix=f"qgraph-fuzz-{args.arch}-"))
    from tqdm import tqdm

    from .runner import run_workers

    bar = tqdm(total=len(seeds), disable=args.quiet, unit="prog", dynamic_ncols=True)
    counts: Counter = Counter()

    def progress(r: Result) -> None:
        counts[r.verdict] += 1
        bar.update(1)
        bar.set_postfix_str(" ".join(f"{v}={counts[v]}" for v in VERDICTS if counts[v]))
        if args.verbose or (r.verdict in FAILURES and not args.quiet):
            bar.write(r.report())

    start = time.perf_counter()
    results = run_workers(seeds, args.arch, max(1, args.jobs), args.timeout, progress)
    seconds = time.perf_counter() - start
    bar.close()
    write_out(out, results, args, seconds)
    failed = sorted((r for r in results if r.verdict in FAILURES), key=lambda r: r.seed)
    print(table(results))
    print(f"\n{len(results)} programs in {seconds:.0f} s ({args.arch}"
          f"{', graph_while host' if args.graph_while_host else ''}); cases and summary.json in {out}")
    if failed:
        print("failing seeds: " + ", ".join(f"{r.seed} ({r.verdict})" for r in failed))
    return 1 if failed else 0


def _shrink(seeds: list[int], args) -> int:
    import qgraph

    from .shrink import shrink

    qgraph.init(args.arch)
    for seed in seeds:
        log = None if args.quiet else (lambda text, seed=seed: print(f"seed {seed}: {text}", file=sys.stderr))
        print(f"# seed {seed}, shrunk\n{shrink(seed, args.key, log=log)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
