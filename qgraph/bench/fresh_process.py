"""Fresh Python processes for first-call measurements: what a user's new process pays.

One child (`qgraph.bench.first_calls.main(MODE ...)` after timing `import qgraph`, printing one
JSON line) runs with its own cache directories, qgraph's, numba's and the CUDA driver's JIT cache
(CUDA_CACHE_PATH: without it a PTX linked once by any earlier run links from the driver's cache,
for every library), under one temporary directory: cold, the directories empty, so everything
compiles; then warm, a second process on the same directories, so everything loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

# variables of the caller's environment that would make a cold process warm or a warm one cold
_DROPPED = ("QGRAPH_CACHE", "QGRAPH_DUMP", "QGRAPH_ARCH", "NUMBA_DISABLE_JIT", "NUMBA_CACHE_DIR", "CUDA_CACHE_DISABLE",
            "CUDA_CACHE_PATH")


def import_timed_program(module: str) -> str:
    """A `python -c` program timing `import qgraph` before anything of qgraph is imported, then printing
    the JSON of `module.main(sys.argv[1:], import seconds)`."""
    return ("import json, sys, time; started = time.perf_counter(); import qgraph; "
            "imported = time.perf_counter() - started; "
            f"from {module} import main; print(json.dumps(main(sys.argv[1:], imported)))")


CHILD = import_timed_program("qgraph.bench.first_calls")  # the child's command line


def fresh_process(args: list[str], cache_dir: str, timeout: float = 1800) -> dict:
    """Run one child with `cache_dir` for its caches; its JSON result."""
    import qgraph

    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    env["QGRAPH_CACHE_DIR"] = os.path.join(cache_dir, "qgraph")
    env["NUMBA_CACHE_DIR"] = os.path.join(cache_dir, "numba")
    env["CUDA_CACHE_PATH"] = os.path.join(cache_dir, "cuda_jit")
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(qgraph.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
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
