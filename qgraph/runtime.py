"""Process-wide state: the arch, the CUDA device, settings read from the environment.

`init()` and `reset()` bump `generation`; a kernel compares its own generation with the
state's on each call (one integer compare) and drops its compiled code and graphs when
they differ.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

from .errors import QgraphError

ARCHES = ("cuda", "cpu")


@dataclass(frozen=True)
class Settings:
    """What the environment variables say, read by init()."""

    graphs: bool = True  # QGRAPH_GRAPHS=0 turns CUDA graphs off
    graph_while_host: bool = False  # QGRAPH_GRAPH_WHILE=host forces the host do-while
    cache_dir: str | None = None  # QGRAPH_CACHE_DIR; None when the disk cache is off
    graph_cache_size: int = 16  # QGRAPH_GRAPH_CACHE_SIZE: graphs kept per kernel (LRU)
    programmatic_edges: bool = True  # QGRAPH_PDL=0: plain edges between graph kernel nodes

    @classmethod
    def from_environ(cls, environ=os.environ) -> Settings:
        graphs = environ.get("QGRAPH_GRAPHS", "1").strip().lower() not in ("0", "false", "off", "no")
        mode = environ.get("QGRAPH_GRAPH_WHILE", "auto").strip().lower()
        if mode not in ("auto", "host", "device", ""):
            raise QgraphError(f"QGRAPH_GRAPH_WHILE={mode!r}: expected 'host' (force the host loop) or 'auto'")
        size_text = environ.get("QGRAPH_GRAPH_CACHE_SIZE", "16")
        try:
            size = int(size_text)
            if size < 1:
                raise ValueError
        except ValueError:
            raise QgraphError(f"QGRAPH_GRAPH_CACHE_SIZE={size_text!r}: expected a positive integer") from None
        pdl = environ.get("QGRAPH_PDL", "1").strip().lower() not in ("0", "false", "off", "no")
        return cls(graphs, mode == "host", cache_directory(environ), size, pdl)


def cache_directory(environ=os.environ) -> str | None:
    """The compiled-code cache directory, or None when QGRAPH_CACHE=0 turns it off."""
    if environ.get("QGRAPH_CACHE", "1").strip().lower() in ("0", "false", "off", "no"):
        return None
    explicit = environ.get("QGRAPH_CACHE_DIR")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "qgraph")


class State:
    def __init__(self) -> None:
        self.arch: str | None = None
        self.generation = 0
        self.cuda = None  # CudaDevice when arch == "cuda"
        self.lifetimes = None  # Lifetimes when arch == "cuda"
        self.settings = Settings()
        self.kernels: weakref.WeakSet = weakref.WeakSet()
        self._devices: dict[int, object] = {}  # devices stay initialised across init() calls


STATE = State()


def _open_device(ordinal: int):
    from .cuda_device import CudaDevice

    device = STATE._devices.get(ordinal)
    if device is None:
        device = CudaDevice(ordinal)
        STATE._devices[ordinal] = device
    return device


def init(arch: str | None = None, *, device: int = 0) -> None:
    """Choose the backend. None: QGRAPH_ARCH, else cuda when usable, else cpu.

    Calling it again re-initialises: compiled kernels and graphs are dropped.
    """
    settings = Settings.from_environ()
    if arch is None:
        arch = os.environ.get("QGRAPH_ARCH", "").strip().lower() or None
        if arch is not None and arch not in ARCHES:
            raise QgraphError(f"QGRAPH_ARCH={arch!r}: expected 'cuda' or 'cpu'")
    elif arch not in ARCHES:
        raise ValueError(f"init(arch={arch!r}): expected 'cuda', 'cpu' or None")
    cuda_device = None
    if arch in (None, "cuda"):
        try:
            cuda_device = _open_device(device)
        except QgraphError:
            if arch == "cuda":
                raise
        arch = "cuda" if cuda_device is not None else "cpu"
    _drop_compiled()
    STATE.arch = arch
    STATE.settings = settings
    STATE.cuda = cuda_device
    if cuda_device is not None:
        from .lifetime import Lifetimes

        STATE.lifetimes = Lifetimes(cuda_device)
    else:
        STATE.lifetimes = None


def ensure_init() -> State:
    if STATE.arch is None:
        init()
    return STATE


def _drop_compiled() -> None:
    if STATE.cuda is not None:
        STATE.cuda.synchronize()
        if STATE.lifetimes is not None:
            STATE.lifetimes.release_all()
    for kernel in list(STATE.kernels):
        kernel._drop()
    STATE.generation += 1


def reset() -> None:
    """Drop every compiled kernel, graph and persistent buffer; the next call rebuilds."""
    if STATE.arch is None:
        return
    _drop_compiled()


def current_arch() -> str:
    """'cuda' or 'cpu' (initialising with arch=None if needed)."""
    return ensure_init().arch


def sync() -> None:
    """Wait for all work qgraph has queued (on every stream)."""
    cuda = STATE.cuda
    if cuda is not None:
        cuda.synchronize()
        STATE.lifetimes.release_all()


def device_info():
    """The CUDA device's name, compute capability and driver version (None on cpu)."""
    state = ensure_init()
    return state.cuda.info if state.cuda is not None else None
