"""Compute inside kernels: stencils, all-pairs N-body and saxpy against hand-written code.

GPU, side by side in one run (interleaved rounds): each qgraph kernel (a one-node CUDA
graph per call) against the same algorithm in hand-written CUDA C++ (2-D blocks of 32 x 8,
`int` index math), compiled by NVRTC (with `--use_fast_math` for the fast-math rows) and
replayed as a one-node graph; results are compared. Taichi's 2-D N-body, ported line by line,
runs against the same forces hand-tuned in qgraph (what the natural spelling costs). CPU: the
same kernels against hand-written `numba.njit(parallel=True)` twins, best of several calls each.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

import qgraph

from ..tools.timing import Spread, interleaved_spreads, put_figure, spread_of
from .compute_sources import CUDA_SOURCE, KERNELS_SOURCE, NUMBA_SOURCE
from .kernels import module_from_source


class _HandGraphs:
    """Hand-written kernels, each call a one-node graph launch (the fastest way to replay)."""

    def __init__(self) -> None:
        from ..driver.device import check, driver
        from ..driver.nvrtc import compile_cubin

        self.device = qgraph.runtime.STATE.cuda
        self.d, self.check = driver(), check
        cc = self.device.info.compute_capability
        names = ("stencil2d", "stencil3d", "nbody", "nbody_plain", "saxpy")
        self.functions = {}
        for fast in (False, True):
            options = ("--use_fast_math",) if fast else ()
            module = self.device.load_module(compile_cubin(CUDA_SOURCE, "qgraph_bench_compute.cu", cc, options))
            self.functions.update({(name, fast): self.device.function(module, name) for name in names})
        self.stream = self.device.stream_handle
        self._keep: list = []

    def graph(self, name: str, grid: tuple, block: tuple, values: list, fast: bool = False):
        from ..driver.nodes import kernel_node_params

        pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        self._keep.append((values, pointers))
        params = kernel_node_params(self.functions[name, fast], grid[0], block[0],
                                    kernel_params=ctypes.addressof(pointers))
        params.gridDimY, params.gridDimZ, params.blockDimY = grid[1], grid[2], block[1]
        graph = self.check(self.d.cuGraphCreate(0), "cuGraphCreate")
        self.check(self.d.cuGraphAddKernelNode(graph, [], 0, params), f"add {name}")
        exec_ = self.check(self.d.cuGraphInstantiate(graph, 0), "instantiate")
        self.check(self.d.cuGraphUpload(exec_, self.stream), "upload")
        return lambda: self.d.cuGraphLaunch(exec_, self.stream)


def _ptr(a) -> ctypes.c_uint64:
    return ctypes.c_uint64(a.address)


# Largest difference from the hand-written result that still counts as agreeing: the same
# float32 operations in the same order give 0 (stencils, saxpy, strict N-body on the GPU);
# N-body compares velocities relative to the largest, and fast math may reorder and approximate.
# The Taichi-spelled N-body rows compare two qgraph kernels whose products are ordered differently.
TOLERANCE = {"stencil 2-D 5-point": 1e-6, "stencil 3-D 7-point": 1e-6, "N-body all pairs": 1e-5,
             "N-body all pairs (fast math)": 1e-4, "N-body 2-D, Taichi spelling": 1e-5,
             "N-body 2-D, Taichi spelling (fast math)": 1e-5, "saxpy": 1e-6}


def agree(row: dict) -> bool:
    """Whether a row's qgraph result matches the hand-written one within its workload's tolerance."""
    return bool(row["max_abs_error"] <= TOLERANCE[row["workload"]])


def _row(name: str, size: str, spreads: dict, error: float, work: float | None = None, unit: str = "") -> dict:
    q, h = spreads["qgraph"].median, spreads["CUDA C++"].median
    row = {"workload": name, "size": size}
    put_figure(row, "qgraph_us", spreads["qgraph"], 1e6)
    put_figure(row, "hand_us", spreads["CUDA C++"], 1e6)
    row.update(speed_vs_hand=h / q, max_abs_error=error)
    row["agree"] = agree(row)
    if work is not None:
        row["rate"], row["unit"] = work / q, unit
    return row


def gpu_rows(quick: bool, budget: float, repeat: int, only: tuple[str, ...] | None = None) -> list[dict]:
    """Per-call times of qgraph and hand-written CUDA C++, with their results compared; `only`:
    these workloads of GPU_WORKLOADS alone."""
    mod, hand = module_from_source("qgraph_bench_compute", KERNELS_SOURCE), _HandGraphs()
    rng = np.random.default_rng(0)
    rows: list[dict] = []
    for name, workload in GPU_WORKLOADS.items():
        if only is None or name in only:
            rows += workload(mod, hand, rng, quick, budget, repeat)
    return rows


def _stencil2d_rows(mod, hand, rng, quick: bool, budget: float, repeat: int) -> list[dict]:
    rows = []
    for n in ((512, 2048) if quick else (512, 2048, 8192)):
        u = qgraph.from_numpy(rng.random((n, n), dtype=np.float32))
        outs = [qgraph.ndarray(qgraph.f32, (n, n)) for _ in range(2)]
        calls = {"qgraph": lambda u=u, o=outs[0]: mod.stencil2d(u, o),
                 "CUDA C++": hand.graph("stencil2d", ((n - 2 + 31) // 32, (n - 2 + 7) // 8, 1), (32, 8),
                                        [_ptr(u), _ptr(outs[1]), ctypes.c_int32(n), ctypes.c_int32(n)])}
        spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
        error = float(np.abs(outs[0].to_numpy() - outs[1].to_numpy()).max())
        rows.append(_row("stencil 2-D 5-point", f"{n}^2", spreads, error, 8.0 * n * n / 1e9, "GB/s"))
    return rows


def _stencil3d_rows(mod, hand, rng, quick: bool, budget: float, repeat: int) -> list[dict]:
    rows = []
    for n in ((128,) if quick else (128, 256)):
        u = qgraph.from_numpy(rng.random((n, n, n), dtype=np.float32))
        outs = [qgraph.ndarray(qgraph.f32, (n, n, n)) for _ in range(2)]
        calls = {"qgraph": lambda u=u, o=outs[0]: mod.stencil3d(u, o),
                 "CUDA C++": hand.graph("stencil3d", ((n - 2 + 31) // 32, (n - 2 + 7) // 8, n - 2), (32, 8),
                                        [_ptr(u), _ptr(outs[1])] + [ctypes.c_int32(n)] * 3)}
        spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
        error = float(np.abs(outs[0].to_numpy() - outs[1].to_numpy()).max())
        rows.append(_row("stencil 3-D 7-point", f"{n}^3", spreads, error, 8.0 * n ** 3 / 1e9, "GB/s"))
    return rows


def _nbody_rows(mod, hand, rng, quick: bool, budget: float, repeat: int) -> list[dict]:
    rows = []
    for n in ((2048,) if quick else (2048, 16384)):
        for fast in (False, True):
            host = [rng.random(n, dtype=np.float32) for _ in range(7)]
            q = [qgraph.from_numpy(a) for a in host]
            h = [qgraph.from_numpy(a) for a in host]
            kernel = mod.nbody_fast if fast else mod.nbody
            values = [_ptr(a) for a in h] + [ctypes.c_int32(n), ctypes.c_float(1e-6), ctypes.c_float(0.01)]
            grid = ((n + 255) // 256, 1, 1)
            calls = {"qgraph": lambda q=q, k=kernel: k(*q, 1e-6, 0.01),
                     "CUDA C++": hand.graph("nbody", grid, (256, 1), values, fast),
                     "plain loads": hand.graph("nbody_plain", grid, (256, 1), values, fast)}
            spreads = interleaved_spreads(calls, budget * 4, max(3, repeat // 2), qgraph.sync)
            error = _one_step_error(q, h, host, calls)
            name = "N-body all pairs" + (" (fast math)" if fast else "")
            rows.append(_row(name, f"N={n}", spreads, error, float(n) * n / 1e9, "G pairs/s"))
            put_figure(rows[-1], "hand_plain_loads_us", spreads["plain loads"], 1e6)
    return rows


TAICHI_BODIES = 3000  # as in Taichi's N-body example


def _taichi_rows(mod, hand, rng, quick: bool, budget: float, repeat: int) -> list[dict]:
    """Taichi's 2-D N-body forces as ported line by line against the same forces hand-tuned, both
    qgraph kernels (compute_sources): what the natural spelling costs. Per call: one step's forces."""
    n = TAICHI_BODIES
    pos = qgraph.from_numpy(rng.random((n, 2), dtype=np.float32))
    rows = []
    for fast in (False, True):
        forces = [qgraph.ndarray(qgraph.f32, (n, 2)) for _ in range(2)]
        natural = mod.taichi_nbody_fast if fast else mod.taichi_nbody
        tuned = mod.taichi_nbody_tuned_fast if fast else mod.taichi_nbody_tuned
        calls = {"qgraph": lambda k=natural, f=forces[0]: k(pos, f),
                 "CUDA C++": lambda k=tuned, f=forces[1]: k(pos, f)}  # the hand-tuned qgraph kernel
        spreads = interleaved_spreads(calls, budget * 4, max(3, repeat // 2), qgraph.sync)
        natural_forces, tuned_forces = (f.to_numpy() for f in forces)
        error = float(np.abs(natural_forces - tuned_forces).max() / np.abs(tuned_forces).max())
        name = "N-body 2-D, Taichi spelling" + (" (fast math)" if fast else "")
        row = _row(name, f"N={n}", spreads, error, float(n) * n / 1e9, "G pairs/s")
        row.update(vs="hand-tuned", steps_per_second=1.0 / spreads["qgraph"].median,
                   hand_steps_per_second=1.0 / spreads["CUDA C++"].median)
        rows.append(row)
    return rows


def _saxpy_rows(mod, hand, rng, quick: bool, budget: float, repeat: int) -> list[dict]:
    n = 1 << (24 if quick else 26)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    x, yq, yc = qgraph.from_numpy(xh), qgraph.from_numpy(yh), qgraph.from_numpy(yh)
    calls = {"qgraph": lambda: mod.saxpy(x, yq, 0.5),
             "CUDA C++": hand.graph("saxpy", ((n + 255) // 256, 1, 1), (256, 1),
                                    [_ptr(x), _ptr(yc), ctypes.c_float(0.5), ctypes.c_int64(n)]),
             "copy": copy_launcher(4 * n)}
    spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
    yq.from_numpy(yh), yc.from_numpy(yh)
    calls["qgraph"](), calls["CUDA C++"]()
    error = float(np.abs(yq.to_numpy() - yc.to_numpy()).max())
    row = _row("saxpy", f"2^{n.bit_length() - 1}", spreads, error, 12.0 * n / 1e9, "GB/s")
    row["of_copy"] = (12.0 * n / spreads["qgraph"].median) / (8.0 * n / spreads["copy"].median)
    return [row]


# the GPU part's workloads (benchmarks/compute.py --only picks some): name -> rows
GPU_WORKLOADS = {"stencil2d": _stencil2d_rows, "stencil3d": _stencil3d_rows, "nbody": _nbody_rows,
                 "taichi": _taichi_rows, "saxpy": _saxpy_rows}


def _one_step_error(q: list, h: list, host: list, calls: dict) -> float:
    """Largest relative difference of the velocities after one step from the same state."""
    for arrays in (q, h):
        for k in (3, 4, 5):
            arrays[k].from_numpy(host[k])
    calls["qgraph"]()
    calls["CUDA C++"]()
    qgraph.sync()
    return max(float(np.abs(q[k].to_numpy() - h[k].to_numpy()).max() / np.abs(h[k].to_numpy()).max())
               for k in (3, 4, 5))


def copy_launcher(nbytes: int):
    from .reductions import copy_launcher as copy

    return copy(nbytes)


def cpu_rows(quick: bool, repeat: int = 5, sizes: tuple[int, int, int] | None = None) -> list[dict]:
    """Milliseconds per call of the qgraph CPU kernels and their numba twins (on the CPU backend),
    the best of `repeat` rounds, each with `_min`, `_median` and `_max` of the rounds.

    `sizes`: the 2-D grid's side, the 3-D grid's side and the body count, instead of the
    quick or full ones (a test runs them tiny)."""
    mod = module_from_source("qgraph_bench_compute", KERNELS_SOURCE)
    twins = {fast: module_from_source("qgraph_bench_compute_numba", NUMBA_SOURCE).make(fast) for fast in (False, True)}
    rng = np.random.default_rng(0)
    n2, n3, nb = sizes or ((512, 64, 512) if quick else (2048, 128, 2048))
    u2, u3 = rng.random((n2, n2), dtype=np.float32), rng.random((n3, n3, n3), dtype=np.float32)
    bodies = [rng.random(nb, dtype=np.float32) for _ in range(7)]
    cases = [("stencil 2-D 5-point", f"{n2}^2", mod.stencil2d, twins[False]["stencil2d"], [u2], np.zeros_like(u2)),
             ("stencil 3-D 7-point", f"{n3}^3", mod.stencil3d, twins[False]["stencil3d"], [u3], np.zeros_like(u3))]
    rows = []
    for name, size, q, h, inputs, out in cases:
        outs = [out.copy(), out.copy()]
        tq, th = _paired_calls(lambda q=q, a=inputs, o=outs[0]: q(*a, o), lambda h=h, a=inputs, o=outs[1]: h(*a, o),
                               repeat)
        rows.append(_cpu_row(name, size, tq, th, float(np.abs(outs[0] - outs[1]).max())))
    for fast in (False, True):
        q, h = [a.copy() for a in bodies], [a.copy() for a in bodies]
        kernel = mod.nbody_fast if fast else mod.nbody
        tq, th = _paired_calls(lambda k=kernel, a=q: k(*a, 1e-6, 0.01),
                               lambda k=twins[fast]["nbody"], a=h: k(*a, np.float32(1e-6), np.float32(0.01)), repeat)
        error = max(float(np.abs(q[k] - h[k]).max() / np.abs(h[k]).max()) for k in (3, 4, 5))
        rows.append(_cpu_row("N-body all pairs" + (" (fast math)" if fast else ""), f"N={nb}", tq, th, error))
    return rows


def _cpu_row(name: str, size: str, qgraph_s: Spread, numba_s: Spread, error: float) -> dict:
    """The best round of each side (the figure: CPU calls are at the mercy of thread scheduling),
    with `_min`, `_median` and `_max` of the rounds."""
    row = {"workload": name, "size": size}
    for key, spread in (("qgraph_ms", qgraph_s), ("numba_ms", numba_s)):
        put_figure(row, key, spread, 1e3)
        row[f"{key}_median"], row[key] = row[key], row[f"{key}_min"]
    row.update(speed_vs_numba=numba_s.min / qgraph_s.min, max_abs_error=error)
    row["agree"] = agree(row)
    return row


CPU_ROUND_SECONDS = 0.01  # a round of back-to-back calls lasts at least this (a lone 20 us call is noise)


def _paired_calls(qgraph_fn, numba_fn, repeat: int) -> tuple[Spread, Spread]:
    """Seconds per call of each over `repeat` interleaved rounds of back-to-back calls, after one
    call that compiles. Both make the same number of calls, so a kernel that steps its state
    (N-body) leaves both sides after the same steps, and their results can be compared."""
    sides = (qgraph_fn, numba_fn)
    slowest = 0.0
    for fn in sides:
        fn()
        started = time.perf_counter()
        fn()
        slowest = max(slowest, time.perf_counter() - started)
    calls = max(1, int(CPU_ROUND_SECONDS / max(slowest, 1e-7)))
    samples: tuple[list, list] = ([], [])
    for _ in range(repeat):
        for fn, found in zip(sides, samples):
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            found.append((time.perf_counter() - started) / calls)
    return spread_of(samples[0]), spread_of(samples[1])


def table(gpu: list[dict], cpu: list[dict]) -> str:
    lines = []
    if gpu:
        lines.append("compute inside kernels, per call (speed vs hand-written CUDA C++: >= 1 means as fast or faster)")
        for r in gpu:
            rate = f"  {r['rate']:8.1f} {r['unit']}" if "rate" in r else ""
            extra = f"  {r['of_copy']:.1%} of the copy" if "of_copy" in r else ""
            if "hand_plain_loads_us" in r:
                extra += f"  (C++ without __restrict__ {r['hand_plain_loads_us']:.1f} us)"
            if "steps_per_second" in r:
                extra += f"  ({r['steps_per_second']:,.0f} vs {r['hand_steps_per_second']:,.0f} steps/s)"
            lines.append(f"  {r['workload']:<39} {r['size']:>8}  qgraph {r['qgraph_us']:9.1f} us  "
                         f"{r.get('vs', 'CUDA C++')} {r['hand_us']:9.1f} us  {r['speed_vs_hand']:5.2f}x{rate}{extra}  "
                         f"err {r['max_abs_error']:.1e}{_flag(r)}")
    if cpu:
        lines.append("CPU, best of several calls (speed vs hand-written numba.njit(parallel=True))")
        for r in cpu:
            lines.append(f"  {r['workload']:<30} {r['size']:>8}  qgraph {r['qgraph_ms']:8.2f} ms  numba "
                         f"{r['numba_ms']:8.2f} ms  {r['speed_vs_numba']:5.2f}x  "
                         f"err {r['max_abs_error']:.1e}{_flag(r)}")
    return "\n".join(lines)


def _flag(row: dict) -> str:
    return "" if row.get("agree", True) else f"  MISMATCH (tolerance {TOLERANCE[row['workload']]:.0e})"


def mismatches(gpu: list[dict], cpu: list[dict]) -> list[str]:
    """The rows whose qgraph result disagrees with the hand-written one (empty when all agree)."""
    return [f"{r['workload']} {r['size']}" for r in gpu + cpu if not r.get("agree", True)]


def plot(gpu: list[dict], cpu: list[dict], path: str) -> None:
    """Speed of each qgraph kernel relative to its hand-written twin (bars; 1 = as fast), GPU and CPU."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(rows, key, title) for rows, key, title in (
        (gpu, "speed_vs_hand", "GPU: vs hand-written CUDA C++"),
        (cpu, "speed_vs_numba", "CPU: vs numba.njit(parallel=True)")) if rows]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (rows, key, title) in zip(axes[0], panels):
        labels = [f"{r['workload'].replace('N-body all pairs', 'N-body')}\n{r['size']}" for r in rows]
        values = [r[key] for r in rows]
        ax.barh(range(len(rows)), values, color=["tab:blue" if v >= 1 else "tab:orange" for v in values])
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel("hand time / qgraph time (>= 1: as fast or faster)", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(quick: bool, budget: float, repeat: int, cpu: bool = True) -> tuple[list[dict], list[dict]]:
    """GPU rows when qgraph runs on CUDA, then (with `cpu`) the CPU rows on the CPU backend.

    The CPU rows re-initialise qgraph for cpu (dropping compiled kernels) and return to the
    backend it was on, so call this after anything holding device arrays is done with them."""
    arch = qgraph.current_arch()
    gpu = gpu_rows(quick, budget, repeat) if arch == "cuda" else []
    if not cpu:
        return gpu, []
    if arch != "cpu":
        qgraph.init("cpu")
    try:
        return gpu, cpu_rows(quick)
    finally:
        if arch != "cpu":
            qgraph.init(arch)
