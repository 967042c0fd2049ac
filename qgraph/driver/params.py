"""Persistent kernel parameter blocks, handed to the driver by address.

Each launch site (an eager task, or a kernel node of a graph) owns one `ParamBuffer`: a
fixed-size bytearray whose address the driver reads through `extra`
(CU_LAUNCH_PARAM_BUFFER_POINTER). The driver copies the block at launch / node-update
time, so the buffer can be rewritten as soon as the call returns.
"""

from __future__ import annotations

import ctypes

CU_LAUNCH_PARAM_END = 0
CU_LAUNCH_PARAM_BUFFER_POINTER = 1
CU_LAUNCH_PARAM_BUFFER_SIZE = 2


class ParamBuffer:
    """A parameter block handed to the driver by address; rewrite with `data[:] = block`."""

    __slots__ = ("data", "_view", "_size", "_extra", "extra")

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        if size == 0:
            self._view = self._size = self._extra = None
            self.extra = 0  # a kernel without parameters takes neither kernelParams nor extra
            return
        self._view = (ctypes.c_char * size).from_buffer(self.data)
        self._size = ctypes.c_size_t(size)
        self._extra = (ctypes.c_void_p * 5)(CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(self._view),
                                             CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self._size),
                                             CU_LAUNCH_PARAM_END)
        self.extra = ctypes.addressof(self._extra)
