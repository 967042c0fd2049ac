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


# The rounds of one figure are taken back to back on the same work: on an idle machine their
# slowest is within a few percent of their fastest (the GPU host's launch rows: 1-8%). A
# slowest round 50% above the fastest means something else took the CPU or the GPU meanwhile,
# and the median may be off too: the figure is reported with a warning (a 7,971 us/call row
# for a 4.5 us call was once printed on a loaded machine without one).
BUSY_SPREAD = 1.5


def spread_of(samples: list[float]) -> tuple[float, float, float]:
    """(min, median, max) of a figure's rounds."""
    return min(samples), statistics.median(samples), max(samples)


def is_busy(spread: tuple[float, float, float]) -> bool:
    """Whether a figure's rounds spread so far that the machine was busy (BUSY_SPREAD)."""
    low, _, high = spread
    return low > 0 and high / low > BUSY_SPREAD


def busy_warning(labels: list[str]) -> str:
    return (f"the rounds of {', '.join(labels)} differ by more than {BUSY_SPREAD:g}x: the machine was busy "
            "meanwhile, so these figures are unreliable; run again on an idle machine")


def interleaved_seconds(calls: dict, budget: float, repeat: int, sync, spreads: dict | None = None) -> dict:
    """Median seconds per call of each callable, timed in interleaved rounds; with `spreads`,
    also each one's (min, median, max) there.

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
    if spreads is not None:
        spreads.update({name: spread_of(r) for name, r in rounds.items()})
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
    """A progress bar on stderr (tqdm) for a step that takes seconds; on a stream that is not a
    terminal (a log, CI) a plain line every tenth of the way instead of bar redraws."""

    def __init__(self, total: int, label: str, stream=None, enabled: bool = True) -> None:
        import sys

        from tqdm import tqdm

        self.total = max(total, 1)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.perf_counter()
        self._bar = tqdm(total=self.total, desc=label, file=self.stream, disable=not self.enabled, leave=False,
                         dynamic_ncols=True)

    def __call__(self, note: str = "") -> None:
        self.done += 1
        if self.enabled:
            self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(1)
        elif self.done == self.total or self.done % max(1, self.total // 10) == 0:
            elapsed = time.perf_counter() - self.started
            self.stream.write(f"{self.label}: {self.done}/{self.total} ({elapsed:.1f}s) {note}\n")
            self.stream.flush()

    def close(self) -> None:
        self._bar.close()


class StageBar:
    """A tqdm bar over a command's stages that keeps its clock moving while a stage runs (a
    background refresh), so a long compile or solve is not silence; on a stream that is not a
    terminal each stage is one plain line."""

    def __init__(self, label: str, stages: list[str], stream=None) -> None:
        import sys

        self._stages = stages
        self._stream = stream or sys.stderr
        self._label = label
        self._tty = hasattr(self._stream, "isatty") and self._stream.isatty()
        self._bar = None
        self._stop = None
        self._done = 0  # stages finished (a disabled tqdm does not count)

    def __enter__(self) -> StageBar:
        import threading

        from tqdm import tqdm

        self._bar = tqdm(total=len(self._stages), desc=self._label, file=self._stream, disable=not self._tty,
                         leave=False, dynamic_ncols=True, bar_format="{desc}: {n}/{total} [{elapsed}] {postfix}")
        self._stop = threading.Event()
        self._show(0)
        if self._tty:
            threading.Thread(target=self._refresh, daemon=True).start()
        return self

    def _refresh(self) -> None:
        while not self._stop.wait(0.25):
            self._bar.refresh()

    def _show(self, k: int) -> None:
        if k >= len(self._stages):
            return
        if self._tty:
            self._bar.set_postfix_str(self._stages[k])
        else:
            self._stream.write(f"{self._label}: {self._stages[k]} ...\n")
            self._stream.flush()

    def next(self) -> None:
        """The current stage is done; show the next one."""
        self._bar.update(1)
        self._done += 1
        self._show(self._done)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._bar.close()

