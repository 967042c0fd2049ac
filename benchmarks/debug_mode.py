"""What debug mode costs: the same kernels compiled normally, bounds-checked (debug=True) and
with finiteness checks too (debug="nan"), timed side by side in interleaved rounds.

    python benchmarks/debug_mode.py [--n 16777216] [--arch cpu|cuda]

Rows: the per-call cost of a 1-task graph kernel on a small array (on CUDA a debug call also
waits for the device and reads the check record back), a memory-bound saxpy over `n` float32
elements, and a 2-D five-point stencil. Each figure is the median seconds per call; the
ratio is against the normal build. Results are compared with the normal build's.
"""

from __future__ import annotations

import argparse

import numpy as np

import qgraph
from qgraph.bench.kernels import warm_up_gpu
from qgraph.tools.timing import interleaved_seconds

MODES = {"normal": False, "debug": True, "debug=nan": "nan"}


def saxpy(x, y, a: qgraph.f32):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def stencil(u, out):
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


def _variants(fn) -> dict:
    return {mode: qgraph.kernel(cuda_graph=True, debug=debug)(fn) for mode, debug in MODES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 24, help="elements of the memory-bound rows")
    parser.add_argument("--arch", default=None)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    qgraph.init(args.arch)
    arch = qgraph.current_arch()
    if arch == "cuda":
        warm_up_gpu()
    def rng():
        return np.random.default_rng(0)  # every mode gets the same inputs

    side = int(args.n ** 0.5)
    cases = {
        "per call (256 elements)": (_variants(saxpy), lambda: (qgraph.from_numpy(rng().random(256, np.float32)),
                                                             qgraph.from_numpy(np.zeros(256, np.float32)),
                                                             np.float32(2.0))),
        f"saxpy, {args.n:,} float32": (_variants(saxpy), lambda: (qgraph.from_numpy(rng().random(args.n, np.float32)),
                                                                qgraph.from_numpy(np.zeros(args.n, np.float32)),
                                                                np.float32(2.0))),
        f"stencil, {side}x{side} float32": (_variants(stencil),
                                            lambda: (qgraph.from_numpy(rng().random((side, side), np.float32)),
                                                     qgraph.from_numpy(np.zeros((side, side), np.float32)))),
    }
    print(f"debug mode on {arch}: median seconds per call, interleaved rounds (ratio to normal)")
    print(f"{'case':<34}" + "".join(f"{mode:>22}" for mode in MODES))
    for label, (kernels, make) in cases.items():
        inputs = {mode: make() for mode in kernels}
        for mode, kernel in kernels.items():
            kernel(*inputs[mode])  # compile, then check against the normal build
        reference = inputs["normal"][1].to_numpy()
        for mode in kernels:
            if not np.allclose(inputs[mode][1].to_numpy(), reference, rtol=1e-6):
                raise SystemExit(f"{label}: the {mode} build disagrees with the normal build")
        calls = {mode: (lambda k=kernel, a=inputs[mode]: k(*a)) for mode, kernel in kernels.items()}
        seconds = interleaved_seconds(calls, budget=0.05, repeat=args.repeat, sync=qgraph.sync)
        base = seconds["normal"]
        print(f"{label:<34}" + "".join(f"{seconds[m] * 1e6:>12.1f} us ({seconds[m] / base:4.2f}x)" for m in MODES))


if __name__ == "__main__":
    main()
