"""What a task reports, as the Python exception a user expects.

Debug mode's failed checks (lang.lower.debug_checks) arrive in an int64 record array, written on
the device or in a CPU loop and read by the launcher when the call completes: an index out
of bounds becomes IndexError, a non-finite store FloatingPointError and an integer division
by zero ZeroDivisionError, naming the kernel, the source line, the array, the index and the
shape (or the division). An exception raised inside a CPU task
(numba reports one from a parallel loop as a SystemError) becomes an exception of its
original type naming the kernel and the task's line.
"""

from __future__ import annotations

import ctypes
import linecache

from ..lang.front.parse import KernelSource
from ..lang.lower.debug_checks import DIVISOR_AXIS, FINITE_AXIS, RECORD_WORDS, Site
from ..tracebacks import at_source


def _where(src: KernelSource, lineno: int) -> str:
    return f"kernel {src.name}, line {lineno} ({src.filename}:{lineno})"


def _source_line(src: KernelSource, lineno: int) -> str:
    line = linecache.getline(src.filename, lineno).strip()
    return f"\n    {line}" if line else ""


def _display(name: str) -> str:
    """A flattened parameter's name as the user wrote it (`s__x` is the struct field `s.x`)."""
    return name.replace("__", ".")


def check_failure(src: KernelSource, sites: list[Site], words) -> Exception:
    """The exception for a failed debug check recorded as `words` (the record's values)."""
    site = sites[int(words[0]) - 1]
    n = int(words[2])
    values = tuple(int(v) for v in words[3:3 + n])
    lead = _where(src, site.lineno)
    if site.axis == DIVISOR_AXIS:
        return at_source(ZeroDivisionError(f"{lead}: integer division or modulo by zero ({site.array}) (debug mode; "
                                           f"without it the result is 0, as NumPy gives)"
                                           f"{_source_line(src, site.lineno)}"), src.filename, site.lineno)
    if site.axis == FINITE_AXIS:
        what = ("NaN", "+inf", "-inf")[int(words[1])]
        at = f" at index {values[0] if n == 1 else values}" if n else ""
        return at_source(FloatingPointError(f"{lead}: {what} was stored into '{_display(site.array)}'{at} "
                                            f"(debug mode: QGRAPH_DEBUG=nan){_source_line(src, site.lineno)}"),
                         src.filename, site.lineno)
    shape = values[0:1] if n == 1 else values
    return at_source(IndexError(f"{lead}: index {int(words[1])} is out of bounds for axis {site.axis} of "
                                f"'{_display(site.array)}' with shape {shape} (debug mode)"
                                f"{_source_line(src, site.lineno)}"), src.filename, site.lineno)


def task_exception(src: KernelSource, tasks, error: BaseException) -> Exception:
    """An exception raised in one of `tasks`, re-raised with the kernel and the task's line:
    of its original type (numba wraps one from a parallel loop in a SystemError)."""
    original = error.__cause__ if isinstance(error, SystemError) and error.__cause__ is not None else error
    lines = sorted({t.lineno for t in tasks})
    if len(lines) == 1:
        lead = f"{_where(src, lines[0])}, in a task"
    else:
        lead = f"kernel {src.name}, in one of the tasks at lines {', '.join(map(str, lines))} ({src.filename})"
    message = f"{lead}: {original}{_source_line(src, lines[0]) if len(lines) == 1 else ''}"
    try:
        found = type(original)(message)
    except Exception:  # an exception type that takes other arguments: keep it, add the place
        found = original
        if hasattr(found, "add_note"):
            found.add_note(lead)
    return at_source(found, src.filename, lines[0]) if len(lines) == 1 else found


class DeviceRecord:
    """A launcher's record on the device (the array the task kernels take as `_qg_record`) and
    its pinned host copy, read when a debug call completes."""

    def __init__(self, device) -> None:
        from ..args.kinds import numba_abi
        from ..driver.device import check, driver, free_host, owned

        self._device = device
        nbytes = RECORD_WORDS * 8
        self.pointer = device.alloc(nbytes)
        self._releases = [owned(self, device.free, self.pointer)]  # close() or the collector
        device.memset(self.pointer, b"\0", nbytes)
        device.sync_stream()
        self.abi = numba_abi(self.pointer, (RECORD_WORDS,), (8,), 8)
        d = driver()
        self._host = check(d.cuMemHostAlloc(nbytes, 0), "cuMemHostAlloc (debug record)")
        self._releases.append(owned(self, free_host, self._host))
        self.words = (ctypes.c_int64 * RECORD_WORDS).from_address(int(self._host))
        self._event = device.event()
        self._releases.append(owned(self, device.release_event, self._event))
        self._copy, self._record, self._check = d.cuMemcpyDtoHAsync, d.cuEventRecord, check

    def read(self, stream) -> list[int] | None:
        """After the stream's work so far: the record's values if a check failed (and the
        record cleared for the next call), else None."""
        check, nbytes = self._check, RECORD_WORDS * 8
        check(self._copy(self._host, self.pointer, nbytes, stream), "reading the debug record")
        check(self._record(self._event, stream), "cuEventRecord")
        self._device.wait_event(self._event)
        if not self.words[0]:
            return None
        found = list(self.words)
        self._device.memset(self.pointer, b"\0", nbytes)
        self._device.sync_stream()
        return found

    def close(self) -> None:
        """Free the record and its host copy (once; the launcher synchronised first)."""
        self.pointer = 0
        for release in self._releases:
            release()
