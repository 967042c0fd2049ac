"""Stopping a running device loop from the host: a kernel's cancel word, and its error.

A CUDA launcher of a kernel with device loops owns one word of pinned, device-mapped host
memory (and a second, the outermost loop's passes, for progress bars); every loop's condition
kernel reads it at most once per CANCEL_PERIOD_NS of device clock (driver/loop_state.py) and ends
the loop when it is non-zero, recording its pass count with the CANCELLED bit in the loop's
trip record, which the host turns into `LoopCancelled` (or, after Ctrl-C, KeyboardInterrupt)
once the device is idle. `kernel.cancel()` sets it from any thread; Ctrl-C during a wait
for the device sets every word of that device (DeviceState.sync). A loop no other loop
encloses clears it as it starts, so a cancel stops the call running then, not a later one.
"""

from __future__ import annotations

import ctypes

from ..driver.device import check, driver, free_host, owned
from ..errors import LoopCancelled


class CancelWord:
    """Two host-mapped words, [cancel, passes]: `device_pointer` for the loops' state blocks, `set()` from the host."""

    def __init__(self, target) -> None:
        d = driver()
        host = check(
            d.cuMemHostAlloc(16, d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE),
            "cuMemHostAlloc (cancel word)",
        )
        self._release = owned(self, free_host, host)
        self.word = ctypes.c_uint64.from_address(int(host))
        self.word.value = 0
        # the outermost loop's passes, written by its condition kernel when it reads the word (or by
        # the host fallback after each pass): what a progress bar shows while the loop runs
        self.passes_word = ctypes.c_uint64.from_address(int(host) + 8)
        self.passes_word.value = 0
        self.device_pointer = int(check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
        self._target = target
        target.cancel_words.add(self)

    def set(self) -> None:
        self.word.value = 1
        self._target.cancelled.add(self)  # the next sync clears it

    @property
    def is_set(self) -> bool:
        return self.word.value != 0

    def clear(self) -> None:
        self.word.value = 0
        self._target.cancelled.discard(self)

    def close(self) -> None:
        """Give the word back (its launcher's close(), after the device is idle)."""
        self._target.cancel_words.discard(self)
        self._target.cancelled.discard(self)
        self.word = ctypes.c_uint64(0)  # set() and clear() after close touch no freed memory
        self.passes_word = ctypes.c_uint64(0)
        self._release()


def cancelled_error(kernel_name: str, loop, passes: int) -> LoopCancelled:
    """The error of a loop its cancel word stopped: the kernel, the loop's line and its passes."""
    line = f"at line {loop.lineno}" if loop is not None else "around the body"
    return LoopCancelled(
        f"kernel {kernel_name}: the device loop {line} was cancelled after pass {passes:,} "
        "(kernel.cancel(), Ctrl-C or a progress callback returning False); its arrays hold "
        "that pass's results, and the next call runs normally"
    )
