"""numba-cuda imported on a background thread while the CUDA driver starts, when a compile is due.

A cold first call imports numba and numba-cuda (0.5-0.7 s on the GPU host) before it compiles,
and `init("cuda")` spends 0.25 s there in cuInit and the primary context, driver calls that
release the GIL. When the code cache holds no CUDA entry (a first run, or caching off), the
first call will compile, so init starts that import beside the driver; on an H100 host import
+ init + the import of numba-cuda took 0.76 s instead of 1.02 s (median of 5). A warm cache never
imports numba, so then nothing starts.
"""

from __future__ import annotations

import sys
import threading

_started: list[threading.Thread] = []


def import_numba_cuda_soon() -> threading.Thread | None:
    """Start importing numba.cuda on a thread unless it is imported or importing; the thread,
    or None. Not a daemon: the interpreter waits for it at exit instead of stopping it inside
    an import. A failure is left to the compile's own import, which reports it."""
    if "numba.cuda" in sys.modules or any(t.is_alive() for t in _started):
        return None
    thread = threading.Thread(target=_import, name="qgraph: import numba-cuda")
    _started[:] = [thread]
    thread.start()
    return thread


def wait() -> None:
    """Let a started import finish before this thread imports numba-cuda itself: importing one of
    its submodules (`numba.cuda.dispatcher`) while the thread imports the package takes the two
    module locks in opposite orders, and Python breaks that deadlock by failing one of the
    imports (`_DeadlockError`, or a `KeyError: 'numba.cuda'` in the other thread)."""
    for thread in _started:
        thread.join()


def _import() -> None:
    try:
        import numba.cuda  # noqa: F401
    except Exception:
        pass
