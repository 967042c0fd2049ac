"""The CPU backend beside other busy processes: qgraph at its defaults against the same kernel on one
numba thread, with 0, half and all of the cores kept busy by other CPU-bound processes.

    python benchmarks/cpu_busy.py [--n 256,1024] [--seconds 2] [--repeats 2] [--busy 0,half,all]

Each figure is the passes per second of a 2-D Jacobi sweep (float64, `qgraph.ndrange`, one task per
call) over n x n in a fresh process (NUMBA_NUM_THREADS=1 for the one-thread column, unset for the
default), measured for --seconds after a warm-up; the busy processes are `while True: pass` loops
started before and killed after. The ratio is default / one thread: at least 0.8 on a busy machine
(backends.cpu_forms.ThreadGovernor runs a parallel form on one thread while other processes hold
the cores), and what the cores give on a free one.
"""

import argparse
import os
import subprocess
import sys
import time


def child(n: int, seconds: float) -> None:
    import numpy as np

    import qgraph

    qgraph.init("cpu")

    @qgraph.kernel
    def jacobi(u, v):
        for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
            v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])

    u = np.random.default_rng(0).random((n, n))
    v = u.copy()
    for _ in range(20):
        jacobi(u, v)
        jacobi(v, u)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(5):
            jacobi(u, v)
            jacobi(v, u)
        count += 10
    print(count / (time.perf_counter() - start))


def _passes(threads: int | None, n: int, seconds: float) -> float:
    env = dict(os.environ)
    env.pop("NUMBA_NUM_THREADS", None)
    if threads:
        env["NUMBA_NUM_THREADS"] = str(threads)
    done = subprocess.run([sys.executable, __file__, "--child", str(n), str(seconds)], env=env,
                          capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="256,1024", help="grid sizes, comma-separated")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per figure")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--busy", default="0,half,all", help="busy processes: numbers, 'half' or 'all' cores")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(int(args.child[0]), float(args.child[1]))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = {"half": max(1, cores // 2), "all": cores}
    busy_counts = sorted({counts.get(b, None) or int(b) for b in args.busy.split(",")})
    rows = []
    for busy in busy_counts:
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            time.sleep(0.3)
            for n in (int(s) for s in args.n.split(",")):
                for _ in range(args.repeats):
                    one = _passes(1, n, args.seconds)
                    default = _passes(None, n, args.seconds)
                    rows.append((busy, n, one, default))
        finally:
            for p in procs:
                p.kill()
    print(f"{cores} cores; passes per second of an n x n Jacobi sweep, one call a pass")
    print(f"{'busy':>5} {'n':>6} {'1 thread':>10} {'default':>10} {'ratio':>6}")
    for busy, n, one, default in rows:
        print(f"{busy:>5} {n:>6} {one:>10.0f} {default:>10.0f} {default / one:>6.2f}")


if __name__ == "__main__":
    main()
