"""Where the cold compile of a CUDA kernel specialisation goes, without a GPU.

    python benchmarks/cuda_compile_offline.py [--tasks 8] [--runs 3] [--cc 9.0] [--cprofile N] [--json PATH]

Each run is a fresh process with an empty QGRAPH_CACHE_DIR that compiles the bench's T-task
kernel (the one benchmarks/compile_time.py times on the GPU) for compute capability `--cc` as
the CUDA backend does, up to a cubin, with numba-cuda and NVVM (the CUDA toolkit, no driver):
qgraph.bench.cuda_compile. The link is ptxas and nvlink (the driver's JIT linker on a GPU).
Prints each phase's median exclusive time; `--cprofile N` prints cProfile's top N functions
of the compile (to stderr; slows it down).
"""

from __future__ import annotations

import argparse
import json
import statistics

from qgraph.bench.cuda_compile import fresh_profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8, help="tasks of the kernel (default 8)")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes (default 3)")
    parser.add_argument("--cc", default="9.0", help="compute capability to compile for (default 9.0)")
    parser.add_argument("--cprofile", type=int, default=0, metavar="N", help="print cProfile's top N functions")
    parser.add_argument("--json", metavar="PATH", help="write every run's phases to PATH")
    args = parser.parse_args()
    cc = tuple(int(p) for p in args.cc.split("."))
    runs = [fresh_profile(args.tasks, cc, args.cprofile) for _ in range(args.runs)]
    names = list(dict.fromkeys(name for run in runs for name in run["phases"]))
    print(f"offline cold compile of the {args.tasks}-task kernel for sm_{cc[0]}{cc[1]}, s (median of "
          f"{args.runs} fresh processes; indented: the compile's phases, exclusive)")
    for name in names:
        seconds = statistics.median(run["phases"].get(name, 0.0) for run in runs)
        print(f"  {name:<50}{seconds:>8.3f}")
    total = statistics.median(sum(v for k, v in run["phases"].items() if not k.startswith(" ")) for run in runs)
    print(f"  {'total':<50}{total:>8.3f}")
    last = runs[-1]
    print(f"  ({last['entries']} entries, {last['cubin_bytes']} cubin bytes)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
