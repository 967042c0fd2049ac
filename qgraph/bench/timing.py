"""Timing helpers shared by the suites: medians of many calls, synchronised at the end."""

from __future__ import annotations

import statistics
import time


def median_call_seconds(fn, calls: int, repeat: int = 7, sync=None, warmup: int = 3) -> float:
    """Median over `repeat` rounds of (time for `calls` back-to-back calls, then `sync()`) / calls."""
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    rounds = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync is not None:
            sync()
        rounds.append((time.perf_counter() - started) / calls)
    return statistics.median(rounds)


def interleaved_seconds(calls: dict, budget: float, repeat: int, sync) -> dict:
    """Median seconds per call of each callable, timed in interleaved rounds.

    Every round times each mode once (calls sized to `budget` seconds), so clock ramps and
    drifting machine load affect all modes alike: the ratios are side by side.
    """
    counts = {}
    for name, fn in calls.items():
        fn()
        sync()
        started = time.perf_counter()
        fn()
        sync()
        counts[name] = int(min(2000, max(3, budget / max(time.perf_counter() - started, 1e-7))))
    rounds: dict = {name: [] for name in calls}
    for _ in range(repeat):
        for name, fn in calls.items():
            count = counts[name]
            started = time.perf_counter()
            for _ in range(count):
                fn()
            sync()
            rounds[name].append((time.perf_counter() - started) / count)
    return {name: statistics.median(r) for name, r in rounds.items()}


def warm_up_gpu(seconds: float = 1.0) -> None:
    """Keep the GPU busy for a moment so its clocks leave idle before anything is timed."""
    import numpy as np

    import qgraph

    from .kernels import kernels_for

    module = kernels_for(1)
    x = qgraph.from_numpy(np.zeros(1 << 22, np.float32))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            module.eager(x, x.shape[0], 1.0)
        qgraph.sync()


class Progress:
    """A one-line progress bar on stderr (no dependency)."""

    def __init__(self, total: int, label: str, stream=None, enabled: bool = True) -> None:
        import sys

        self.total = max(total, 1)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty() if hasattr(self.stream, "isatty") else enabled
        self.started = time.perf_counter()

    def __call__(self, note: str = "") -> None:
        self.done += 1
        width = 30
        filled = int(width * self.done / self.total)
        elapsed = time.perf_counter() - self.started
        bar = "#" * filled + "." * (width - filled)
        line = f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:5.1f}s {note}"
        if self.enabled:
            self.stream.write(line[:110].ljust(110))
            self.stream.flush()
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:
            self.stream.write(f"{self.label}: {self.done}/{self.total} ({elapsed:.1f}s) {note}\n")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
