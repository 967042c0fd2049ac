"""Fast math against accuracy: the measurement behind QGRAPH_FAST_MATH's default.

    python benchmarks/fast_math.py [--n 16384]

Side by side in one run: an all-pairs force kernel (float32, one thread per body, division
and square root in the inner loop) compiled strict and with fast_math=True, timed in
interleaved rounds, with each result's error against a float64 NumPy reference; and the
examples' errors against their NumPy references with fast math off and on.
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np

import qgraph
from qgraph.tools.timing import interleaved_seconds

EPS = np.float32(1e-2)
ONE = np.float32(1.0)


def forces(px, py, pz, m, ax, ay, az):
    for i in range(px.shape[0]):
        fx = px[i] - px[i]
        fy = fx
        fz = fx
        for j in range(px.shape[0]):
            dx = px[j] - px[i]
            dy = py[j] - py[i]
            dz = pz[j] - pz[i]
            r2 = dx * dx + dy * dy + dz * dz + EPS
            s = m[j] * (ONE / (r2 * math.sqrt(r2)))
            fx += dx * s
            fy += dy * s
            fz += dz * s
        ax[i] = fx
        ay[i] = fy
        az[i] = fz


strict = qgraph.kernel(fast_math=False)(forces)
fast = qgraph.kernel(fast_math=True)(forces)


def reference(p: list, m: np.ndarray, rows: np.ndarray) -> np.ndarray:
    d = [q[None, :].astype(np.float64) - q[rows, None] for q in p]
    r2 = sum(x * x for x in d) + np.float64(EPS)
    s = m[None, :] / (r2 * np.sqrt(r2))
    return np.stack([(x * s).sum(axis=1) for x in d], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384)
    args = parser.parse_args()
    qgraph.init()
    n = args.n if qgraph.current_arch() == "cuda" else min(args.n, 4096)
    rng = np.random.default_rng(0)
    host = [rng.random(n, dtype=np.float32) for _ in range(4)]
    dev = [qgraph.from_numpy(a) for a in host]
    outs = {name: [qgraph.ndarray(qgraph.f32, (n,)) for _ in range(3)] for name in ("strict", "fast")}
    calls = {"strict": lambda: strict(*dev, *outs["strict"]), "fast": lambda: fast(*dev, *outs["fast"])}
    times = interleaved_seconds(calls, 0.2, 5, qgraph.sync)
    rows = np.arange(0, n, max(1, n // 256))
    ref = reference(host[:3], host[3], rows)
    print(f"all-pairs forces, N={n}, float32, on {qgraph.current_arch()}:")
    for name, t in times.items():
        got = np.stack([o.to_numpy()[rows] for o in outs[name]], axis=1)
        error = np.abs(got - ref).max() / np.abs(ref).max()
        pairs = n * n / t / 1e9
        print(f"  {name:<6} {t * 1e3:8.3f} ms  {pairs:7.1f} G pairs/s  max rel. error {error:.1e}")
    print(f"  fast math is {times['strict'] / times['fast']:.2f}x faster")

    from qgraph.examples import heat_diffusion, jacobi, particles

    print("examples, error against their NumPy references (float64):")
    for setting in ("0", "1"):
        os.environ["QGRAPH_FAST_MATH"] = setting
        qgraph.init(qgraph.current_arch())
        heat = heat_diffusion.run(n=128, check=True)
        jac = jacobi.run(n=200)
        part = particles.run(n=2000, steps=100, pairwise=True, check=True)
        print(f"  QGRAPH_FAST_MATH={setting}: heat {heat.reference_error:.1e}, jacobi {jac.error:.1e} "
              f"({jac.iterations} iterations), particles {part.max_error:.1e}")


if __name__ == "__main__":
    main()
