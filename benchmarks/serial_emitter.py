"""The CPU's serial form compiled by qgraph's LLVM emitter against numba's compile of the same code.

    python benchmarks/serial_emitter.py [--compiles 5] [--repeat 7] [--sizes 100 100000]

For each kernel, in one process (numba imported and warmed by a throwaway kernel first, so both
sides pay only the kernel's own compile): the first call's compile of the serial form, emitted
(QGRAPH_EMITTER=1) and by numba (QGRAPH_EMITTER=0), alternating, with the compile cache off
(median of --compiles); then the time per call of each compiled form at each size (the serial form
runs every call below cpu_serial_below, set above the largest size, on one numba thread so that
no call moves to the parallel form), median of --repeat rounds, and whether the two forms' results
are equal bit for bit.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import numpy as np

os.environ["QGRAPH_CACHE"] = "0"  # every first call compiles
os.environ["NUMBA_NUM_THREADS"] = "1"  # the serial form runs every call (read when numba is imported)

import qgraph  # noqa: E402

BELOW = 1 << 18


def saxpy(x, y, a: float):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def dot(x, y, out):
    for i in range(x.shape[0]):
        out[0] += x[i] * y[i]


def stencil(u, v, c: float):
    for i in range(1, u.shape[0] - 1):
        v[i] = u[i] + c * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    for i in range(1, u.shape[0] - 1):
        u[i] = v[i]


@qgraph.func
def _soft(r, eps):
    return 1.0 / math.sqrt(r * r + eps)


def eight_tasks(x, y, z, a: float):
    for i in range(x.shape[0]):
        y[i] = x[i] * a
    for i in range(x.shape[0]):
        z[i] = y[i] + _soft(x[i], 0.01)
    for i in range(x.shape[0]):
        x[i] = z[i] - y[i] * 0.5
    for i in range(x.shape[0]):
        y[i] = max(x[i], 0.0) + min(z[i], 1.0)
    for i in range(x.shape[0]):
        z[i] = math.exp(-abs(y[i]))
    for i in range(x.shape[0]):
        x[i] = x[i] + z[i] if y[i] > 0.5 else x[i] - z[i]
    for i in range(x.shape[0]):
        y[i] = x[i] ** 2
    for i in range(x.shape[0]):
        z[i] = y[i] * 0.25


def _warm(x):
    for i in range(x.shape[0]):
        x[i] += 1.0


def _arguments(name: str, n: int, rng) -> tuple:
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    if name == "saxpy":
        return (x, y, 1.5)
    if name == "dot":
        return (x, y, np.zeros(1))
    if name == "stencil":
        return (x, np.zeros(n), 0.2)
    return (x, y, rng.standard_normal(n), 0.7)


KERNELS = {"saxpy": saxpy, "dot": dot, "stencil": stencil, "8 tasks": eight_tasks}


def _kernel(function, emitter: str):
    """A new kernel of `function` (its first call compiles), compiled with QGRAPH_EMITTER=`emitter`."""
    os.environ["QGRAPH_EMITTER"] = emitter
    return qgraph.kernel(cpu_serial_below=BELOW)(function)


def _first_call(kernel, args) -> float:
    start = time.perf_counter()
    kernel(*args)
    return time.perf_counter() - start


def _per_call(kernel, args, calls: int) -> float:
    kernel(*args)
    start = time.perf_counter()
    for _ in range(calls):
        kernel(*args)
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compiles", type=int, default=5, help="first calls per side and kernel (median)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds per per-call figure (median)")
    parser.add_argument("--sizes", nargs="+", type=int, default=[100, 100_000])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    qgraph.init("cpu")
    _kernel(_warm, "0")(np.zeros(8))  # numba imported, its registries loaded
    sides = {"emitted": "1", "numba": "0"}
    print("serial form: first-call compile (ms, median) and time per call (us, median); one process, cache off")
    print(f"{'kernel':10} {'emitted ms':>10} {'numba ms':>9} {'ratio':>6}"
          + "".join(f" {'n=' + str(n) + ' emit/numba us':>28}" for n in args.sizes) + "  same bits")
    for name, function in KERNELS.items():
        compiles = {side: [] for side in sides}
        for _ in range(args.compiles):
            for side, value in sides.items():
                compiles[side].append(_first_call(_kernel(function, value), _arguments(name, 16, rng)))
        emitted, numba = (statistics.median(compiles[s]) * 1e3 for s in sides)
        cells, same = [], True
        for n in args.sizes:
            calls = max(3, min(2000, int(2e6 / n)))
            data = _arguments(name, n, np.random.default_rng(n))
            kernels, state = {}, {}
            for side, value in sides.items():
                kernels[side] = _kernel(function, value)
                state[side] = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in data)
                kernels[side](*state[side])  # compiled, and one call's results to compare
            same &= all(np.array_equal(a.view(np.uint8), b.view(np.uint8))
                        for a, b in zip(*(tuple(a for a in state[s] if isinstance(a, np.ndarray)) for s in sides)))
            per = {side: [] for side in sides}
            for _ in range(args.repeat):  # interleaved rounds
                for side in sides:
                    per[side].append(_per_call(kernels[side], state[side], calls))
            e, m = (statistics.median(per[s]) * 1e6 for s in sides)
            cells.append(f"{e:10.2f} / {m:8.2f} ({e / m:4.2f}x)")
        print(f"{name:10} {emitted:10.1f} {numba:9.1f} {emitted / numba:5.2f}x" + "".join(f" {c:>28}" for c in cells)
              + f"  {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
