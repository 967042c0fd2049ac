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
