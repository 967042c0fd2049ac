"""Compile time: the first call of a kernel in a fresh process, cold and warm, per backend.

Cold: empty cache directories (qgraph's and numba's), so everything compiles; warm: a second
process on the same directories, so everything loads: what a user's first run pays, and what
the compile cache saves every run after it. Each with the process's peak memory. Kernels: the
bench's 8-task kernel (kernels_for(8)) and one of many top-level loops (each loop a task).
Beside them on the CPU, optionally, numba's own compile and cache load of the same loops
hand-written in one function.
"""

from __future__ import annotations

from ..tools.timing import put_figure, spread_of
from .fresh_process import cold_and_warm

EIGHT_TASKS = 8
MANY_LOOPS = 50  # about 4 s cold on the cpu backend of a 2-core machine
QUICK_MANY_LOOPS = 16  # --quick: about 1 s cold there


def usable_arches() -> list[str]:
    """cpu always; cuda when a GPU is usable."""
    from ..runtime import state

    return ["cpu"] + (["cuda"] if state.cuda_status() is None else [])


def rows(
    many_loops: int = MANY_LOOPS, arches: list[str] | None = None, runs: int = 1, numba: bool = False, on_step=None
) -> list[dict]:
    """One row per backend and kernel: `cold_s` and `warm_s` (median over `runs` pairs of
    processes, with `_min`/`_max`), the peak memory of each process, and whether the warm one
    loaded from the cache; with `numba`, numba's `numba_cold_s` and `numba_warm_s` on cpu.
    `on_step(name)` (a progress bar's step) is called as each row starts."""
    found = []
    for arch in arches or usable_arches():
        for tasks in dict.fromkeys((EIGHT_TASKS, many_loops)):
            if on_step is not None:
                on_step(f"compile time: {arch}, {tasks} tasks")
            cold, warm = cold_and_warm(["kernel", arch, str(tasks)], runs)
            row = {"arch": arch, "kernel": f"{tasks} tasks", "tasks": tasks, "runs": runs}
            put_figure(row, "cold_s", spread_of([r["seconds"] for r in cold]))
            put_figure(row, "warm_s", spread_of([r["seconds"] for r in warm]))
            row["cold_peak_mb"] = max(r["peak_mb"] for r in cold)
            row["warm_peak_mb"] = max(r["peak_mb"] for r in warm)
            row["warm_loaded_from_cache"] = all(r["loaded_from_cache"] for r in warm)
            if numba and arch == "cpu":
                cold, warm = cold_and_warm(["numba-loops", str(tasks)], runs)
                put_figure(row, "numba_cold_s", spread_of([r["seconds"] for r in cold]))
                put_figure(row, "numba_warm_s", spread_of([r["seconds"] for r in warm]))
            found.append(row)
    return found


def table(found: list[dict]) -> str:
    if not found:
        return ""
    numba = any("numba_cold_s" in r for r in found)
    lines = [
        f"\ncompile time: first call in a fresh process, s (cold: empty cache directories; warm: the same "
        f"again; median of {found[0]['runs']}), and each process's peak memory",
        f"  {'arch':<5}{'kernel':<10}{'cold s':>8}{'warm s':>8}{'peak MB cold':>14}{'peak MB warm':>14}"
        + (f"{'numba cold s':>14}{'numba warm s':>14}" if numba else ""),
    ]
    for r in found:
        line = (
            f"  {r['arch']:<5}{r['kernel']:<10}{r['cold_s']:>8.2f}{r['warm_s']:>8.2f}{r['cold_peak_mb']:>14.0f}"
            f"{r['warm_peak_mb']:>14.0f}"
        )
        if numba:
            line += (
                f"{r['numba_cold_s']:>14.2f}{r['numba_warm_s']:>14.2f}"
                if "numba_cold_s" in r
                else f"{'-':>14}{'-':>14}"
            )
        if not r["warm_loaded_from_cache"]:
            line += "  (the warm process compiled: the cache was not used)"
        lines.append(line)
    return "\n".join(lines)
