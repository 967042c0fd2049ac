"""The child of bench.fresh_process: times first calls in this fresh process and prints one
JSON line, with the process's peak memory (its maximum resident set size).

Modes: `kernel ARCH TASKS` (the bench's T-task kernel, kernels_for(T).graph), `cpu-workloads
qgraph|numba` (the CPU suite's workloads, qgraph's kernels or their numba twins, cached), and
`numba-loops TASKS` (the T loops hand-written for numba in one function), and `gallery LIBRARY
PROGRAM VARIANT` (a gallery program's first step, qgraph's or Taichi's: bench.gallery_compile).
"""

from __future__ import annotations

import json
import os
import sys
import time


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


def main(argv: list[str], imported_s: float = 0.0) -> dict:
    """One mode's figures; `imported_s`: how long `import qgraph` took in this process (fresh_process)."""
    mode, *rest = argv
    if mode == "kernel":
        return _kernel(rest[0], int(rest[1]))
    if mode == "cpu-workloads":
        return _cpu_workloads(rest[0])
    if mode == "numba-loops":
        return _numba_loops(int(rest[0]))
    if mode == "gallery":
        from .gallery_compile import child

        library, program, variant, *arch = rest
        return child(library, program, "scalar" if variant == "-" else variant, imported_s, *arch)
    raise SystemExit(f"unknown mode {mode!r}: kernel ARCH TASKS, cpu-workloads qgraph|numba, numba-loops TASKS, "
                     "gallery LIBRARY PROGRAM VARIANT [ARCH]")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
