"""Start-up: the first call of an 8-task kernel in a fresh process, with a cold and a warm cache.

Each measurement runs in its own Python process (a fresh interpreter is what users start).
Cold: an empty QGRAPH_CACHE_DIR (numba/NVVM compile every task). Warm: the same directory
again (the compiled code is loaded; on CUDA numba is not even imported).

    python benchmarks/startup.py [--arch cuda|cpu] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import qgraph
t1 = time.perf_counter()
qgraph.init(sys.argv[1])
t2 = time.perf_counter()
from qgraph.bench.kernels import kernels_for
module = kernels_for(8)
arrays = [qgraph.ndarray(qgraph.f32, (256,)) for _ in range(8)]
t3 = time.perf_counter()
module.graph(*arrays, 256, 1.0)
qgraph.sync()
t4 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "init_s": t2 - t1, "first_call_s": t4 - t3, "total_s": t4 - t0,
                  "numba_imported": "numba" in sys.modules}))
"""


def measure(arch: str, cache_dir: str) -> dict:
    env = dict(os.environ, QGRAPH_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", CHILD, arch], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    results = {"cold": [], "warm": []}
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            results["cold"].append(measure(args.arch, cache))
            results["warm"].append(measure(args.arch, cache))
    print(f"first call of an 8-task kernel in a fresh process ({args.arch}), median of {args.runs}:")
    print(f"{'cache':<6}{'import s':>10}{'init s':>9}{'first call s':>14}{'total s':>10}  numba imported")
    for kind, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("import_s", "init_s", "first_call_s", "total_s")}
        print(f"{kind:<6}{med['import_s']:>10.3f}{med['init_s']:>9.3f}{med['first_call_s']:>14.3f}"
              f"{med['total_s']:>10.3f}  {any(r['numba_imported'] for r in runs)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
