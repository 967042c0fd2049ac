"""Stopping a running device loop from the host: a kernel's cancel word, and its error.

A CUDA launcher of a kernel with device loops owns two words of device memory, [cancel, passes];
every pass, each loop's condition kernel reads the cancel word (an L2 read issued with its other
loads, driver/loop_state.py) and ends the loop when it is non-zero, recording its pass count with
the CANCELLED bit in the loop's trip record, which the host turns into `LoopCancelled` (or, after
Ctrl-C, KeyboardInterrupt) once the device is idle; the outermost loop writes its passes beside it
for progress bars. The host writes and reads these words through a non-blocking stream of the
device's own (CudaDevice.side_stream), so they reach the device while the loop's graph still runs:
a word in host memory instead cost the loop a read across the bus. `kernel.cancel()` sets it from
any thread; Ctrl-C during a wait for the device sets every word of that device (DeviceState.sync).
A loop no other loop encloses clears it as it starts, so a cancel stops the call running then, not
a later one. The host fallback reads the host's copy (`is_set`) after each pass instead.
"""

from __future__ import annotations

import ctypes

from ..driver.device import check, driver, free_host, owned
from ..errors import LoopCancelled
from ..lang.front.interchange import InterchangedTask


def _free_words(device, pointer: int) -> None:
    """Give the words back once the last set() or read on the side stream is done."""
    d = driver()
    device.ensure_current()
    check(d.cuStreamSynchronize(device.side_stream()), "cuStreamSynchronize (cancel words)")
    check(d.cuMemFree(pointer), "cuMemFree (cancel words)")


class CancelWord:
    """[cancel, passes, stopped] in device memory: `device_pointer` for the loops' state blocks, `abi`
    for interchanged loops' kernels; `set()`, `is_set` and `passes()` from the host.

    An interchanged repeat loop is one kernel whose threads run their passes on their own: every
    1,024 passes each reads the cancel word and, set, ends its passes, writing the most passes any
    of them ran into `stopped` (lang.cuda.loops.cancellable_passes). `interchanged` (kernel name,
    loop) makes a set() also a guard of the next sync, which reads `stopped` and raises then."""

    WORDS = 3

    def __init__(self, target, interchanged: tuple | None = None) -> None:
        from ..args.kinds import numba_abi

        d = driver()
        device = self._device = target.device
        device.ensure_current()
        self.device_pointer = int(check(d.cuMemAlloc(8 * self.WORDS), "cuMemAlloc (cancel words)"))
        self._release = owned(self, _free_words, device, self.device_pointer)
        self._zero()
        self.abi = numba_abi(self.device_pointer, (self.WORDS,), (8,), 8)  # an int64 array, for kernels
        self._interchanged = interchanged
        host = check(d.cuMemHostAlloc(8, 0), "cuMemHostAlloc (passes read back)")
        self._release_host = owned(self, free_host, host)
        self._passes_read = ctypes.c_uint64.from_address(int(host))  # where passes() copies the device's
        self._passes_read.value = 0
        self._set = False  # the host's copy of the cancel word
        self.host_passes = 0  # the host fallback's passes, written after each of them
        self._target = target
        target.cancel_words.add(self)

    def _zero(self) -> None:
        d, side = driver(), self._device.side_stream()
        check(d.cuMemsetD32Async(self.device_pointer, 0, 2 * self.WORDS, side), "cuMemsetD32Async")
        check(d.cuStreamSynchronize(side), "cuStreamSynchronize")

    def set(self) -> None:
        """Ask the running loops to stop: the host's copy now, the device's through the side stream."""
        self._set = True
        self._target.cancelled.add(self)  # the next sync clears it
        if self._interchanged is not None:  # and reads whether an interchanged loop stopped for it
            self._target.guards.add(self)
        if self.device_pointer:
            self._device.ensure_current()
            check(
                driver().cuMemsetD32Async(self.device_pointer, 1, 1, self._device.side_stream()),
                "cuMemsetD32Async (cancel)",
            )

    @property
    def is_set(self) -> bool:
        return self._set

    def clear(self) -> None:
        """After a sync: forget a cancel. The device's word stays set until the next loop that
        clears it starts; the side stream is waited for, so no set() lands after that start."""
        self._set = False
        self._target.cancelled.discard(self)
        if self.device_pointer:
            self._device.ensure_current()
            check(driver().cuStreamSynchronize(self._device.side_stream()), "cuStreamSynchronize")
            if self._interchanged is not None:  # no loop clears the word as it starts: cleared now, idle
                self._zero()

    def tripped_error(self) -> LoopCancelled | None:
        """After a sync (the guard of a set() word with interchanged loops): the error of the loop
        the cancel stopped, or None when it had ended first."""
        self._target.guards.discard(self)
        if not self.device_pointer:
            return None
        d, side = driver(), self._device.side_stream()
        self._device.ensure_current()
        check(d.cuMemcpyDtoHAsync(ctypes.addressof(self._passes_read), self.device_pointer + 16, 8, side),
              "cuMemcpyDtoHAsync (stopped)")
        check(d.cuStreamSynchronize(side), "cuStreamSynchronize")
        stopped = self._passes_read.value
        return cancelled_error(*self._interchanged, stopped, apart=True) if stopped else None

    def passes(self) -> int:
        """The outermost loop's passes so far (a progress bar's): the device loop's, copied on the
        side stream while the loop runs, or the host fallback's."""
        if not self.device_pointer:
            return self.host_passes
        d, side = driver(), self._device.side_stream()
        self._device.ensure_current()
        check(
            d.cuMemcpyDtoHAsync(ctypes.addressof(self._passes_read), self.device_pointer + 8, 8, side),
            "cuMemcpyDtoHAsync (passes)",
        )
        check(d.cuStreamSynchronize(side), "cuStreamSynchronize")
        return max(self._passes_read.value, self.host_passes)

    def close(self) -> None:
        """Give the words back (its launcher's close(), after the device is idle)."""
        self._target.cancel_words.discard(self)
        self._target.cancelled.discard(self)
        self._target.guards.discard(self)
        self.device_pointer = 0  # set(), clear() and passes() after close touch no freed memory
        self._passes_read = ctypes.c_uint64(0)
        self._release()
        self._release_host()


def cancelled_error(kernel_name: str, loop, passes: int, apart: bool = False) -> LoopCancelled:
    """The error of a loop its cancel word stopped: the kernel, the loop's line and its passes; `apart`:
    a CUDA interchanged loop, whose elements stop on their own (`passes`, the most one ran)."""
    line = f"at line {loop.lineno}" if loop is not None else "around the body"
    what = "interchanged repeat loop" if isinstance(loop, InterchangedTask) else "device loop"
    if apart:
        return LoopCancelled(
            f"kernel {kernel_name}: the {what} {line} was cancelled after pass {passes:,} in its element that ran "
            "most (its elements run their passes on their own and stop apart, within 1,024 passes of the cancel; "
            "interchange=False keeps whole passes); the next call runs normally")
    return LoopCancelled(
        f"kernel {kernel_name}: the {what} {line} was cancelled after pass {passes:,} "
        "(kernel.cancel(), Ctrl-C or a progress callback returning False); its arrays hold "
        "that pass's results, and the next call runs normally"
    )
