"""Process-wide state: the arch, per-device state, the settings read by init().

`init()` and `reset()` bump `generation`; a kernel compares its own generation with the
state's on each call (one integer compare) and drops its compiled code and graphs when
they differ. Everything qgraph keeps for a CUDA device (the device and its stream,
argument lifetimes, the code cache, helper kernels) lives in that device's `DeviceState`;
kernels keep one launcher per device state, so compiled modules and graphs are per device.

`init(device=i)` names the default device; `with qgraph.device(j):` makes another the
current one of this thread (where new arrays live); a kernel call runs on its arrays' device.
"""

from __future__ import annotations

import contextlib
import operator
import threading
import time
import weakref

from ..errors import LoopCancelled, QgraphError
from ..tracebacks import entry_point, user_error
from .settings import ARCHES, Settings, arch_name

# how long a sync waits for host_call callbacks whose launches the device has finished (backends/step_host.py)
HOST_CALLBACK_PATIENCE_S = 1.0


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
        self.cancel_words: weakref.WeakSet = weakref.WeakSet()  # runtime.cancel.CancelWord of each launcher
        self.cancelled: set = set()  # the words set since the last sync (CancelWord.set / clear)
        self.host_nodes: set = set()  # host_call nodes launched since the last sync (backends/step_host.py)
        # held by every kernel call's launch and by sync's bookkeeping: calls from several threads
        # neither interleave their parameter writes, node updates and launches nor race the lifetimes
        self.lock = threading.Lock()

    def release_all(self) -> None:
        self.lifetimes.release_all()

    def sync(self) -> None:
        """Wait for this device's queued work, then release what it held and check the guards.
        Ctrl-C during the wait cancels the device loops (runtime.cancel), waits for them to end
        their pass (a second Ctrl-C stops waiting) and raises KeyboardInterrupt naming the loop; an
        exception of another signal's handler (a SIGALRM Timeout) cancels them too and comes through."""
        try:
            self.device.synchronize()
        except BaseException as error:  # Ctrl-C, or a signal handler's own exception (a SIGALRM Timeout)
            if not self.cancel_words:
                raise
            for word in list(self.cancel_words):
                word.set()
            self.device.synchronize()
            if isinstance(error, KeyboardInterrupt):
                self.check_guards(interrupted=True)
                raise
            with contextlib.suppress(LoopCancelled):  # the handler's exception is what the caller gets
                self.check_guards()
            raise
        with self.lock:
            self.release_all()
            nodes = self.host_nodes
            if nodes:  # a fresh set only when host_call nodes ran: a plain sync allocates nothing
                self.host_nodes = set()
        if nodes:  # host_call nodes: their callbacks have run, or are returning; then their (fn, args) go
            deadline = time.monotonic() + HOST_CALLBACK_PATIENCE_S
            unsettled = {node for node in nodes if not node.settle(deadline)}
            if unsettled:
                with self.lock:
                    self.host_nodes |= unsettled
        self.check_guards()

    def check_guards(self, interrupted: bool = False) -> None:
        """After a sync: raise QgraphError for a device loop its runaway guard stopped, LoopCancelled
        (KeyboardInterrupt when `interrupted`) for one the host cancelled; every record is cleared, and
        every cancel word set since (`cancelled`: a set, so a sync with none pays one test, not a
        walk of every launcher's word)."""
        error = None
        for loop in list(self.guards):
            found = loop.tripped_error()
            if found is not None and error is None:
                error = found
        if self.cancelled:
            for word in list(self.cancelled):
                word.clear()
        if error is not None:
            if interrupted and isinstance(error, LoopCancelled):
                raise KeyboardInterrupt(str(error)) from None
            raise error


class CpuState:
    """The CPU 'device': no stream, no lifetimes; compiled code is numba's."""

    key = "cpu"


class State:
    def __init__(self) -> None:
        self.arch: str | None = None
        self.generation = 0
        self.target: DeviceState | CpuState | None = None  # the default target (init's device)
        self.targets: dict[int, DeviceState] = {}  # every CUDA device in use, by ordinal
        self.settings = Settings()
        self.kernels: weakref.WeakSet = weakref.WeakSet()
        self._devices: dict[int, object] = {}  # CudaDevices stay initialised across init() calls
        self._local = threading.local()  # .ordinal: this thread's current device (qgraph.device)
        self.seed = 0  # qgraph.seed(): the key of in-kernel random numbers
        self.rng_arrays: dict = {}  # target -> uint64 array [seed, epoch] of kernels that draw random numbers

    @property
    def cuda(self):
        """The default CudaDevice (None on cpu)."""
        target = self.target
        return target.device if isinstance(target, DeviceState) else None

    def current(self) -> DeviceState | CpuState:
        """This thread's current target: the device of an enclosing `qgraph.device(i)`, else the default."""
        ordinal = getattr(self._local, "ordinal", None)
        return self.target if ordinal is None else self.target_for(ordinal)

    def target_for(self, ordinal: int) -> DeviceState:
        """The state of CUDA device `ordinal`, opening the device on first use."""
        target = self.targets.get(ordinal)
        if target is None:
            with _OPEN_LOCK:
                target = self.targets.get(ordinal)
                if target is None:
                    target = self.targets[ordinal] = DeviceState(open_device(ordinal), self.settings)
        return target


