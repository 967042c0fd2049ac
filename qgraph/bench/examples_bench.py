"""Vector code against the same computation written component by component: the simulation
examples' "vector" variants (vectors, matrices, structs) against their "scalar" ones.

Both variants of an example take turns stepping one state (they compute the same step) and
are timed in interleaved rounds, so the ratio is side by side. With a copy of the state each,
the one allocated first ran up to 8% faster on an H100, whichever variant it was. On CUDA the
CPU backend is measured in the same run afterwards (qgraph is re-initialised for cpu, then back).
"""

from __future__ import annotations

import importlib

import qgraph

from ..tools.timing import interleaved_spreads, put_figure

# example module -> (GPU size, CPU size, what the size counts)
EXAMPLES = {"mpm88": (8192, 8192, "particles"), "nbody": (4096, 1024, "bodies"),
            "stable_fluids": (512, 128, "grid side")}
QUICK_DIVISOR = 4


def arch_rows(quick: bool, budget: float, repeat: int) -> list[dict]:
    """Rows of the examples that have both variants, on the backend qgraph runs on now."""
    arch = qgraph.current_arch()
    out = []
    for name, (gpu_size, cpu_size, unit) in EXAMPLES.items():
        module = importlib.import_module(f"qgraph.examples.{name}")
        if not ({"scalar", "vector"} <= set(module.VARIANTS) and hasattr(module, "bench_state")):
            continue
        size = gpu_size if arch == "cuda" else cpu_size
        if quick:
            size = max(16, size // QUICK_DIVISOR)
        state = module.bench_state(size)  # one state for both: an 8% gap on an H100 followed which
        calls = {v: module.bench_step(v, state) for v in ("scalar", "vector")}  # copy was allocated first
        spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
        row = {"example": name, "arch": arch, "size": size, "unit": unit}
        put_figure(row, "scalar_us", spreads["scalar"], 1e6)
        put_figure(row, "vector_us", spreads["vector"], 1e6)
        row["ratio"] = spreads["vector"].median / spreads["scalar"].median
        out.append(row)
    return out


def run(quick: bool, budget: float, repeat: int) -> list[dict]:
    """This backend's rows, then (on CUDA) the CPU backend's, restoring the backend after."""
    arch = qgraph.current_arch()
    rows = arch_rows(quick, budget, repeat)
    if arch == "cuda":
        qgraph.init("cpu")
        try:
            rows += arch_rows(quick, max(budget, 0.1), repeat)
        finally:
            qgraph.init(arch)
    return rows


def table(rows: list[dict]) -> str:
    if not rows:
        return ""
    lines = ["\nvector variants (vectors, matrices, structs) vs the same step written per component "
             "(per step, us; ratio vector/scalar)"]
    for r in rows:
        what = f"{r['example']} ({r['arch']}, {r['size']} {r['unit']})"
        lines.append(f"  {what:<40} scalar {r['scalar_us']:10.1f}  vector {r['vector_us']:10.1f}  ({r['ratio']:.3f})")
    return "\n".join(lines)
