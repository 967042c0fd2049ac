"""A specialisation's cubins: its PTX variants linked in groups, each group on its own thread.

The driver's JIT linker runs ptxas on the calling thread, one input after another, and releases
the interpreter while it does: a kernel's variants (plain, launch_dependents, gated, gating: see
compiler.cuda_program) linked as separate cubins on separate threads take the time of the largest
instead of the sum (the pressure solve of stable fluids: 144 ms linked together, 56 ms in five
groups; H200, an empty driver cache). Each cubin is loaded as its own module; `CudaImages` knows
which holds each entry, and packs them into one code-cache binary.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from . import ptx_text

PtxGroup = Sequence[tuple[str, str]]  # (name, PTX text) linked together into one cubin

_POOL: list[ThreadPoolExecutor] = []  # made on the first link with more than one group
_POOL_LOCK = threading.Lock()  # two threads' first compiles make one pool


def link_threads() -> int:
    """Links at once: one per core this process may run on (ptxas is busy on its thread), at most 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cores))


def _pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(link_threads(), thread_name_prefix="qgraph: link"))
    return _POOL[0]


@dataclass(frozen=True)
class CudaImages:
    """Linked cubins, and the kernel entries each defines (None: an entry of an older cache
    format, one cubin holding every entry)."""

    cubins: tuple[bytes, ...]
    entries: tuple[tuple[str, ...], ...] | None

    @property
    def nbytes(self) -> int:
        return sum(len(c) for c in self.cubins)

    def manifest(self) -> dict:
        """What the code-cache manifest records to unpack `binary()` again."""
        return {"image_sizes": [len(c) for c in self.cubins], "image_entries": [list(e) for e in self.entries or ()]}

    def binary(self) -> bytes:
        return b"".join(self.cubins)

    @classmethod
    def unpacked(cls, manifest: dict, binary: bytes) -> CudaImages | None:
        """The images of a cache entry; None when its sizes do not add up (treated as a miss)."""
        sizes = manifest.get("image_sizes")
        if sizes is None:  # one cubin with every entry (entries cached before the images were split)
            return cls((binary,), None)
        if sum(sizes) != len(binary) or len(manifest.get("image_entries", ())) != len(sizes):
            return None
        cubins, at = [], 0
        for size in sizes:
            cubins.append(binary[at:at + size])
            at += size
        return cls(tuple(cubins), tuple(tuple(e) for e in manifest["image_entries"]))


def link_groups(link: Callable[[PtxGroup], bytes], groups: list[PtxGroup]) -> CudaImages:
    """Each group linked by `link` (the device's JIT linker, or ptxas and nvlink offline) into its
    own cubin, the groups on a thread pool when there are several; the first failure is raised."""
    groups = [g for g in groups if g]
    if len(groups) <= 1:
        cubins = [link(g) for g in groups]
    else:
        futures = [_pool().submit(link, g) for g in groups]
        cubins = [f.result() for f in futures]
    entries = tuple(tuple(name for _, ptx in g for name in ptx_text.ptx_entries(ptx)) for g in groups)
    return CudaImages(tuple(cubins), entries)


class LoadedImages:
    """The images loaded as modules on one device: `function(entry)` finds the module defining it."""

    def __init__(self, device, images: CudaImages) -> None:
        self.device = device
        self.modules = tuple(device.load_module(c) for c in images.cubins)
        self._holder = {} if images.entries is None else {
            entry: module for module, names in zip(self.modules, images.entries) for entry in names}

    def function(self, entry: str):
        return self.device.function(self._holder.get(entry, self.modules[0]), entry)

    def unload(self) -> None:
        for module in self.modules:
            self.device.unload_module(module)
