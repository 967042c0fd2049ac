"""Which kernel calls of a @qgraph.graph step wait for which: by the device bytes their arrays span.

A call waits for the earlier calls whose arrays overlap its own where either writes, less those it
already waits for through another (capture/step_capture.py builds the edges).
"""

from __future__ import annotations

import struct

from ..args.kinds import arg_type
from ..lang.front.writes import written_params
from ..runtime.call_hooks import BoundCall

_WRITTEN: dict[int, frozenset] = {}  # id(kernel source) -> positions of the array parameters it writes


def written(src) -> frozenset:
    """The positions of the array parameters `src` writes (found once per source)."""
    written = _WRITTEN.get(id(src))
    if written is None:
        written = _WRITTEN[id(src)] = frozenset(written_params(src))
    return written


def _spans(call: BoundCall) -> list[tuple[int, int, bool]]:
    """(start, end, written) of every array a call passes: the device bytes it may touch."""
    writes = written(call.launcher.src)
    spans = []
    for k, (sig, pack) in enumerate(zip(call.key, call.packs)):
        if isinstance(pack, tuple):  # a struct: its leaves, all counted as written
            spans += [s for leaf in pack if isinstance(leaf, bytes) and len(leaf) >= 40
                      for s in [_span(leaf, True)] if s is not None]
            continue
        if getattr(arg_type(sig), "is_array", False):
            found = _span(pack, k in writes)
            if found is not None:
                spans.append(found)
    return spans


def _span(pack: bytes, written: bool):
    """numba's array parameters: meminfo, parent, nitems, itemsize, data, shape..., strides..."""
    if len(pack) < 40 or (len(pack) - 40) % 16:
        return None
    nitems, itemsize, data = struct.unpack_from("<3q", pack, 16)
    ndim = (len(pack) - 40) // 16
    shape = struct.unpack_from(f"<{ndim}q", pack, 40)
    strides = struct.unpack_from(f"<{ndim}q", pack, 40 + 8 * ndim)
    if nitems == 0:
        return None
    low = data + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = data + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + itemsize
    return (low, high, written)


def array_positions(call: BoundCall) -> tuple[int, ...]:
    """Where a call's arrays and structs are among its arguments: all that its dependencies read."""
    return tuple(k for k, (sig, pack) in enumerate(zip(call.key, call.packs))
                 if isinstance(pack, tuple) or getattr(arg_type(sig), "is_array", False))


def dependencies(calls: list[BoundCall]) -> tuple[tuple[int, ...], ...]:
    """For each call, the earlier calls it waits for: those whose arrays overlap its own where
    either writes (conservative: any overlap of the bytes spanned), less those it already waits
    for through another."""
    host = [c.launcher is None for c in calls]  # a qgraph.host_call (step_host) waits and is waited for
    spans = [[] if h else _spans(c) for c, h in zip(calls, host)]
    found: list[tuple[int, ...]] = []
    before: list[set] = []  # every call each call waits for, directly or through others
    for j, mine in enumerate(spans):
        waits = [i for i in range(j) if host[i] or host[j] or any(a0 < b1 and b0 < a1 and (wa or wb)
                                                                   for a0, a1, wa in spans[i] for b0, b1, wb in mine)]
        # an edge from a call another waited-for call already waits for adds nothing: leave it out
        # (one edge from the call before is also what lets it be a programmatic edge)
        found.append(tuple(i for i in waits if not any(i in before[k] for k in waits if k != i)))
        before.append(set(waits).union(*(before[i] for i in waits)))
    return tuple(found)


def first_readers(deps: tuple, readers: set[int]) -> set[int]:
    """The calls among `readers` no earlier reader comes before (through `deps`, each call's direct waits)."""
    before: list[set] = []
    first = set()
    for j, waits in enumerate(deps):
        before.append(set(waits).union(*(before[i] for i in waits)))
        if j in readers and not before[j] & readers:
            first.add(j)
    return first
