"""`kernel.history`: what a kernel's `qgraph.report` statements wrote, read from their ring.

A kernel that reports has a `Reports`: one ring per target (on CUDA pinned host memory the
device writes through its mapping, so the host reads it while a device loop runs; on the CPU
an ordinary array), emptied at the start of each call. `History` decodes the last call's
ring when asked (lang.front.reports describes the layout and the writer's order): the count
first, then the entries, then the count again, keeping only entries no later report could
have overwritten meanwhile, so a live read never returns a torn or reordered row.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping

import numpy as np

from ..errors import HistoryWarning
from ..lang.front.reports import POWERS, PUBLISH, ReportLayout
from . import state as runtime
from .arrays import host_mapped


class Reports:
    """A kernel's report rings and counters, one pair per target, and the last call's."""

    def __init__(self, kernel_name: str, layout: ReportLayout) -> None:
        self.kernel_name = kernel_name
        self.layout = layout
        self._arrays: dict = {}  # target -> (ring Ndarray, its NumPy view, counters Ndarray)
        self._generation = -1
        self.last: np.ndarray | None = None  # the view of the last call's ring
        self.device = None  # the last call's CudaDevice (None on the CPU)
        self.state = None  # the last call's counters (the binder passes them after the ring)
        # what start() writes at every call, made once: the counters' zeros, the ring's count words
        self._zero_counters = np.zeros(layout.state_size)
        self._count_words = np.array([layout.base(k) for k in range(len(layout.names))], dtype=np.intp)

    def start(self):
        """The ring of this call's target with its counts and the counters zeroed: the binder passes it
        as `_qg_report`, then `state` as `_qg_report_state`. On CUDA it first waits for the work queued
        on the device (an earlier call may still write them)."""
        state = runtime.ensure_init()
        if self._generation != state.generation:
            self._arrays.clear()
            self._generation = state.generation
        target = state.current()
        found = self._arrays.get(target)
        if found is None:
            from .arrays import Ndarray

            found = self._arrays[target] = (
                *host_mapped(np.float64, self.layout.size),
                Ndarray(np.float64, (self.layout.state_size,)),
            )
        ring, view, counters = found
        if ring.cuda_device is not None:
            runtime.sync_device(ring.cuda_device)
        counters.from_numpy(self._zero_counters)
        view[self._count_words] = 0
        self.last, self.device, self.state = view, ring.cuda_device, counters
        return ring

    def settled(self) -> bool:
        """Whether no report can be under way: the last call's device has no work queued."""
        return self.device is None or self.device.stream_idle()

    def exact_count(self, k: int) -> int:
        """Reports of name `k` in the last call, from its counters (once settled: read without a wait)."""
        state, word = self.state, self.layout.counters + k
        if state.host is not None:
            return int(state.host[word])
        value = np.empty(1, np.float64)
        state.cuda_device.copy_to_host(value.ctypes.data, state.address + 8 * word, 8)
        return int(value[0])


class History(Mapping):
    """Per report name, a float64 array of (pass, value) rows from the last call, in report
    order; live while a device loop runs (call qgraph.sync() first for the whole call). When a
    name reported more often than its ring holds, its rows are the reports numbered 0, 1, 2,
    4, 8, ... and the latest ones, and reading it warns (HistoryWarning); `count(name)` is
    the number of reports made."""

    def __init__(self, kernel_name: str, reports: Reports | None) -> None:
        self.kernel_name = kernel_name
        self._reports = reports
        self._layout = reports.layout if reports is not None else None

    def __getitem__(self, name: str) -> np.ndarray:
        count, rows = self._read(name)
        if len(rows) < count:
            warnings.warn(
                f"kernel {self.kernel_name}: the history of {name!r} holds {len(rows)} of its {count} "
                f"reports (reports 0, 1, 2, 4, 8, ... and the latest {self._layout.latest}); see "
                "docs/watching.md",
                HistoryWarning,
                stacklevel=2,
            )
        return rows

    def latest(self, name: str) -> np.ndarray | None:
        """The last (pass, value) row of `name` so far, or None (no warning: for live displays)."""
        rows = self._read(name)[1]
        return rows[-1] if len(rows) else None

    def count(self, name: str) -> int:
        """How many reports `name` made in the last call (also those the history no longer holds)."""
        return self._read(name)[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._layout.names if self._layout is not None else ())

    def __len__(self) -> int:
        return len(self._layout.names) if self._layout is not None else 0

    def _read(self, name: str) -> tuple[int, np.ndarray]:
        if self._layout is None or name not in self._layout.names:
            known = ", ".join(repr(n) for n in self) or "none"
            raise KeyError(f"kernel {self.kernel_name} has no report named {name!r} (its reports: {known})")
        reports, k = self._reports, self._layout.names.index(name)
        if reports.last is None:
            return 0, np.empty((0, 2))
        exact = reports.exact_count(k) if reports.settled() else None
        return read_ring(reports.last, self._layout, k, exact)

    def plot(self, path=None, names=None, log: bool = True):
        """A convergence plot of the reports (`names`: all by default) against the pass, on a log
        scale unless `log=False`; written to `path` when given. Needs matplotlib. Returns the figure."""
        try:
            import matplotlib

            if path is not None:
                matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("History.plot needs matplotlib: pip install matplotlib") from None
        figure, axes = plt.subplots(figsize=(6, 4))
        for name in list(self) if names is None else names:
            rows = self[name]
            values = np.abs(rows[:, 1]) if log else rows[:, 1]
            axes.plot(rows[:, 0], values, label=name)
        if log:
            axes.set_yscale("log")
        axes.set_xlabel("pass")
        axes.set_title(f"kernel {self.kernel_name}")
        axes.legend()
        if path is not None:
            figure.savefig(path, dpi=120, bbox_inches="tight")
        return figure


def read_ring(view: np.ndarray, layout: ReportLayout, k: int, exact: int | None) -> tuple[int, np.ndarray]:
    """(reports made, the rows still held) of name `k`. `exact`: the count once the writer is done;
    None while it may be running: then up to PUBLISH reports past the published count may be
    written, or being written, over the oldest latest pairs (lang.front.reports)."""
    base, latest = layout.base(k), layout.latest
    first = int(view[base]) if exact is None else exact
    powers = view[base + 1 : base + 1 + 2 * POWERS].reshape(POWERS, 2).copy()
    ring = view[base + 1 + 2 * POWERS : base + layout.stride].reshape(latest, 2).copy()
    again = int(view[base]) if exact is None else exact
    low = max(first - latest, again - latest + (0 if exact is not None else PUBLISH), 0)  # below: maybe overwritten
    early = [w for w in [0] + [1 << j for j in range(POWERS - 1)] if w < min(low, first)]
    rows = [powers[w.bit_length()] for w in early] + [ring[w % latest] for w in range(low, first)]
    return first, np.array(rows, np.float64).reshape(-1, 2)
