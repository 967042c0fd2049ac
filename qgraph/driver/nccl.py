"""NCCL's C API through ctypes: the collective engine qgraph.distributed captures into step graphs.

NCCL is loaded as it is installed beside PyTorch's CUDA wheels (`libnccl.so.2`, or the
`nvidia.nccl` package's copy). Only what qgraph.distributed needs is bound: a communicator per
rank (its unique id shared by the caller), in-place all-reduce, and grouped send/recv. Enqueued
on a stream that is capturing, each call becomes kernel nodes of the captured graph (with event
nodes while NCCL_GRAPH_MIXING_SUPPORT is on, which capture/step_collective.py removes).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import numpy as np

from ..errors import QgraphError

# ncclDataType_t and ncclRedOp_t (nccl.h)
_DTYPES = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2, np.dtype(np.uint32): 3,
           np.dtype(np.int64): 4, np.dtype(np.uint64): 5, np.dtype(np.float16): 6, np.dtype(np.float32): 7,
           np.dtype(np.float64): 8}
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
UNIQUE_ID_BYTES = 128


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * UNIQUE_ID_BYTES)]


@functools.cache
def library() -> ctypes.CDLL:
    """libnccl, loaded once (NCCL_GRAPH_MIXING_SUPPORT defaults to 0 when qgraph loads it first:
    captured collectives then have no event nodes)."""
    os.environ.setdefault("NCCL_GRAPH_MIXING_SUPPORT", "0")
    tried = ["libnccl.so.2"]
    try:
        import nvidia.nccl  # the wheel PyTorch's CUDA builds depend on

        tried += sorted(glob.glob(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so*")))
    except ImportError:
        pass
    for name in tried:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        raise QgraphError("qgraph.distributed on cuda needs NCCL (libnccl.so.2), which was not found; install "
                          "PyTorch's CUDA build or `pip install nvidia-nccl-cu12` (or -cu13 for CUDA 13)")
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetLastError.restype = ctypes.c_char_p
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
    return lib


def check(result: int, what: str) -> None:
    if result != 0:
        lib = library()
        detail = lib.ncclGetLastError(None) or b""
        raise QgraphError(f"NCCL {what} failed: {lib.ncclGetErrorString(result).decode()} ({result})"
                          + (f": {detail.decode(errors='replace')}" if detail else ""))


def version() -> int:
    out = ctypes.c_int()
    check(library().ncclGetVersion(ctypes.byref(out)), "ncclGetVersion")
    return out.value


def new_unique_id() -> bytes:
    """The id every rank of a new communicator is given (made on one rank, shared by the caller)."""
    uid = UniqueId()
    check(library().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES)


def dtype_code(dtype) -> int:
    code = _DTYPES.get(np.dtype(dtype))
    if code is None:
        raise TypeError(f"NCCL cannot reduce or send {np.dtype(dtype).name} elements; use one of "
                        f"{', '.join(sorted(d.name for d in _DTYPES))}")
    return code


class Communicator:
    """One rank's NCCL communicator (on the CUDA device current when it is made)."""

    def __init__(self, unique_id: bytes, world: int, rank: int) -> None:
        uid = UniqueId()
        ctypes.memmove(ctypes.addressof(uid), unique_id, UNIQUE_ID_BYTES)
        handle = ctypes.c_void_p()
        check(library().ncclCommInitRank(ctypes.byref(handle), world, uid, rank), "ncclCommInitRank")
        self.handle = handle
        self.world, self.rank = world, rank

    def all_reduce(self, address: int, count: int, dtype: int, op: int, stream: int) -> None:
        check(library().ncclAllReduce(ctypes.c_void_p(address), ctypes.c_void_p(address), ctypes.c_size_t(count),
                                      dtype, op, self.handle, ctypes.c_void_p(stream)), "ncclAllReduce")

    def send_recv(self, pairs: list[tuple[str, int, int, int]], dtype: int, stream: int) -> None:
        """Grouped point-to-point: each ("send" or "recv", address, element count, peer rank)."""
        lib = library()
        check(lib.ncclGroupStart(), "ncclGroupStart")
        try:
            for kind, address, count, peer in pairs:
                fn = lib.ncclSend if kind == "send" else lib.ncclRecv
                check(fn(ctypes.c_void_p(address), ctypes.c_size_t(count), dtype, peer, self.handle,
                         ctypes.c_void_p(stream)), f"nccl{kind.capitalize()}")
        finally:
            check(lib.ncclGroupEnd(), "ncclGroupEnd")

    def abort(self) -> None:
        """Free the communicator without waiting for graphs that still hold its work."""
        if self.handle is not None:
            library().ncclCommAbort(self.handle)
            self.handle = None
