"""Where the cold compile of a CUDA specialisation goes, measured offline (no GPU, no driver).

The child (`CHILD` below, run by benchmarks/cuda_compile_offline.py in a fresh process with an
empty QGRAPH_CACHE_DIR) imports qgraph, decorates the bench's T-task kernel
(kernels_for(T).graph), imports numba-cuda, then runs `compiler.cuda_program.build_program` for
the key a call with T float32 arrays of 256 elements gets on CUDA: qgraph's code generation,
numba-cuda and NVVM, the PTX handling, a link by ptxas and nvlink standing in for the driver's
JIT linker, the cache write. Each phase's time is exclusive (a phase called inside another is
taken out of it), so the phases add up to the compile's total.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from .fresh_process import import_timed_program

OTHER = "qgraph other"  # build_program's own time outside every named phase


class PhaseTimer:
    """Exclusive wall time per phase, by wrapping functions (restored by `restore`)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[list] = []  # [phase, started, time spent in nested phases]
        self._saved: list[tuple[object, str, object]] = []

    def wrap(self, owner, attribute: str, phase) -> None:
        """Time calls of `owner.attribute` as `phase` (a name, or a function of the call's arguments)."""
        original = owner.__dict__[attribute] if isinstance(owner, type) else getattr(owner, attribute)
        timer = self

        def timed(*args, **kwargs):
            with timer.phase(phase(*args, **kwargs) if callable(phase) else phase):
                return original(*args, **kwargs)

        self._saved.append((owner, attribute, original))
        setattr(owner, attribute, timed)

    def phase(self, name: str):
        timer = self

        class _Phase:
            def __enter__(self):
                timer._stack.append([name, time.perf_counter(), 0.0])

            def __exit__(self, *exc):
                phase, started, nested = timer._stack.pop()
                spent = time.perf_counter() - started
                timer.seconds[phase] = timer.seconds.get(phase, 0.0) + spent - nested
                timer.calls[phase] = timer.calls.get(phase, 0) + 1
                if timer._stack:
                    timer._stack[-1][2] += spent

        return _Phase()

    def restore(self) -> None:
        for owner, attribute, original in reversed(self._saved):
            setattr(owner, attribute, original)
        self._saved.clear()


def offline_link(ptx_list: list[tuple[str, str]], cc: tuple[int, int]) -> bytes:
    """One cubin from PTX sources with `ptxas -c` each and `nvlink` (what cuLinkAddData and
    cuLinkComplete do in the driver); the PTX itself when the tools are not on PATH."""
    ptxas, nvlink = shutil.which("ptxas"), shutil.which("nvlink")
    if not (ptxas and nvlink):
        return "".join(ptx for _, ptx in ptx_list).encode()
    arch = f"-arch=sm_{cc[0]}{cc[1]}"
    with tempfile.TemporaryDirectory(prefix="qgraph-link-") as d:
        objects = []
        for k, (_, ptx) in enumerate(ptx_list):
            source, obj = os.path.join(d, f"{k}.ptx"), os.path.join(d, f"{k}.o")
            with open(source, "w") as f:
                f.write(ptx)
            subprocess.run([ptxas, arch, "-c", source, "-o", obj], check=True, capture_output=True)
            objects.append(obj)
        cubin = os.path.join(d, "all.cubin")
        subprocess.run([nvlink, arch, *objects, "-o", cubin], check=True, capture_output=True)
        with open(cubin, "rb") as f:
            return f.read()


def _qgraph_points(timer: PhaseTimer) -> None:
    from ..compiler import cuda_program, ptx_text
    from ..compiler.code_cache import CodeCache

    timer.wrap(cuda_program, "task_codes", "qgraph codegen")
    timer.wrap(cuda_program, "lower_funcs", "qgraph codegen")
    timer.wrap(cuda_program, "fingerprint_of", "qgraph codegen")
    timer.wrap(cuda_program.generated, "run_tree", "qgraph codegen")
    timer.wrap(cuda_program, "toolchain_versions", "cache key (toolchain versions)")
    timer.wrap(CodeCache, "load", "cache lookup")
    timer.wrap(CodeCache, "store", "cache write")
    for name in ("ptx_entries", "add_grid_dependency_control", "renamed"):
        timer.wrap(ptx_text, name, "PTX handling")
    adapter = cuda_program.adapter
    timer.wrap(adapter, "cuda_namespace", "numba-cuda setup (namespace, device functions)")
    timer.wrap(adapter, "cuda_device_function", "numba-cuda setup (namespace, device functions)")
    timer.wrap(adapter, "cuda_kernel_library", "numba-cuda compile driver (outside passes)")
    timer.wrap(adapter, "cuda_libraries_ptx", "IR text for NVVM")


