"""Timing helpers shared by the suites: rounds of back-to-back calls, synchronised at the end.

Every figure is the median of its rounds and travels with their spread (the fastest and the
slowest round): the spread is what says whether the machine was quiet while it was measured.
In the JSON of a report a figure `K` has `K_min` and `K_max` beside it, in the same unit.
"""

from __future__ import annotations

import statistics
import time
from typing import NamedTuple

BUSY_MEDIAN_OVER_MIN = 1.5  # a figure's median round over its fastest beyond which the machine was busy


class Spread(NamedTuple):
    """The fastest, median and slowest round of one figure (seconds unless scaled)."""

    min: float
    median: float
    max: float

    def scaled(self, factor: float) -> Spread:
        return Spread(self.min * factor, self.median * factor, self.max * factor)


def spread_of(samples: list[float]) -> Spread:
    """(min, median, max) of a figure's rounds."""
    return Spread(min(samples), statistics.median(samples), max(samples))


def is_busy(spread: tuple[float, float, float]) -> bool:
    """Whether a figure's median round took more than BUSY_MEDIAN_OVER_MIN times its fastest.

    The rounds of one figure repeat the same work back to back, so on an idle machine they
    agree: median/min was at most 1.24 over three quick CPU benches on a 2-core machine (in a
    figure of 3 rounds), and the GPU host's launch rows spread 1-8% from fastest to slowest.
    A median 50% above the fastest round means at least half the rounds lost a third of their
    time to something else on the CPU or GPU: the figure reported, the median, is then the
    machine's load as much as the code's speed. median/min rather than max/min: one round
    caught by an interrupt does not move the median, yet max/min reached 1.45 in those benches
    and 1.55 in another, for a figure whose median was 4% above its fastest round. A machine
    loaded evenly throughout slows every round alike, and no spread can show that. (The demo
    once printed 7,971 us per call for a 4.5 us call, without a warning.)
    """
    low, median, _ = spread
    return low > 0 and median / low > BUSY_MEDIAN_OVER_MIN


def busy_warning(labels: list[str], shown: int = 6) -> str:
    """One sentence naming the busy figures (the first `shown` of them): see is_busy."""
    named = ", ".join(labels[:shown]) + (f" and {len(labels) - shown} more" if len(labels) > shown else "")
    return (f"{named}: the median round took over {BUSY_MEDIAN_OVER_MIN:g}x the fastest, so the machine was busy "
            "meanwhile and these figures are unreliable; run again on an idle machine")


def put_figure(row: dict, key: str, spread: Spread, scale: float = 1.0) -> None:
    """Store a figure as `row[key]` (its median) with `row[key + '_min']` and `row[key + '_max']`."""
    low, median, high = spread.scaled(scale)
    row[key], row[f"{key}_min"], row[f"{key}_max"] = median, low, high


def busy_figures(data, where: str = "") -> list[str]:
    """Labels of the figures in a report's JSON (dicts and lists, any depth) that is_busy calls
    busy, from `K`, `K_min` and `K_max`; a label names the section, the row's text fields and K."""
    found = []
    if isinstance(data, list):
        for item in data:
            found += busy_figures(item, where)
    elif isinstance(data, dict):
        names = " ".join(str(v) for k, v in data.items() if isinstance(v, str) and k != "unit")
        here = f"{where} {names}".strip()
        for key, value in data.items():
            low, high = data.get(f"{key}_min"), data.get(f"{key}_max")
            if isinstance(value, (int, float)) and low is not None and high is not None:
                if is_busy((low, value, high)):
                    found.append(f"{here} {key}".strip())
            elif isinstance(value, (dict, list)):
                found += busy_figures(value, f"{here} {key}" if isinstance(value, dict) else where)
    return found


def call_spread(fn, calls: int, repeat: int = 7, sync=None, warmup: int = 3) -> Spread:
    """Seconds per call over `repeat` rounds of (`calls` back-to-back calls, then `sync()`)."""
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
    return spread_of(rounds)


def median_call_seconds(fn, calls: int, repeat: int = 7, sync=None, warmup: int = 3) -> float:
    """The median of call_spread (for scripts that report one figure)."""
    return call_spread(fn, calls, repeat, sync, warmup).median


def interleaved_spreads(calls: dict, budget: float, repeat: int, sync) -> dict[str, Spread]:
    """Seconds per call of each callable over `repeat` interleaved rounds.

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
    return {name: spread_of(r) for name, r in rounds.items()}


def interleaved_seconds(calls: dict, budget: float, repeat: int, sync) -> dict[str, float]:
    """The medians of interleaved_spreads (for scripts that report one figure per mode)."""
    return {name: s.median for name, s in interleaved_spreads(calls, budget, repeat, sync).items()}

