"""First-call compile of the gallery programs, qgraph against Taichi, in fresh processes, on CUDA or the CPU.

    python benchmarks/gallery_compile.py [--runs 3] [--programs mpm88,poisson,stable_fluids,nbody]
                                         [--variants scalar,vector] [--arch cuda|cpu] [--no-taichi]
                                         [--json PATH]

Per program (mpm88 8192 particles, the Poisson solve 256x256 by Jacobi to 1e-5 capped at 400
sweeps, stable fluids 128x128, N-body 2048 bodies) and library, `runs` pairs of processes: cold
(empty cache directories: qgraph's, and Taichi's offline cache) and warm (the same again). Each
child times import, init, the first step and the best of three more; compile is the first step
minus the best. Taichi's twins: qgraph/bench/taichi_gallery.py.
"""

from __future__ import annotations

import argparse
import json

from qgraph.bench import gallery_compile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="pairs of cold and warm processes (default 3)")
    parser.add_argument("--programs", default=",".join(gallery_compile.PROGRAMS), help="comma-separated")
    parser.add_argument("--variants", default="scalar", help="qgraph spellings, comma-separated (scalar,vector)")
    parser.add_argument("--arch", choices=("cuda", "cpu"), default="cuda", help="backend of both libraries")
    parser.add_argument("--no-taichi", action="store_true", help="qgraph only")
    parser.add_argument("--json", metavar="PATH", help="write the rows, with each figure's min and max, to PATH")
    args = parser.parse_args()
    rows = gallery_compile.rows(args.runs, args.programs.split(","), tuple(args.variants.split(",")),
                                taichi=not args.no_taichi, on_step=lambda what: print(what, flush=True),
                                arch=args.arch)
    print(gallery_compile.table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
