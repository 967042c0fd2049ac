"""What Ctrl-C checks cost plain CPU kernels: each kernel compiled with its parallel loop run
in timed chunks (a Ctrl-C check between them, lang.cpu.loops) and as one loop (as before),
timed side by side in interleaved rounds in one process.

    python benchmarks/cpu_interrupt_cost.py [--n 16777216] [--repeat 7]

Rows: the per-call cost on 256 elements, a memory-bound saxpy at 524,288 elements (two
chunks: the first is 262,144 iterations, so this size pays a second parallel launch on the
shortest loop) and at `n`, and a compute-bound loop (64 steps of a sin recurrence per
element, about 0.2 s per chunk). Each figure is the median
seconds per call; results are compared between the builds.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import qgraph
from qgraph.lang.cpu import loops as cpu_loops
from qgraph.tools.timing import interleaved_seconds

BUILDS = {"one loop": False, "chunked": True}


def saxpy(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def recurrence(x, y):
    for i in range(x.shape[0]):
        v = x[i]
        for _ in range(64):
            v = v * 0.999 + 0.001 * math.sin(v)
        y[i] = v


def _builds(fn, args) -> dict:
    """The kernel compiled once per build (codegen reads CHUNK_PARALLEL_LOOPS at the first call)."""
    kernels = {}
    for build, chunked in BUILDS.items():
        kernel = qgraph.kernel(fn)
        cpu_loops.CHUNK_PARALLEL_LOOPS = chunked
        try:
            kernel(*args())
        finally:
            cpu_loops.CHUNK_PARALLEL_LOOPS = True
        kernels[build] = kernel
    return kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 24, help="elements of the large memory-bound row")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    qgraph.init("cpu")

    def vectors(n):
        return lambda: (np.random.default_rng(0).random(n), np.zeros(n), 2.0)

    cases = {"per call (256 elements)": (saxpy, vectors(256)),
             "saxpy, 524,288 float64": (saxpy, vectors(1 << 19)),
             f"saxpy, {args.n:,} float64": (saxpy, vectors(args.n)),
             "sin recurrence, 1,048,576 float64": (recurrence, lambda: vectors(1 << 20)()[:2])}
    print("Ctrl-C checks on the CPU: median seconds per call, interleaved rounds (ratio to one loop)")
    print(f"{'case':<36}" + "".join(f"{build:>22}" for build in BUILDS))
    for label, (fn, make) in cases.items():
        kernels = _builds(fn, make)
        inputs = {build: make() for build in kernels}
        for build, kernel in kernels.items():
            kernel(*inputs[build])
        if not np.allclose(inputs["chunked"][1], inputs["one loop"][1]):
            raise SystemExit(f"{label}: the chunked build disagrees with the one-loop build")
        calls = {build: (lambda k=kernel, a=inputs[build]: k(*a)) for build, kernel in kernels.items()}
        seconds = interleaved_seconds(calls, budget=0.05, repeat=args.repeat, sync=qgraph.sync)
        base = seconds["one loop"]
        print(f"{label:<36}" + "".join(f"{seconds[b] * 1e6:>12.1f} us ({seconds[b] / base:4.2f}x)" for b in BUILDS))


if __name__ == "__main__":
    main()
