"""The CUDA device qgraph runs on, through cuda.bindings' driver API.

Owns the primary context, qgraph's default stream, stream-ordered memory, module loading
and an event pool. Imports only `cuda.bindings.driver` (fast), never numba, so a process
whose kernels are all in the disk cache starts without loading the compiler.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass

from ..errors import QgraphError

_driver = None
_SPINS = 2000  # event queries before wait_event starts sleeping (about a millisecond)


def driver():
    """cuda.bindings.driver, imported on first use (raises QgraphError when missing)."""
    global _driver
    if _driver is None:
        try:
            from cuda.bindings import driver as d
        except ImportError as e:  # pragma: no cover - cuda-bindings is a dependency
            raise QgraphError(f"CUDA is not usable: cuda-bindings cannot be imported ({e})") from None
        _driver = d
    return _driver


def fail(err, what: str) -> QgraphError:
    d = driver()
    try:
        name = d.cuGetErrorName(err)[1].decode()
        text = d.cuGetErrorString(err)[1].decode()
    except Exception:
        name, text = str(err), ""
    return QgraphError(f"{what} failed: {name} ({text})")


def kernel_failure(name: str):
    """failure(err, what) -> QgraphError "<what> of kernel <name> failed: ...", for generated code."""
    def failure(err, what: str) -> QgraphError:
        return fail(err, f"{what} of kernel {name}")
    return failure


def check(result, what: str):
    """Unpack a cuda.bindings result tuple, raising QgraphError on a driver error."""
    err = result[0]
    if err:
        raise fail(err, what)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    driver_version: int  # e.g. 13000 for CUDA 13.0
    multiprocessors: int

    @property
    def driver_version_tuple(self) -> tuple[int, int]:
        return self.driver_version // 1000, (self.driver_version % 1000) // 10


class CudaDevice:
    """One CUDA device with its primary context and qgraph's default stream."""

    def __init__(self, ordinal: int = 0) -> None:
        d = driver()
        try:
            err = d.cuInit(0)[0]
        except Exception as e:  # the driver library itself could not be loaded
            raise QgraphError(f"CUDA is not usable: the NVIDIA driver (libcuda.so) could not be loaded "
                              f"({type(e).__name__}: {e})") from None
        if err:
            raise QgraphError(f"CUDA is not usable: {fail(err, 'cuInit').args[0]}")
        count = check(d.cuDeviceGetCount(), "cuDeviceGetCount")
        if count == 0:
            raise QgraphError("CUDA is not usable: no CUDA device found")
        if not 0 <= ordinal < count:
            raise QgraphError(f"CUDA device {ordinal} does not exist ({count} device(s) found)")
        self.handle = check(d.cuDeviceGet(ordinal), "cuDeviceGet")
        attr = d.CUdevice_attribute
        major = check(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle), "cc")
        minor = check(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle), "cc")
        sms = check(d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.handle), "sms")
        name = check(d.cuDeviceGetName(256, self.handle), "cuDeviceGetName").split(b"\0")[0].decode()
        version = check(d.cuDriverGetVersion(), "cuDriverGetVersion")
        self.info = DeviceInfo(ordinal, name, (major, minor), version, sms)
        # The primary context is shared with PyTorch, CuPy and numba; it is retained for the
        # life of the process so that device arrays outlive re-initialisation.
        self.context = check(d.cuDevicePrimaryCtxRetain(self.handle), "cuDevicePrimaryCtxRetain")
        self._set_current = d.cuCtxSetCurrent
        check(self._set_current(self.context), "cuCtxSetCurrent")
        # the thread this device's context is known to be current on (see make_current)
        self._thread = threading.get_ident()
        for device in OPENED:  # this thread's current context is this one's now
            if device._thread == self._thread:
                device._thread = None
        OPENED.append(self)
        # A blocking stream: ordered with the legacy default stream that other libraries use.
        self.stream = check(d.cuStreamCreate(0), "cuStreamCreate")
        self.stream_handle = int(self.stream)
        self._side = None  # side_stream()
        self._events: list = []
        self._modules: set = set()  # loaded modules, unloaded by their owners (or with the process)
        self._ctx_synchronize = d.cuCtxSynchronize
        self._event_query, self._stream_query = d.cuEventQuery, d.cuStreamQuery
        self._not_ready = d.CUresult.CUDA_ERROR_NOT_READY

    # ------------------------------------------------------------------ context

    def make_current(self) -> None:
        """Make the context current on this thread, for launches: `_thread` remembers the thread
        it is current on, and is cleared when qgraph makes another device's context current
        there. Launches, graph updates and events go to qgraph's streams and graphs, which carry
        their own context, so a switch made behind qgraph's back (torch.cuda.set_device) does not
        misdirect them; what does use the current context (memory, modules, synchronisation)
        calls ensure_current."""
        ident = threading.get_ident()
        if ident != self._thread:
            err = self._set_current(self.context)[0]
            if err:
                raise fail(err, "cuCtxSetCurrent")
            for device in OPENED:
                if device._thread == ident:
                    device._thread = None
            self._thread = ident

    def ensure_current(self) -> None:
        """make_current, and with more than one device open set the context anyway (this thread
        may have switched behind qgraph's back): memory, modules and synchronisation use it."""
        if len(OPENED) > 1:
            self._thread = None
        self.make_current()

    def synchronize(self) -> None:
        """Wait for qgraph's work: its own stream, polled so that Ctrl-C gets through, then
        (only after calls given another stream) the whole context."""
        self.ensure_current()
        self.sync_stream()
        if FOREIGN_STREAMS[0]:
            FOREIGN_STREAMS[0] = False
            err = self._ctx_synchronize()[0]
            if err:
                raise fail(err, "cuCtxSynchronize")

    def sync_stream(self) -> None:
        """Wait for qgraph's stream, interruptibly (see wait_event)."""
        self.ensure_current()
        self._wait(self._stream_query, self.stream, "cuStreamQuery")

    def side_stream(self):
        """A non-blocking stream of qgraph's own for the host's small writes and reads of words the
        device loops use (runtime.cancel): its work runs beside qgraph's stream, so it reaches a
        loop whose graph is still running; made at the first use."""
        if self._side is None:
            self.ensure_current()
            d = driver()
            self._side = check(d.cuStreamCreate(int(d.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")
        return self._side

    def stream_idle(self) -> bool:
        """Whether qgraph's stream has finished its work (a query, no wait)."""
        self.ensure_current()
        return self._stream_query(self.stream)[0] != self._not_ready

    def wait_event(self, event) -> None:
        """Wait until `event` completes, interruptibly."""
        self._wait(self._event_query, event, "cuEventQuery")

    def _wait(self, query, handle, what: str) -> None:
        """Poll `query(handle)` until done. A blocking driver wait holds the thread in C, so a
        runaway device loop would never let Ctrl-C reach Python; polling does. Spins first (a
        short wait costs about 0.7 us more than a blocking one on an H100), then sleeps in
        growing steps up to a millisecond."""
        not_ready = self._not_ready
        for _ in range(_SPINS):
            err = query(handle)[0]
            if err != not_ready:
                break
        else:
            delay = 20e-6
            while True:
                time.sleep(delay)
                err = query(handle)[0]
                if err != not_ready:
                    break
                delay = min(2 * delay, 1e-3)
        if err:
            raise fail(err, what)

    # ------------------------------------------------------------------ memory

    def alloc(self, nbytes: int) -> int:
        """Device memory from the stream-ordered pool, ready for use on any stream."""
        if nbytes == 0:
            return 0
        self.ensure_current()
        d = driver()
        ptr = check(d.cuMemAllocAsync(nbytes, self.stream), "cuMemAllocAsync")
        return int(ptr)

    def free(self, ptr: int) -> None:
        """Give `alloc`'s memory back, ordered after the work queued on qgraph's stream."""
        if ptr:
            self.ensure_current()
            check(driver().cuMemFreeAsync(ptr, self.stream), "cuMemFreeAsync")

    def memset(self, ptr: int, value: bytes, count: int) -> None:
        """Fill `count` elements of len(value) bytes with `value`, ordered on qgraph's stream."""
        size = len(value)
        if count == 0:
            return
        self.ensure_current()
        d = driver()
        if value == bytes(size) or size == 1:
            check(d.cuMemsetD8Async(ptr, value[0], count * size, self.stream), "cuMemsetD8Async")
        elif size == 2:
            check(d.cuMemsetD16Async(ptr, int.from_bytes(value, "little"), count, self.stream), "cuMemsetD16Async")
        elif size == 4:
            check(d.cuMemsetD32Async(ptr, int.from_bytes(value, "little"), count, self.stream), "cuMemsetD32Async")
        elif value[:4] == value[4:]:
            check(d.cuMemsetD32Async(ptr, int.from_bytes(value[:4], "little"), count * 2, self.stream),
                  "cuMemsetD32Async")
        else:  # 8-byte pattern with different halves: a strided pair of 32-bit fills
            lo, hi = int.from_bytes(value[:4], "little"), int.from_bytes(value[4:], "little")
            check(d.cuMemsetD2D32Async(ptr, 8, lo, 1, count, self.stream), "cuMemsetD2D32Async")
            check(d.cuMemsetD2D32Async(ptr + 4, 8, hi, 1, count, self.stream), "cuMemsetD2D32Async")

    def copy_to_device(self, ptr: int, host_ptr: int, nbytes: int) -> None:
        if nbytes:
            self.ensure_current()
            d = driver()
            check(d.cuMemcpyHtoDAsync(ptr, host_ptr, nbytes, self.stream), "cuMemcpyHtoDAsync")
            check(d.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def copy_to_host(self, host_ptr: int, ptr: int, nbytes: int) -> None:
        if nbytes:
            self.ensure_current()
            d = driver()
            check(d.cuMemcpyDtoHAsync(host_ptr, ptr, nbytes, self.stream), "cuMemcpyDtoHAsync")
            check(d.cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    # ------------------------------------------------------------------ modules

    def load_module(self, image: bytes):
        self.ensure_current()
        d = driver()
        module = check(d.cuModuleLoadData(image), "cuModuleLoadData")
        self._modules.add(module)
        return module

    def unload_module(self, module) -> None:
        """Unload a module; its owner makes sure no queued work or graph still uses it."""
        if module in self._modules:
            self.ensure_current()
            self._modules.discard(module)
            check(driver().cuModuleUnload(module), "cuModuleUnload")

    def function(self, module, name: str):
        return check(driver().cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")

    # ------------------------------------------------------------------ events

    def event(self):
        """A timing-disabled event from the pool (give it back with `release_event`)."""
        if self._events:
            return self._events.pop()
        self.ensure_current()
        d = driver()
        return check(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")

    def release_event(self, event) -> None:
        self._events.append(event)

    def link_ptx(self, ptx_list: list[tuple[str, str]]) -> bytes:
        """Link PTX sources (name, text) into one cubin with the driver's JIT linker (on any thread:
        compiler.cuda_images links a kernel's groups of variants on several)."""
        import ctypes

        self.ensure_current()
        d = driver()
        state = check(d.cuLinkCreate(0, [], []), "cuLinkCreate")
        try:
            for name, ptx in ptx_list:
                data = ptx.encode() + b"\0"
                check(d.cuLinkAddData(state, d.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data),
                                      name.encode(), 0, [], []), f"cuLinkAddData({name})")
            cubin_ptr, size = check(d.cuLinkComplete(state), "cuLinkComplete")
            return ctypes.string_at(int(cubin_ptr), size)
        finally:
            d.cuLinkDestroy(state)


def free_host(ptr) -> None:
    """Give back pinned host memory from cuMemHostAlloc."""
    check(driver().cuMemFreeHost(ptr), "cuMemFreeHost")


def owned(owner: object, release, *args) -> weakref.finalize:
    """Call `release(*args)` exactly once: when `owner` is garbage collected, or earlier when
    the returned finalizer is called (the owner's close()). An error in a release run by the
    collector goes to sys.unraisablehook (printed, not swallowed). Never at interpreter exit:
    the process's end releases the context's memory and events with it, and the driver may
    be unloading by then."""
    finalizer = weakref.finalize(owner, release, *args)
    finalizer.atexit = False
    return finalizer


OPENED: list[CudaDevice] = []  # every device opened in this process, in order
FOREIGN_STREAMS = [False]  # a call ran on a stream given with stream=: sync() then waits for the context


def device_count() -> int:
    """How many CUDA devices the driver sees (0 where CUDA is not usable)."""
    try:
        d = driver()
        if d.cuInit(0)[0]:
            return 0
        return check(d.cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception:
        return 0


def pointer_device(ptr: int) -> int | None:
    """The ordinal of the device that owns device pointer `ptr` (None when the driver does not
    know it: host or unregistered memory)."""
    d = driver()
    err, ordinal = d.cuPointerGetAttribute(d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    return None if err else int(ordinal)


def capturing(handle: int) -> bool:
    """Whether the stream is capturing into a graph (another library's torch.cuda.graph, CuPy or
    cuda.core capture); cuStreamIsCapturing is itself safe to call during a capture."""
    err, status = driver().cuStreamIsCapturing(handle)
    if err:
        raise fail(err, "cuStreamIsCapturing")
    return status != driver().CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def stream_handle(stream: object) -> int:
    """The CUstream handle (as an int) of any stream spelling the SPEC accepts."""
    FOREIGN_STREAMS[0] = True
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    for attr in ("cuda_stream", "ptr"):  # PyTorch, CuPy
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    handle = getattr(stream, "handle", None)  # numba / cuda.core
    if handle is not None:
        value = getattr(handle, "value", handle)
        try:
            return int(value) if value is not None else 0
        except TypeError:
            pass
    raise TypeError(f"stream=: {type(stream).__name__} is not a stream; pass a cuda.core, numba, CuPy or "
                    "PyTorch stream, or an integer CUstream handle")
