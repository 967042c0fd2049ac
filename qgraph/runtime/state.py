"""Process-wide state: the arch, per-device state, the settings read by init().

`init()` and `reset()` bump `generation`; a kernel compares its own generation with the
state's on each call (one integer compare) and drops its compiled code and graphs when
they differ. Everything qgraph keeps for a CUDA device (the device and its stream,
argument lifetimes, the code cache, helper kernels) lives in that device's `DeviceState`;
kernels keep one launcher per device state, so compiled modules and graphs are per device.
"""

from __future__ import annotations

import threading
import weakref

from ..errors import QgraphError
from .settings import ARCHES, Settings, arch_name


class DeviceState:
    """One CUDA device and what qgraph keeps for it (still one device in use by default)."""

    def __init__(self, device, settings: Settings) -> None:
        from ..compiler.code_cache import CodeCache
        from ..driver.lifetime import Lifetimes

        self.device = device
        self.key = f"cuda:{device.info.ordinal}"
        self.lifetimes = Lifetimes(device)
        self.code_cache = CodeCache(settings.cache_dir)
        self.helpers: dict[str, object] = {}  # helper kernels loaded on this device, by name
        self.guards: set = set()  # device loops with a runaway guard (conditional.WhileLoop)
        # held by every kernel call's launch and by sync's bookkeeping: calls from several threads
        # neither interleave their parameter writes, node updates and launches nor race the lifetimes
        self.lock = threading.Lock()

    def release_all(self) -> None:
        self.lifetimes.release_all()

    def check_guards(self) -> None:
        """After a sync: raise QgraphError for a device loop its runaway guard stopped."""
        for loop in list(self.guards):
            loop.raise_if_tripped()


class CpuState:
    """The CPU 'device': no stream, no lifetimes; compiled code is numba's."""

    key = "cpu"


class State:
    def __init__(self) -> None:
        self.arch: str | None = None
        self.generation = 0
        self.target: DeviceState | CpuState | None = None  # where kernels run now
        self.settings = Settings()
        self.kernels: weakref.WeakSet = weakref.WeakSet()
        self._devices: dict[int, object] = {}  # CudaDevices stay initialised across init() calls
        self.seed = 0  # qgraph.seed(): the key of in-kernel random numbers
        self._rng = None  # (target, uint64 array [seed, epoch]) of kernels that draw random numbers

    @property
    def cuda(self):
        """The current CudaDevice (None on cpu)."""
        target = self.target
        return target.device if isinstance(target, DeviceState) else None


STATE = State()


def _open_device(ordinal: int):
    from ..driver.device import CudaDevice

    device = STATE._devices.get(ordinal)
    if device is None:
        device = CudaDevice(ordinal)
        STATE._devices[ordinal] = device
    return device


def cuda_status(device: int = 0) -> str | None:
    """None when CUDA device `device` is usable, else why not (the driver's or loader's words)."""
    try:
        _open_device(device)
    except QgraphError as e:
        return str(e)
    return None


def init(arch: str | None = None, *, device: int = 0) -> None:
    """Choose the backend. None: QGRAPH_ARCH, else cuda when usable, else cpu.

    Calling it again re-initialises: compiled kernels and graphs are dropped.
    """
    settings = Settings.from_environ()
    if arch is None:
        arch = settings.arch
    elif not isinstance(arch, str) or arch.strip().lower() not in ARCHES:
        raise ValueError(f"init(arch={arch!r}): expected 'cuda', 'cpu' or None")
    else:
        arch = arch.strip().lower()  # the spellings QGRAPH_ARCH accepts (settings.arch_name)
    cuda_device = None
    if arch in (None, "cuda"):
        try:
            cuda_device = _open_device(device)
        except QgraphError:
            if arch == "cuda":
                raise
        arch = "cuda" if cuda_device is not None else "cpu"
    _drop_compiled()
    from ..lang import generated

    generated.configure(settings.dump_dir)
    STATE.arch = arch
    STATE.settings = settings
    STATE.target = DeviceState(cuda_device, settings) if cuda_device is not None else CpuState()


def ensure_init() -> State:
    if STATE.arch is None:
        init()
    return STATE


def _drop_compiled() -> None:
    target = STATE.target
    if isinstance(target, DeviceState):
        target.device.synchronize()
        with target.lock:
            target.release_all()
        target.check_guards()
    # step graphs first: their graphs hold nodes of the kernels' modules, which kernels unload
    for kernel in sorted(STATE.kernels, key=lambda k: not getattr(k, "_drops_first", False)):
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
    target = STATE.target
    if isinstance(target, DeviceState):
        target.device.synchronize()
        with target.lock:
            target.release_all()
        target.check_guards()


def device_info():
    """The CUDA device's name, compute capability and driver version (None on cpu)."""
    state = ensure_init()
    return state.cuda.info if state.cuda is not None else None


__all__ = ["STATE", "CpuState", "DeviceState", "State", "arch_name", "cuda_status", "current_arch", "device_info",
           "ensure_init",
           "init", "reset", "sync"]
