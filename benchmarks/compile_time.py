"""Cold and warm first-call times of qgraph kernels per backend, each in a fresh process.

    python benchmarks/compile_time.py [--loops 50] [--runs 3] [--arch cpu|cuda] [--no-numba] [--gallery]
                                      [--json PATH]

For the bench's 8-task kernel and a kernel of `--loops` top-level loops (one task each:
`x_k[i] = x_k[i] * a + c_k`), each row is the first call in a new Python process: cold (empty
cache directories: everything compiles) and warm (the same directories again: everything
loads), with each process's peak memory; on the CPU, beside them, numba's own compile and
cache load of the same loops hand-written with `prange` in one function (`cache=True`).
Backends: cpu, and cuda when a GPU is usable (or the one `--arch` names). Medians over `--runs`
pairs of processes; `--json` also writes each figure's min and max. `--gallery` adds Taichi's gallery
programs (mpm88, Poisson, stable fluids, N-body), qgraph's ports against Taichi 1.7.4 in the same call,
cold and warm (bench.gallery_compile; benchmarks/gallery_compile.py runs them alone, with more options).
"""

from __future__ import annotations

import argparse
import json

from qgraph.bench import compile_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--loops",
        type=int,
        default=compile_time.MANY_LOOPS,
        help=f"top-level loops of the many-loop kernel (default {compile_time.MANY_LOOPS})",
    )
    parser.add_argument("--runs", type=int, default=3, help="pairs of cold and warm processes (default 3)")
    parser.add_argument("--arch", choices=("cpu", "cuda"), help="one backend (default: cpu, and cuda when usable)")
    parser.add_argument("--no-numba", action="store_true", help="skip numba's twin of the loops on the CPU")
    parser.add_argument("--gallery", action="store_true", help="also the gallery programs against Taichi (CUDA)")
    parser.add_argument("--json", metavar="PATH", help="write the rows, with each figure's min and max, to PATH")
    args = parser.parse_args()
    rows = compile_time.rows(args.loops, [args.arch] if args.arch else None, args.runs, numba=not args.no_numba)
    print(compile_time.table(rows).lstrip("\n"))
    if args.gallery:
        import importlib.util

        from qgraph.bench import gallery_compile

        taichi = importlib.util.find_spec("taichi") is not None  # else qgraph's rows alone
        gallery = gallery_compile.rows(args.runs, taichi=taichi, on_step=lambda what: print(what, flush=True))
        print(gallery_compile.table(gallery))
        rows = rows + gallery
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
