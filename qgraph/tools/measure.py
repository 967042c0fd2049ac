"""qgraph.benchmark: time a user's own kernel per call in each mode, side by side."""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field

from .. import runtime
from ..decorator import Kernel
from ..errors import FallbackWarning
from .timing import Spread, busy_warning, is_busy, spread_of

MODES = ("eager", "graph")


@dataclass
class BenchmarkResult:
    """Median time per call of one kernel in each mode (microseconds), with the spread of the
    rounds: `spread[mode] = (min, median, max)`, which says whether the figure can be trusted."""

    kernel: str
    arch: str
    us_per_call: dict[str, float] = field(default_factory=dict)
    calls_per_round: int = 0
    rounds: int = 0
    spread: dict[str, Spread] = field(default_factory=dict)

    def speedup(self, slower: str = "eager", faster: str = "graph") -> float:
        return self.us_per_call[slower] / self.us_per_call[faster]

    @property
    def busy(self) -> list[str]:
        """The modes whose median round took over timing.BUSY_MEDIAN_OVER_MIN times their fastest:
        the machine was busy while they were timed (see timing.is_busy)."""
        return [mode for mode, s in self.spread.items() if is_busy(s)]

    def __str__(self) -> str:
        lines = [f"{self.kernel} on {self.arch}: median of {self.rounds} rounds x {self.calls_per_round} calls"]
        best = min(self.us_per_call.values())
        for mode, us in self.us_per_call.items():
            low, _, high = self.spread.get(mode, (us, us, us))
            lines.append(f"  {mode:<6} {us:10.2f} us/call  ({us / best:4.2f}x the fastest; rounds "
                         f"{low:.2f} to {high:.2f} us)")
        if self.busy:
            lines.append(f"  warning: {busy_warning(self.busy)}")
        return "\n".join(lines)


def benchmark(kernel: Kernel, *args, repeat: int = 20, modes: tuple[str, ...] = MODES, stream=None,
              round_seconds: float = 0.01, **kwargs) -> BenchmarkResult:
    """Median per-call time of `kernel(*args, **kwargs)` in each mode, rounds interleaved.

    Modes: "eager" (tasks launched one by one) and "graph" (cuda_graph=True; for a
    graph_while kernel the device loop). On cpu both modes are the same code, so one
    "cpu" row is reported. Calls run back to back; each round ends with qgraph.sync().
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"benchmark() takes a @qgraph.kernel, got {type(kernel).__name__}")
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"modes must be a non-empty subset of {MODES}, got {modes!r}")
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    state = runtime.ensure_init()
    if state.arch == "cpu":
        variants = {"cpu": kernel}
    else:
        variants = {mode: kernel.variant(cuda_graph=(mode == "graph")) for mode in modes}
    calls = {name: (lambda k=k: k(*args, stream=stream, **kwargs)) for name, k in variants.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        per_round = 1
        for call in calls.values():  # compile, build, and size the rounds
            call()
            runtime.sync()
            started = time.perf_counter()
            call()
            runtime.sync()
            per_round = max(per_round, int(round_seconds / max(time.perf_counter() - started, 1e-7)))
        per_round = min(per_round, 10_000)
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(repeat):
            for name, call in calls.items():
                started = time.perf_counter()
                for _ in range(per_round):
                    call()
                runtime.sync()
                samples[name].append((time.perf_counter() - started) / per_round * 1e6)
    result = BenchmarkResult(kernel.__name__, state.arch, calls_per_round=per_round, rounds=repeat)
    result.us_per_call = {name: statistics.median(ts) for name, ts in samples.items()}
    result.spread = {name: spread_of(ts) for name, ts in samples.items()}
    return result
