"""What a qgraph object is to the kernel language: the one owner of the role marker.

The front end, the lowering, the fingerprint and the step decorator ask `role_of(obj)`; the objects
are marked where they are defined (`mark`): a kernel, a @qgraph.func helper, qgraph.host_call, a
Group's collectives. A kernel calls funcs, and rejects the rest with the fix (lang.front.reports).
"""

from __future__ import annotations

KERNEL = "kernel"
FUNC = "func"
HOST_CALL = "host_call"  # runs Python between a step's kernel calls, never in a kernel
COLLECTIVE = "collective"  # qgraph.distributed.Group's all_reduce / exchange_rows: a step's call

_MARKER = "_qgraph_kind"


def mark(obj, role: str):
    """Mark `obj` (a class, function or method) as `role`; returns it."""
    setattr(obj, _MARKER, role)
    return obj


def role_of(obj) -> str | None:
    """The role `obj` was marked with (on it or its class), or None for anything else."""
    return getattr(obj, _MARKER, None)
