"""The CPU backend beside other busy processes: qgraph at its defaults against the same kernel on one
numba thread, with 0, half and all of the cores kept busy by other CPU-bound processes.

    python benchmarks/cpu_busy.py [--n 256,1024] [--seconds 2] [--repeats 2] [--busy 0,half,all]
    python benchmarks/cpu_busy.py --mid-call [--n 256] [--passes 150000] [--after 1] [--repeats 2]

Each figure is the passes per second of a 2-D Jacobi sweep (float64, `qgraph.ndrange`, one task per
call) over n x n in a fresh process (NUMBA_NUM_THREADS=1 for the one-thread column, unset for the
default), measured for --seconds after a warm-up; the busy processes are `while True: pass` loops
started before and killed after. The ratio is default / one thread: at least 0.8 on a busy machine
(backends.cpu_forms.ThreadGovernor runs a parallel form on one thread while other processes hold
the cores), and what the cores give on a free one.

--mid-call: one long `graph_while` call instead (the README demo's shape: two sweeps a pass), the
busy processes (as many as cores) started --after seconds into it; passes per second of the whole
call. Its thread count is chosen as the call starts, on free cores, and kept for all its passes.
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


def mid_call_child(n: int, passes: int, after: float) -> None:
    import threading

    import numpy as np

    import qgraph

    qgraph.init("cpu")

    @qgraph.kernel(graph_while="flag")
    def relax(u, un, left, flag):
        for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
            un[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
        for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
            u[i, j] = 0.25 * (un[i - 1, j] + un[i + 1, j] + un[i, j - 1] + un[i, j + 1])
        left[0] -= 1
        flag[0] = 1 if left[0] > 0 else 0

    u = qgraph.from_numpy(np.random.default_rng(0).random((n, n)))
    un, flag = qgraph.from_numpy(u.to_numpy()), qgraph.ndarray(qgraph.i32, (1,))
    left = qgraph.from_numpy(np.zeros(1, np.int64))
    for _ in range(12):  # warm: compiled, and the thread governor's first trial over
        left.from_numpy(np.full(1, 200, np.int64))
        relax(u, un, left, flag)
        time.sleep(0.05)
    procs, cores = [], len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

    def load():
        time.sleep(after)
        procs.extend(subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores))

    left.from_numpy(np.full(1, passes, np.int64))
    threading.Thread(target=load, daemon=True).start()
    start = time.perf_counter()
    try:
        relax(u, un, left, flag)
        print(passes / (time.perf_counter() - start))
    finally:
        for p in procs:
            p.kill()


def _passes(threads: int | None, n: int, seconds: float, mid_call: tuple | None = None) -> float:
    env = dict(os.environ)
    env.pop("NUMBA_NUM_THREADS", None)
    if threads:
        env["NUMBA_NUM_THREADS"] = str(threads)
    child_args = ["--mid-call-child", str(n), *map(str, mid_call)] if mid_call else ["--child", str(n), str(seconds)]
    done = subprocess.run([sys.executable, __file__, *child_args], env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="256,1024", help="grid sizes, comma-separated")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per figure")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--busy", default="0,half,all", help="busy processes: numbers, 'half' or 'all' cores")
    parser.add_argument("--mid-call", action="store_true", help="one long graph_while call, load starting mid-way")
    parser.add_argument("--passes", type=int, default=150_000, help="--mid-call: the call's passes")
    parser.add_argument("--after", type=float, default=1.0, help="--mid-call: seconds before the load starts")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--mid-call-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(int(args.child[0]), float(args.child[1]))
    if args.mid_call_child:
        n, passes, after = args.mid_call_child
        return mid_call_child(int(n), int(passes), float(after))
    if args.mid_call:
        print(f"passes per second of one {args.passes}-pass graph_while call, every core busy from {args.after} s on")
        print(f"{'n':>6} {'1 thread':>10} {'default':>10} {'ratio':>6}")
        for n in (int(v) for v in args.n.split(",")):
            for _ in range(args.repeats):
                one = _passes(1, n, 0, (args.passes, args.after))
                default = _passes(None, n, 0, (args.passes, args.after))
                print(f"{n:>6} {one:>10.0f} {default:>10.0f} {default / one:>6.2f}")
        return None
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
