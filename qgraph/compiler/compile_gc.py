"""Python's cyclic garbage collector made rare while numba (CPU) and numba-cuda compile.

numba allocates millions of short-lived objects per compile, and with the default threshold
(a young collection every 700 net allocations) the collector took 0.10-0.13 s of a 0.7-0.8 s
cold CUDA compile of 8 tasks on the 2-core development machine, walking what numba and
numba-cuda built at import again and again. A young threshold of 100,000 allocations keeps
collecting, so what a compile leaves uncollected for a while stays bounded (4 MB more at the
peak), and took 0.045 s off that compile (0.394 -> 0.349 s, median of 5, side by side).

On the CPU too (compiler.cpu_program), though in a fresh process it saved only 3% of a 50-loop
compile and raised the peak of a 200-loop one from 301 to 317 MiB (numba's parfor IR is large
garbage): in a process that holds much already (a test worker late in the suite, an application
with its data), each full collection the compile sets off walks all of it. Over four gradient and
update test files in one process (two such processes side by side), the collector took 21.6 s of
170.0 s as it was, 11.9 s of 156.1 s made rare during numba's CPU compiles (peak 594.7 -> 598.2 MB)."""

from __future__ import annotations

import gc

from .process_settings import SharedOverride

COMPILE_THRESHOLD = 100_000  # young-generation threshold while a compile runs (Python's default: 700)

# 0: collection turned off by the user, left so
_THRESHOLDS = SharedOverride(gc.get_threshold, lambda thresholds: gc.set_threshold(*thresholds),
                             lambda saved: (COMPILE_THRESHOLD, *saved[1:]) if 0 < saved[0] < COMPILE_THRESHOLD
                             else None)


def rare_collections():
    """Raise the collector's young threshold for the duration (nested and concurrent compiles
    share one raise; the last to finish restores the thresholds the process had)."""
    return _THRESHOLDS.held()
