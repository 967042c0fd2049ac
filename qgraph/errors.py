"""Exceptions and warnings raised by qgraph."""

from __future__ import annotations


class QgraphError(RuntimeError):
    """A qgraph operation failed (no usable device, a driver error, a build failure)."""


class DeviceLoopRefused(QgraphError):
    """A graph_while step's graph cannot hold its loop (a collective NCCL gives a host node): the
    step then loops on the host (capture/step.py)."""


class QgraphSyntaxError(QgraphError):
    """A kernel uses a construct qgraph cannot place in a task; names the source line."""

    def __init__(self, message: str, filename: str | None = None, lineno: int | None = None,
                 source_line: str | None = None) -> None:
        self.message = message
        self.filename = filename
        self.lineno = lineno
        self.source_line = source_line
        where = ""
        if filename is not None and lineno is not None:
            where = f"{filename}:{lineno}: "
        text = where + message
        if source_line:
            text += "\n    " + source_line.strip()
        super().__init__(text)


def runaway_error(kernel_name: str, loop, limit: int) -> QgraphError:
    """The runaway guard's error: the loop, its flag, how far it ran and the fixes."""
    return QgraphError(f"kernel {kernel_name}: the device loop at line {loop.lineno} ran {limit:,} passes with its "
                       f"flag '{loop.flag}' still non-zero and was stopped by the runaway guard (max_iterations="
                       f"{limit}). If the loop needs more passes, raise @qgraph.kernel(max_iterations=...) or "
                       "QGRAPH_MAX_ITERATIONS (max_iterations=None turns the guard off); otherwise check that "
                       "the body sets the flag to 0 (a task writing it, not a local copy)")


class FallbackWarning(UserWarning):
    """A graph_while kernel runs as a host do-while loop instead of a device WHILE node."""


class HistoryWarning(UserWarning):
    """A report's history kept only a subset of its entries (the ring was full; docs/watching.md)."""


class LoopCancelled(QgraphError):
    """A device loop was stopped from the host (kernel.cancel(), Ctrl-C, a progress callback)."""
