"""Cold and warm first-call times of qgraph kernels, each in a fresh process.

    python benchmarks/compile_time.py [--arch cpu|cuda] [--loops 8 50] [--repeat 2]

For a kernel of N top-level loops (one task each: `x_k[i] = x_k[i] * a + c_k`), each row is
the first call in a new Python process: cold (an empty compile cache: everything compiles)
and warm (the same cache again: everything loads), with the process's peak memory; beside
them numba's own cold compile of the same N loops hand-written with `prange` in one function
(numba's cache off, as a first compile). Medians over `--repeat` processes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_QGRAPH = r"""
import json, resource, sys, time
import numpy as np
import qgraph
from qgraph.bench.kernels import module_from_source
n_loops, arch = int(sys.argv[1]), sys.argv[2]
qgraph.init(arch)
params = ", ".join(f"x{k}" for k in range(n_loops))
body = "".join(f"    for i in range(n):\n        x{k}[i] = x{k}[i] * a + {k}.5\n" for k in range(n_loops))
module = module_from_source(f"compile_time_{n_loops}", f"import qgraph\n\n@qgraph.kernel\n"
                            f"def many({params}, n, a: qgraph.f32):\n{body}")
arrays = [qgraph.from_numpy(np.zeros(64, np.float32)) for _ in range(n_loops)]
qgraph.sync()
started = time.perf_counter()
module.many(*arrays, 64, np.float32(1.0))
qgraph.sync()
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "loaded": module.many.stats.cache_loads,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_NUMBA = r"""
import json, resource, sys, time
import numpy as np
import numba
n_loops = int(sys.argv[1])
params = ", ".join(f"x{k}" for k in range(n_loops))
body = "".join(f"    for i in numba.prange(n):\n        x{k}[i] = x{k}[i] * a + {k}.5\n" for k in range(n_loops))
ns = {"numba": numba}
exec(f"def many({params}, n, a):\n{body}", ns)
fn = numba.njit(parallel=True)(ns["many"])
arrays = [np.zeros(64, np.float32) for _ in range(n_loops)]
started = time.perf_counter()
fn(*arrays, 64, np.float32(1.0))
print(json.dumps({"seconds": time.perf_counter() - started,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _child(script: str, args: list[str], env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(n_loops: int, arch: str, repeat: int) -> dict:
    """Median cold and warm first calls of qgraph, and numba's cold compile, for n loops."""
    colds, warms, numbas, peaks = [], [], [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="qgraph-compile-time-") as cache:
            env = dict(os.environ, QGRAPH_CACHE_DIR=cache)
            cold = _child(_QGRAPH, [str(n_loops), arch], env)
            warm = _child(_QGRAPH, [str(n_loops), arch], env)
        if warm["loaded"] != 1:
            raise SystemExit(f"the warm run compiled instead of loading from the cache ({warm})")
        colds.append(cold["seconds"])
        warms.append(warm["seconds"])
        peaks.append(cold["peak_mb"])
        if arch == "cpu":
            numbas.append(_child(_NUMBA, [str(n_loops)], dict(os.environ, NUMBA_CACHE_DIR=tempfile.gettempdir()))
                          ["seconds"])
    return {"loops": n_loops, "arch": arch, "cold_s": statistics.median(colds), "warm_s": statistics.median(warms),
            "peak_mb": max(peaks), "numba_cold_s": statistics.median(numbas) if numbas else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--loops", type=int, nargs="+", default=[8, 50])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"first call of a kernel of N one-task loops on {args.arch}, each in a fresh process (median of "
          f"{args.repeat}):")
    print(f"{'loops':>6}{'qgraph cold s':>15}{'qgraph warm s':>15}{'peak MB (cold)':>16}{'numba cold s':>14}")
    for n in args.loops:
        r = measure(n, args.arch, args.repeat)
        numba = f"{r['numba_cold_s']:>14.2f}" if r["numba_cold_s"] is not None else f"{'-':>14}"
        print(f"{n:>6}{r['cold_s']:>15.2f}{r['warm_s']:>15.3f}{r['peak_mb']:>16.0f}{numba}")


if __name__ == "__main__":
    main()
