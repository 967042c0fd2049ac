"""First-call compile of the gallery programs (mpm88, Poisson, stable fluids, N-body), qgraph against
Taichi, each library in its own fresh process with an empty cache (cold) and then the same cache
again (warm).

A child imports its library, initialises it on the arch (CUDA, or the CPU: Taichi's LLVM x64 backend against
qgraph's), builds the program's state, then times the
first step (everything compiles) and the best of three more (compile excluded): the compile is
their difference. Import and init are timed apart: they are paid once per process, whatever runs.
"""

from __future__ import annotations

import os
import sys
import time

PROGRAMS = ("mpm88", "poisson", "stable_fluids", "nbody")
POISSON_N, POISSON_TOL, POISSON_SWEEPS = 256, 1e-5, 400  # a bounded solve: compile is first minus steady
FLUIDS_N, NBODY_N, MPM_N = 128, 2048, 8192


def _qgraph_step(program: str, variant: str):
    import numpy as np

    import qgraph

    if program == "mpm88":
        from ..examples import mpm88

        s = mpm88.initial_state(MPM_N)
        spec = mpm88.VARIANTS[variant]
        args = spec["args"](*(qgraph.from_numpy(a) for a in (s.x, s.v, s.C, s.J, s.grid_v, s.grid_m)))
        return lambda: spec["substep"](*args)
    if program == "poisson":
        from ..examples import poisson

        solver = poisson.Solver(poisson.source(POISSON_N))
        return lambda: solver(POISSON_TOL, POISSON_SWEEPS)
    if program == "stable_fluids":
        from ..examples import stable_fluids

        return stable_fluids.bench_step(variant, stable_fluids.bench_state(FLUIDS_N))
    from ..examples import gallery_nbody as gn

    pos0, vel0 = gn.initial_state(NBODY_N)
    state = [qgraph.from_numpy(a.copy()) for a in (pos0, vel0, np.zeros_like(pos0))]
    dt = np.float32(gn.H / gn.SUBSTEPS)
    return lambda: gn.frame(*state, dt)


def _taichi_step(ti, program: str):
    from . import taichi_gallery as tg

    if program == "mpm88":
        from ..examples import mpm88

        s = mpm88.initial_state(MPM_N)
        return tg.mpm88_program(ti, s.x, s.v)
    if program == "poisson":
        from ..examples import poisson

        return tg.poisson_program(ti, poisson.source(POISSON_N), POISSON_TOL, POISSON_SWEEPS)
    if program == "stable_fluids":
        from ..examples import stable_fluids as sf

        return tg.stable_fluids_program(ti, sf.initial_state(FLUIDS_N), sf.DT, sf.INFLOW_SPEED, sf.JACOBI_ITERS)
    from ..examples import gallery_nbody as gn

    return tg.nbody_program(ti, *gn.initial_state(NBODY_N))[0]


def child(library: str, program: str, variant: str = "scalar", qgraph_import_s: float = 0.0,
          arch: str = "cuda") -> dict:
    """In this fresh process: import, init on `arch` ("cuda" or "cpu"), building the program's state, first
    step and best later step of one program, s. qgraph's import is `qgraph_import_s` (timed by the caller,
    which imported it first)."""
    started = time.perf_counter()
    if library == "taichi":
        import taichi as ti

        imported = time.perf_counter()
        cache = os.path.join(os.path.dirname(os.environ["QGRAPH_CACHE_DIR"]), "taichi")
        ti.init(arch=ti.cuda if arch == "cuda" else ti.cpu, offline_cache=True, offline_cache_file_path=cache,
                log_level=ti.WARN)
        initialised = time.perf_counter()
        step = _taichi_step(ti, program)
        sync = ti.sync
        import_s = imported - started
    else:
        import qgraph

        imported = time.perf_counter()
        qgraph.init(arch)
        initialised = time.perf_counter()
        step = _qgraph_step(program, variant)
        sync = qgraph.sync
        import_s = qgraph_import_s
    sync()
    built = time.perf_counter()
    laps = []
    for _ in range(4):
        t = time.perf_counter()
        step()
        sync()
        laps.append(time.perf_counter() - t)
    return {"import_s": import_s, "init_s": initialised - imported, "state_s": built - initialised, "first_s": laps[0],
            "step_s": min(laps[1:]), "compile_s": laps[0] - min(laps[1:]),
            "to_first_step_s": import_s + initialised - imported + laps[0],
            "numba_imported": "numba" in sys.modules}


def rows(runs: int = 3, programs=PROGRAMS, variants=("scalar",), taichi: bool = True, on_step=None,
         arch: str = "cuda") -> list[dict]:
    """Per program and library on `arch`: medians (with min and max) over `runs` pairs of cold and warm
    processes."""
    from ..tools.timing import put_figure, spread_of
    from .fresh_process import cold_and_warm

    libraries = [("qgraph", v) for v in variants] + ([("taichi", "")] if taichi else [])
    found = []
    for program in programs:
        for library, variant in libraries:
            if variant and program == "nbody" and variant != variants[0]:
                continue  # one spelling only
            if on_step is not None:
                on_step(f"{program}: {library} {variant}")
            cold, warm = cold_and_warm(["gallery", library, program, variant or "-", arch], runs)
            row = {"program": program, "library": library + (f" ({variant})" if variant and program != "nbody" else "")}
            for kind, samples in (("cold", cold), ("warm", warm)):
                for figure in ("import_s", "init_s", "state_s", "compile_s", "step_s", "to_first_step_s"):
                    put_figure(row, f"{kind}_{figure}", spread_of([s[figure] for s in samples]))
            found.append(row)
    return found


def table(rows_: list[dict]) -> str:
    lines = ["first call of each gallery program in a fresh process, s (compile = first step - best later step; "
             "cold: empty caches, the driver's JIT cache too; warm: the same again; to first step = import + init + "
             "first step, cold; medians)",
             f"{'program':<15}{'library':<20}{'import':>8}{'init':>8}{'cold compile':>14}{'warm compile':>14}"
             f"{'to first step':>15}{'step ms':>10}"]
    for r in rows_:
        lines.append(f"{r['program']:<15}{r['library']:<20}{r['cold_import_s']:>8.3f}{r['cold_init_s']:>8.3f}"
                     f"{r['cold_compile_s']:>14.3f}{r['warm_compile_s']:>14.3f}{r['cold_to_first_step_s']:>15.3f}"
                     f"{r['cold_step_s'] * 1e3:>10.2f}")
    return "\n".join(lines)
