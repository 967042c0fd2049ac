"""Room on Python's stack while a kernel with nested @qgraph.func helpers is flattened and compiled.

A chain of nested helpers goes one level deeper per helper in the flattener (lang.flat: each
helper specialised inside its caller's flattening), in the adjoint's inlining (lang.adjoint) and
in numba, which types a call of another jitted function by compiling that function on the spot
(about 40 frames a level): Python's default limit of 1000 frames ended a chain at about 35
levels with RecursionError. While those run the limit is at least COMPILE_RECURSION_LIMIT (60
levels compile with 3,000); a higher limit the process set itself is kept. Nested and
concurrent uses share one raise, as compile_gc's."""

from __future__ import annotations

import sys

from .process_settings import SharedOverride

COMPILE_RECURSION_LIMIT = 10_000  # frames; 60 nested helpers compile with 3,000

_LIMIT = SharedOverride(sys.getrecursionlimit, sys.setrecursionlimit,
                        lambda saved: COMPILE_RECURSION_LIMIT if saved < COMPILE_RECURSION_LIMIT else None)


def room_to_recurse():
    """Raise Python's recursion limit for the duration (the last compile to finish restores it)."""
    return _LIMIT.held()
