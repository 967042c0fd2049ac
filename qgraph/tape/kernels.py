"""The small kernels a qgraph.Tape runs: copies (snapshots of arrays a later call overwrites),
fills (seeds and zeroed gradients) and adds (a backward pass's gradients accumulated), one per
index rank, so that inside a @qgraph.graph step they are captured with the rest of the step
instead of running eagerly."""

from __future__ import annotations

import numpy as np

from ..decorator import kernel
from ..lang.front.builtins import ndrange
from ..lang.types.vector_types import element_of
from ..runtime import state as runtime
from ..runtime.arrays import Ndarray


@kernel
def _copy0(dst, src):
    dst[()] = src[()]


@kernel
def _copy1(dst, src):
    for i in range(dst.shape[0]):
        dst[i] = src[i]


@kernel
def _copy2(dst, src):
    for i, j in ndrange(dst.shape[0], dst.shape[1]):
        dst[i, j] = src[i, j]


@kernel
def _copy3(dst, src):
    for i, j, k in ndrange(dst.shape[0], dst.shape[1], dst.shape[2]):
        dst[i, j, k] = src[i, j, k]


@kernel
def _fill0(dst, value):
    dst[()] = value


@kernel
def _fill1(dst, value):
    for i in range(dst.shape[0]):
        dst[i] = value


@kernel
def _fill2(dst, value):
    for i, j in ndrange(dst.shape[0], dst.shape[1]):
        dst[i, j] = value


@kernel
def _fill3(dst, value):
    for i, j, k in ndrange(dst.shape[0], dst.shape[1], dst.shape[2]):
        dst[i, j, k] = value


COPY = (_copy0, _copy1, _copy2, _copy3)
FILL = (_fill0, _fill1, _fill2, _fill3)


def index_rank(a) -> int:
    """The number of indices a kernel uses on `a` (an array of vectors: fewer, one per vector axis)."""
    element = getattr(a, "element", None)  # arrays of other libraries have no vector type
    return a.ndim - (len(element_of(element).shape) if element is not None else 0)


@kernel
def _add0(dst, src):
    dst[()] += src[()]


@kernel
def _add1(dst, src):
    for i in range(dst.shape[0]):
        dst[i] += src[i]


@kernel
def _add2(dst, src):
    for i, j in ndrange(dst.shape[0], dst.shape[1]):
        dst[i, j] += src[i, j]


@kernel
def _add3(dst, src):
    for i, j, k in ndrange(dst.shape[0], dst.shape[1], dst.shape[2]):
        dst[i, j, k] += src[i, j, k]


ADD = (_add0, _add1, _add2, _add3)  # a gradient of this backward pass added into the accumulated one


def like(a) -> Ndarray:
    """A zero-filled qgraph array of `a`'s kind on `a`'s device (for another library's array: its
    dtype and shape, on the current device); a qgraph array's ordered on qgraph's stream (the tape
    uses its copies and gradients there only, so making one never waits for the work queued before it)."""
    if not isinstance(a, Ndarray):
        return Ndarray(np.dtype(str(a.dtype).replace("torch.", "")), tuple(a.shape))
    return a.zeros_like(wait=False)


def fill(a: Ndarray, value: float) -> None:
    FILL[index_rank(a)](a, a.element(value) if a.element is not None else value)  # a vector for vector arrays


_SPARE: dict[tuple, list[Ndarray]] = {}  # (kind, shape, device) -> scratch arrays a dead tape gave back
_SPARE_EACH = 8


def scratch_like(a) -> Ndarray:
    """`like(a)`, reusing an array a dead tape gave back where one of the kind is spare: an eager
    backward per step would otherwise allocate (and the pool map) its gradients every time."""
    if isinstance(a, Ndarray):
        spare = _SPARE.get(_spare_key(a))
        if spare:
            return spare.pop()
    return like(a)


def give_back(arrays) -> None:
    """Arrays only a tape used, back for later tapes (their uses are ordered on qgraph's stream)."""
    for a in arrays:
        spare = _SPARE.setdefault(_spare_key(a), [])
        if len(spare) < _SPARE_EACH:
            spare.append(a)


def _spare_key(a: Ndarray) -> tuple:
    """An array's kind, shape, device and runtime generation (qgraph.init() starts afresh)."""
    return a.element or a.dtype, a.index_shape, a.device_id, runtime.STATE.generation