CHILD = import_timed_program("qgraph.bench.cuda_compile")  # the child's command line (main below)


def profile(tasks: int, cc: tuple[int, int], cprofile: int = 0) -> dict:
    """Seconds per phase of this fresh process's first compile of the T-task kernel for `cc`
    (`cprofile`: print that many of cProfile's top functions to stderr)."""
    found: dict[str, float] = {}
    import numpy as np

    from ..backends.inspection import offline_key
    from ..compiler import cuda_program
    from ..compiler import numba_adapter as adapter
    from ..compiler.code_cache import CodeCache
    from ..runtime import settings
    from .kernels import kernels_for

    started = time.perf_counter()
    kernel = kernels_for(tasks).graph
    found["qgraph frontend (decoration)"] = time.perf_counter() - started
    started = time.perf_counter()
    import numba.cuda  # noqa: F401  (qgraph imports it on its first compile)

    found["import numba-cuda"] = time.perf_counter() - started
    key = offline_key(tuple(np.zeros(256, np.float32) for _ in range(tasks)) + (256, np.float32(1.0)))
    environ = settings.Settings.from_environ()
    cache = CodeCache(environ.cache_dir)
    timer = PhaseTimer()
    _qgraph_points(timer)
    for owner, attribute, phase in adapter.compile_phase_points():
        timer.wrap(owner, attribute, phase)
    profiler = None
    if cprofile:
        import cProfile

        profiler = cProfile.Profile()
    started = time.perf_counter()
    with adapter.assumed_compute_capability(cc), timer.phase(OTHER):
        if profiler is not None:
            profiler.enable()
        program = cuda_program.build_program(kernel.source, key, cc, lambda ptx: _link(timer, ptx, cc), cache,
                                             kernel.options.resolved(environ))
        if profiler is not None:
            profiler.disable()
    found["compile (build_program)"] = time.perf_counter() - started
    timer.restore()
    if profiler is not None:
        import pstats

        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(cprofile)
    return {"phases": found | {f"  {k}": v for k, v in sorted(timer.seconds.items(), key=lambda kv: -kv[1])},
            "calls": timer.calls, "entries": len(program.entries), "cubin_bytes": program.images.nbytes,
            "cached": program.cached}


def _link(timer: PhaseTimer, ptx_list, cc) -> bytes:
    with timer.phase("link (ptxas + nvlink, offline)"):
        return offline_link(ptx_list, cc)


def main(argv: list[str], imported: float) -> dict:
    """CHILD's entry: TASKS CC [CPROFILE]; its figures (CHILD prints them as one JSON line)."""
    tasks, cc = int(argv[0]), tuple(int(p) for p in argv[1].split("."))
    found = profile(tasks, cc, int(argv[2]) if len(argv) > 2 else 0)
    found["phases"] = {"import qgraph": imported} | found["phases"]
    return found


def fresh_profile(tasks: int, cc: tuple[int, int], cprofile: int = 0) -> dict:
    """`profile` in a new Python process with an empty cache directory (cProfile's table to stderr)."""
    import qgraph

    package_root = os.path.dirname(os.path.dirname(os.path.abspath(qgraph.__file__)))
    with tempfile.TemporaryDirectory(prefix="qgraph-cuda-compile-") as cache:
        env = {k: v for k, v in os.environ.items() if k not in ("QGRAPH_CACHE", "QGRAPH_DUMP", "QGRAPH_ARCH")}
        env["QGRAPH_CACHE_DIR"] = cache
        env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        done = subprocess.run([sys.executable, "-c", CHILD, str(tasks), f"{cc[0]}.{cc[1]}", str(cprofile)],
                              env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the offline compile failed:\n{done.stderr[-3000:]}")
    sys.stderr.write(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])
