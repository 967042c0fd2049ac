"""A process-wide interpreter setting changed while any of its users runs: the recursion limit and
the collector's threshold while compiles run (compiler.compile_depth, compiler.compile_gc), the
switch interval while CPU runners share the GIL (compiler.cpu_interrupts.HANDOVER)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


class SharedOverride:
    """Nested and concurrent users share one change: the first to enter saves the process's value
    and sets `wanted(saved)` (None: the value is fine as it is), the last to leave puts the saved
    value back, unless the setting changed meanwhile (the user's own change is kept)."""

    def __init__(self, read: Callable[[], object], write: Callable[..., None],
                 wanted: Callable[[object], object | None]) -> None:
        self._read, self._write, self._wanted = read, write, wanted
        self._lock = threading.Lock()
        self._users = 0
        self._saved: object = None
        self._set: object = None  # what enter() wrote, or None

    def enter(self) -> None:
        with self._lock:
            if self._users == 0:
                self._saved = self._read()
                self._set = self._wanted(self._saved)
                if self._set is not None:
                    self._write(self._set)
            self._users += 1

    def leave(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._set is not None and self._read() == self._set:
                self._write(self._saved)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()
