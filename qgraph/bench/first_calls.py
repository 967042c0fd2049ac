"""First calls measured in a fresh Python process: what a user's new process pays.

The parent side runs `python -m qgraph.bench.first_calls MODE ...` with its own cache
directories (qgraph's and numba's, under one temporary directory): cold, the directories
empty, so everything compiles; then warm, a second process on the same directories, so
everything loads. The child side times the first call(s) and prints one JSON line, with the
process's peak memory (its maximum resident set size).

Modes: `kernel ARCH TASKS` (the bench's T-task kernel, kernels_for(T).graph), `cpu-workloads
qgraph|numba` (the CPU suite's workloads, qgraph's kernels or their numba twins, cached), and
`numba-loops TASKS` (the T loops hand-written for numba in one function).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

# variables of the caller's environment that would make a cold process warm or a warm one cold
_DROPPED = ("QGRAPH_CACHE", "QGRAPH_DUMP", "QGRAPH_ARCH", "NUMBA_DISABLE_JIT", "NUMBA_CACHE_DIR")


def fresh_process(args: list[str], cache_dir: str, timeout: float = 1800) -> dict:
    """Run one child with `cache_dir` for its caches; its JSON result."""
    import qgraph

    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env["QGRAPH_CACHE_DIR"] = os.path.join(cache_dir, "qgraph")
    env["NUMBA_CACHE_DIR"] = os.path.join(cache_dir, "numba")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(qgraph.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    done = subprocess.run(
        [sys.executable, "-m", "qgraph.bench.first_calls", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"first call in a fresh process ({' '.join(args)}) failed with exit code "
            f"{done.returncode}:\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def cold_and_warm(args: list[str], runs: int = 1) -> tuple[list[dict], list[dict]]:
    """`runs` pairs of a cold process (empty cache directories) and a warm one (the same again)."""
    cold, warm = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="qgraph-first-call-") as cache_dir:
            cold.append(fresh_process(args, cache_dir))
            warm.append(fresh_process(args, cache_dir))
    return cold, warm


def _peak_mb() -> float:
    """This process's peak resident set size, MB. On Linux from VmHWM: getrusage's ru_maxrss of
    a child started by a larger process reports the parent's size (Linux carries the high-water
    mark across the fork and exec), so under the bench's 400 MB process every child read 400 MB."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB elsewhere


def _timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def _kernel(arch: str, tasks: int) -> dict:
    import qgraph

    from .kernels import kernels_for

    qgraph.init(arch)
    kernel = kernels_for(tasks).graph
    arrays = [qgraph.ndarray(qgraph.f32, (256,)) for _ in range(tasks)]
    qgraph.sync()
    seconds = _timed(lambda: (kernel(*arrays, 256, 1.0), qgraph.sync()))
    return {"seconds": seconds, "loaded_from_cache": kernel.stats.cache_loads > 0, "peak_mb": _peak_mb()}


def _cpu_workloads(side: str) -> dict:
    import numba

    import qgraph

    from . import cpu

    qgraph.init("cpu")
    found = {}
    for name, (q_kernel, q_args), (n_function, n_args) in cpu.workloads(1000):
        if side == "qgraph":
            found[name] = _timed(q_kernel, *q_args)
        else:  # the twin with numba's own cache, so that its warm process loads as qgraph's does
            found[name] = _timed(numba.njit(parallel=True, cache=True)(n_function.py_func), *n_args)
    return {"seconds": found, "peak_mb": _peak_mb()}


def _numba_loops(tasks: int) -> dict:
    import importlib.util

    import numpy as np

    from .kernels import numba_loops_source

    # a file beside the caches, written once: numba's cache is keyed by the file and its stamp
    path = os.path.join(os.path.dirname(os.environ["NUMBA_CACHE_DIR"]), f"numba_loops_{tasks}.py")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(numba_loops_source(tasks))
    spec = importlib.util.spec_from_file_location(f"numba_loops_{tasks}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # importable by name: numba's cached code refers to its module
    spec.loader.exec_module(module)
    arrays = [np.zeros(256, np.float32) for _ in range(tasks)]
    seconds = _timed(module.loops, *arrays, 256, np.float32(1.0))
    return {"seconds": seconds, "loaded_from_cache": bool(module.loops.stats.cache_hits), "peak_mb": _peak_mb()}


def main(argv: list[str]) -> dict:
    mode, *rest = argv
    if mode == "kernel":
        return _kernel(rest[0], int(rest[1]))
    if mode == "cpu-workloads":
        return _cpu_workloads(rest[0])
    if mode == "numba-loops":
        return _numba_loops(int(rest[0]))
    raise SystemExit(f"unknown mode {mode!r}: kernel ARCH TASKS, cpu-workloads qgraph|numba, numba-loops TASKS")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
