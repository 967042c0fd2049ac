"""GPU launch overhead, measured side by side in one process (the suite's GPU rows).

For each task count and array size, per-call time of the same T-task kernel run as
- floor: a raw CUDA graph of equivalent hand-written NVRTC kernels (cuGraphAddKernelNode),
- graph: qgraph, cuda_graph=True (same arrays every call) and with two array sets swapped,
- eager: qgraph, tasks launched one by one,
- numba: the same kernels launched through numba-cuda's dispatcher;
and per iteration of a loop: raw WHILE node vs qgraph's device loop (as chosen, and unrolled U
times: gated copies), its repeat loop (as chosen, and one copy per pass), raw host loop (replay +
flag read-back) vs qgraph's host fallback; and the headline figures for 8 one-block tasks.
Every figure is the median of interleaved rounds, with the fastest and slowest round.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import qgraph

from ..tools.timing import interleaved_spreads, put_figure, spread_of

HOST_CALLS = 200  # graph calls per round of the headline's host time
LOOP_UNROLLS = (2, 4)  # flag-loop copies per WHILE pass measured beside the automatic choice


@dataclass
class Row:
    group: str  # "launch" (per call) or "loop" (per iteration)
    mode: str
    tasks: int
    size: int
    us: float  # the median of the interleaved rounds
    floor_us: float | None = None
    us_min: float | None = None  # the fastest and slowest of the rounds
    us_max: float | None = None

    @property
    def ratio(self) -> float | None:
        return None if not self.floor_us else self.us / self.floor_us


def gpu_launch_rows(tasks: int, size: int, budget: float, repeat: int, numba_baseline: bool = True) -> list[Row]:
    from .baselines import NumbaDispatch, RawGraphs
    from .kernels import kernels_for

    device = qgraph.runtime.STATE.cuda
    module = kernels_for(tasks)
    a = 1.0
    sets = [[qgraph.ndarray(qgraph.f32, (size,)) for _ in range(tasks)] for _ in range(2)]
    raw = RawGraphs(device, sets[0], size, a)
    graph_args = sets[0] + [size, a]
    swap_args = [sets[0] + [size, a], sets[1] + [size, a]]
    state = [0]

    def swapped() -> None:
        state[0] ^= 1
        module.graph(*swap_args[state[0]])

    calls = {
        "floor": raw.launch,
        "graph": lambda: module.graph(*graph_args),
        "graph, 2 sets swapped": swapped,
        "eager": lambda: module.eager(*graph_args),
    }
    if numba_baseline:
        calls["numba dispatcher"] = NumbaDispatch(sets[0], size, a).run
    us = {mode: s.scaled(1e6) for mode, s in interleaved_spreads(calls, budget, repeat, qgraph.sync).items()}
    return [Row("launch", mode, tasks, size, s.median, us["floor"].median, s.min, s.max) for mode, s in us.items()]


def gpu_loop_rows(tasks: int, iterations: int, budget: float, repeat: int) -> list[Row]:
    from .baselines import RawGraphs
    from .kernels import kernels_for

    device = qgraph.runtime.STATE.cuda
    module = kernels_for(tasks)
    size, a = 256, 1.0
    arrays = [qgraph.ndarray(qgraph.f32, (size,)) for _ in range(tasks)]
    counter, flag = qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    raw = RawGraphs(device, arrays, size, a, counter, flag)
    args = arrays + [counter, flag, size, a]
    # the same kernel on the host do-while path, side by side; the runaway guard's cost: the loop without it
    fallback = module.loop.variant(cuda_graph=True, graph_while_host=True)
    unguarded = module.loop.variant(cuda_graph=True, max_iterations=None)
    unrolled = {u: module.loop.variant(cuda_graph=True, unroll=u) for u in LOOP_UNROLLS}
    repeat_once = module.repeat.variant(cuda_graph=True, unroll=1)
    repeat_args = arrays + [iterations, size, a]

    def run(fn):
        def call() -> None:
            counter.fill(iterations)
            fn()

        return call

    calls = {
        "raw WHILE node": run(raw.while_launch),
        "device loop": run(lambda: module.loop(*args)),
        "device loop, no guard": run(lambda: unguarded(*args)),
        **{f"device loop, unroll {u}": run(lambda k=k: k(*args)) for u, k in unrolled.items()},
        "repeat loop": lambda: module.repeat(*repeat_args),
        "repeat loop, unroll 1": lambda: repeat_once(*repeat_args),
        "raw host loop": run(raw.host_loop),
        "host fallback": run(lambda: fallback(*args)),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", qgraph.FallbackWarning)
        spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
    us = {mode: s.scaled(1e6 / iterations) for mode, s in spreads.items()}
    floors = {
        "raw WHILE node": "raw WHILE node",
        "device loop": "raw WHILE node",
        "device loop, no guard": "raw WHILE node",
        **{f"device loop, unroll {u}": "raw WHILE node" for u in LOOP_UNROLLS},
        "repeat loop": "raw WHILE node",
        "repeat loop, unroll 1": "raw WHILE node",
        "raw host loop": "raw host loop",
        "host fallback": "raw host loop",
    }
    return [
        Row("loop", mode, tasks, size, us[mode].median, us[floor].median, us[mode].min, us[mode].max)
        for mode, floor in floors.items()
    ]


def gpu_headline(budget: float, repeat: int) -> dict:
    """The figures the issues track, for 8 one-block tasks, measured side by side."""
    from .baselines import CudaCoreLaunch, RawGraphs
    from .kernels import kernels_for

    device = qgraph.runtime.STATE.cuda
    module = kernels_for(8)
    size, a = 256, 1.0
    arrays = [qgraph.ndarray(qgraph.f32, (size,)) for _ in range(8)]
    args = arrays + [size, a]
    raw = RawGraphs(device, arrays, size, a)
    raw_pdl = RawGraphs(device, arrays, size, a, programmatic=True)
    sync = qgraph.sync

    def graph_sync() -> None:
        module.graph(*args)
        sync()

    core = CudaCoreLaunch(arrays[0], size, a)
    per_call = interleaved_spreads(
        {
            "floor": raw.launch,
            "graph": lambda: module.graph(*args),
            "raw_pdl": raw_pdl.launch,
            "eager": lambda: module.eager(*args),
        },
        budget,
        repeat,
        sync,
    )
    with_sync = interleaved_spreads({"floor": raw.launch_sync, "graph": graph_sync}, budget, repeat, lambda: None)
    core_launch = interleaved_spreads({"core": core.launch}, budget, repeat, core.sync)["core"]
    # graph build time, compile excluded: a fresh graph of an already compiled specialisation, per round
    builds = []
    for _ in range(repeat):
        qgraph.reset()
        module.graph(*args)  # compiles (from the disk cache) and builds
        builds.append(module.graph.stats.build_seconds)
    # host time of one graph call (the GPU is kept busy, so this is the Python + driver cost), per round
    host = []
    for _ in range(repeat):
        sync()
        started = time.perf_counter()
        for _ in range(HOST_CALLS):
            module.graph(*args)
        host.append((time.perf_counter() - started) / HOST_CALLS)
    sync()
    median = {name: spread.median for name, spread in per_call.items()}
    found = {}
    put_figure(found, "floor_us", per_call["floor"], 1e6)
    put_figure(found, "graph_us", per_call["graph"], 1e6)
    put_figure(found, "raw_pdl_graph_us", per_call["raw_pdl"], 1e6)
    found["graph_vs_floor"] = median["graph"] / median["floor"]
    found["graph_vs_raw_pdl"] = median["graph"] / median["raw_pdl"]
    put_figure(found, "floor_launch_sync_us", with_sync["floor"], 1e6)
    put_figure(found, "graph_launch_sync_us", with_sync["graph"], 1e6)
    found["launch_sync_ratio"] = with_sync["graph"].median / with_sync["floor"].median
    put_figure(found, "cuda_core_launch_us", core_launch, 1e6)
    put_figure(found, "eager_per_task_us", per_call["eager"], 1e6 / 8)
    found["eager_per_task_ratio"] = median["eager"] / 8 / core_launch.median
    put_figure(found, "graph_build_ms", spread_of(builds), 1e3)
    put_figure(found, "graph_call_host_us", spread_of(host), 1e6)
    return found