STATE = State()
# arch -> what init imports of that backend, so that a first call pays its compile and not the import of
# the modules running it (launcher.py registers them: they live above this layer)
BACKEND_LOADERS: dict = {}
_OPEN_LOCK = threading.Lock()


def open_device(ordinal: int):
    """The CudaDevice of `ordinal`, opened (its primary context retained) on first use."""
    from ..driver.device import CudaDevice

    device = STATE._devices.get(ordinal)
    if device is None:
        device = CudaDevice(ordinal)
        STATE._devices[ordinal] = device
    return device


def cuda_status(device: int = 0) -> str | None:
    """None when CUDA device `device` is usable, else why not (the driver's or loader's words)."""
    try:
        open_device(device)
    except QgraphError as e:
        return str(e)
    return None


@entry_point
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
        asked = arch == "cuda"
        if asked:  # numba-cuda imports beside the driver's start (when a compile is due)
            _prefetch_numba(settings)
        try:
            cuda_device = open_device(device)
        except QgraphError:
            if asked:
                raise
        arch = "cuda" if cuda_device is not None else "cpu"
        if not asked and cuda_device is not None:  # chosen by default: only once CUDA is known usable
            _prefetch_numba(settings)
        if cuda_device is not None:
            _prefetch_emitter(settings, cuda_device.info.compute_capability)
    _drop_compiled()
    from ..compiler.cache_keys import forget
    from ..lang import generated

    forget()  # the cache's key is read again on its first use (the directory may have been replaced)

    generated.configure(settings.dump_dir)
    STATE.arch = arch
    STATE.settings = settings
    STATE.targets = {}
    STATE.rng_arrays = {}
    if cuda_device is not None:
        STATE.target = STATE.targets[device] = DeviceState(cuda_device, settings)
    else:
        STATE.target = CpuState()
    loader = BACKEND_LOADERS.get(arch)
    if loader is not None:
        loader()


def _cold(settings: Settings) -> bool:
    """A first call will compile: the code cache holds nothing."""
    from ..compiler.code_cache import CodeCache

    return not CodeCache(settings.cache_dir).holds_entries()


def _prefetch_numba(settings: Settings) -> None:
    """With QGRAPH_EMITTER=0 and a cold cache, start importing numba-cuda. Not beside qgraph's
    emitter: the import would hold the interpreter while the first call compiles (a specialisation
    the emitter leaves to numba-cuda imports it then)."""
    from ..compiler.emitter_mode import OFF, emitter_mode

    if emitter_mode() == OFF and _cold(settings):
        from ..compiler.numba_prefetch import import_numba_cuda_soon

        import_numba_cuda_soon()


def _prefetch_emitter(settings: Settings, cc: tuple) -> None:
    """With the emitter and a cold cache, load what it and NVVM need (compiler.nvvm.load_soon)."""
    from ..compiler.emitter_mode import OFF, emitter_mode

    if emitter_mode() != OFF and _cold(settings):
        from ..compiler.nvvm import load_soon

        load_soon(tuple(cc))


def ensure_init() -> State:
    if STATE.arch is None:
        init()
    return STATE


def _drop_compiled() -> None:
    for target in list(STATE.targets.values()):
        target.sync()
    # step graphs first: their graphs hold nodes of the kernels' modules, which kernels unload
    for kernel in sorted(STATE.kernels, key=lambda k: not getattr(k, "_drops_first", False)):
        kernel.release()
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
    """Wait for all work qgraph has queued (on every stream of every device)."""
    try:  # a device loop's error (the runaway guard) ends at the user's sync (tracebacks.py)
        for target in list(STATE.targets.values()):
            target.sync()
    except Exception as e:
        user_error(e)
        raise


def sync_device(device) -> None:
    """Wait for the work queued on one CudaDevice (what reading one of its arrays needs)."""
    target = STATE.targets.get(device.info.ordinal)
    if target is not None and target.device is device:
        target.sync()
    else:  # its arrays outlived an init() that dropped its state
        device.synchronize()


@contextlib.contextmanager
def device(ordinal: int):
    """`with qgraph.device(i):` makes CUDA device `i` this thread's current device: new arrays
    are allocated there and `device_info()` describes it. Kernel calls run on the device of
    their arrays wherever they are made; scopes nest and are per thread."""
    try:
        ordinal = operator.index(ordinal)
    except TypeError:
        raise TypeError(f"qgraph.device() takes a CUDA device ordinal (int), got {ordinal!r}") from None
    state = ensure_init()
    if state.arch != "cuda":
        raise QgraphError(f"qgraph.device({ordinal}): qgraph runs on {state.arch}, which has no devices to choose; "
                          "call qgraph.init('cuda') first")
    state.target_for(ordinal)  # raises QgraphError for a device that does not exist
    local = state._local
    previous = getattr(local, "ordinal", None)
    local.ordinal = ordinal
    try:
        yield state.targets[ordinal].device.info
    finally:
        local.ordinal = previous


def device_info():
    """The current CUDA device's name, compute capability and driver version (None on cpu)."""
    target = ensure_init().current()
    return target.device.info if isinstance(target, DeviceState) else None


def device_count() -> int:
    """How many CUDA devices the driver sees (0 where CUDA is not usable)."""
    from ..driver.device import device_count as count

    return count()


__all__ = ["STATE", "CpuState", "DeviceState", "State", "arch_name", "cuda_status", "current_arch", "device",
           "device_count", "device_info", "ensure_init", "init", "reset", "sync", "sync_device"]
