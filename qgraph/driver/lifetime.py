"""Keep a queued call's arguments alive until the device has finished with them.

A caller may drop its last reference to an array right after an asynchronous call. qgraph's
own arrays are freed in order on qgraph's stream, so only calls with foreign arrays or on
other streams are held (backends/cuda.py). The call's owners are parked per stream; every
`BATCH` parked calls one event is recorded on that stream, and a batch is released once its
event has completed (or at `sync()`). So such a loop pays one list append per call, and an
event only every BATCH calls.
"""

from __future__ import annotations

from collections import deque

from .device import CudaDevice, check, driver


class Lifetimes:
    BATCH = 32

    def __init__(self, device: CudaDevice) -> None:
        self._device = device
        self._pending: dict[int, list] = {}
        self._in_flight: deque = deque()  # (event, owners)

    def hold(self, stream: int, owners: object) -> None:
        """Keep `owners` alive until the work queued on `stream` so far has completed."""
        batch = self._pending.get(stream)
        if batch is None:
            batch = self._pending[stream] = []
        batch.append(owners)
        if len(batch) >= self.BATCH:
            self._seal(stream, batch)

    def _seal(self, stream: int, batch: list) -> None:
        d = driver()
        event = self._device.event()
        check(d.cuEventRecord(event, stream), "cuEventRecord")
        self._in_flight.append((event, batch))
        self._pending[stream] = []
        self.collect()

    def collect(self) -> None:
        """Release every batch whose work has completed."""
        d = driver()
        ready = d.CUresult.CUDA_SUCCESS
        while self._in_flight:
            event, _ = self._in_flight[0]
            if d.cuEventQuery(event)[0] != ready:
                break
            self._in_flight.popleft()
            self._device.release_event(event)

    def release_all(self) -> None:
        """After a device-wide synchronize: nothing queued can still need its arguments."""
        if not self._pending and not self._in_flight:
            return
        while self._in_flight:
            event, _ = self._in_flight.popleft()
            self._device.release_event(event)
        self._pending.clear()
