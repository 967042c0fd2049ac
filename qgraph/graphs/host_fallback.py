"""The host fallback of device control flow (before compute capability 9.0 or a driver for CUDA
12.4, or when asked): replay the body, copy the flag to pinned memory, wait on an event, repeat
while non-zero; region trees walked on the host with the same passes, guard and cancel word.
conditional.while_strategy decides when it runs."""

from __future__ import annotations

import ctypes

from ..args.kinds import FlagKind
from ..driver.device import check, driver, free_host, owned
from ..errors import runaway_error
from ..runtime import DeviceState
from ..runtime.cancel import cancelled_error


class FlagReader:
    """Reads an int32 flag back to the host: an async copy into pinned memory, an event, and an
    interruptible wait (Ctrl-C gets through)."""

    def __init__(self, target: DeviceState) -> None:
        d = driver()
        self._device = target.device
        # each handle goes back when the reader is collected (its runner dropped)
        self._host = check(d.cuMemHostAlloc(4, 0), "cuMemHostAlloc")
        self._releases = [owned(self, free_host, self._host)]
        self._value = ctypes.c_int32.from_address(int(self._host))
        self._event = self._device.event()
        self._releases.append(owned(self, self._device.release_event, self._event))
        self._copy = d.cuMemcpyDtoHAsync
        self._record = d.cuEventRecord

    def read(self, flag: int, stream: int) -> bool:
        """Whether the flag at device address `flag` is non-zero, after the stream's work so far."""
        check(self._copy(self._host, flag, 4, stream), "reading the graph_while flag")
        check(self._record(self._event, stream), "cuEventRecord")
        self._device.wait_event(self._event)
        return self._value.value != 0


class HostLoop:
    """A device loop around the whole body, without a WHILE node: run the body, read the flag
    back, repeat while it is non-zero."""

    def __init__(self, target: DeviceState, first_run, graph, flag_slot: tuple[int, int | None],
                 guard: tuple = (None, "", None), cancel=None) -> None:
        self.limit, self.kernel_name, self.region = guard
        self._cancel = cancel  # the launcher's runtime.cancel.CancelWord, read after each pass
        self.passes = 0  # of the last call
        self._first_run = first_run
        self._graph = graph  # a TaskGraph of the body, or None when the body runs eagerly
        self._flag = flag_slot
        self._read = FlagReader(target).read

    def run(self, args: tuple, packs: tuple, stream: int) -> None:
        k, j = self._flag
        flag = int.from_bytes((packs[k] if j is None else packs[k][j])[FlagKind.address], "little")
        self._first_run(args, packs, stream)
        graph = self._graph
        exec_handle = graph.exec_for(packs) if graph is not None else None
        passes, limit, cancel = 1, self.limit, self._cancel
        try:
            while self._read(flag, stream):
                if limit is not None and passes >= limit:
                    raise runaway_error(self.kernel_name, self.region, limit)
                if cancel is not None:
                    cancel.host_passes = passes
                    if cancel.is_set:
                        cancel.clear()
                        raise cancelled_error(self.kernel_name, self.region, passes)
                if graph is not None:
                    graph.relaunch(exec_handle, stream)
                else:
                    self._first_run(args, packs, stream)
                passes += 1
        except KeyboardInterrupt:  # during the wait for the flag: no further pass is queued
            raise KeyboardInterrupt(str(cancelled_error(self.kernel_name, self.region, passes))) from None
        finally:
            self.passes = passes


class HostTree:
    """Device control flow on the host, for regions the host do-while cannot cover (where
    conditional nodes are unavailable): tasks are launched eagerly, one at a time, and each
    loop or branch reads its flag back (a wait per decision). `task_runs` maps a task's index
    to its eager launcher; `slots` maps each flag and count to where its bytes are."""

    def __init__(self, target: DeviceState, body, task_runs: dict, slots: dict, loops: list,
                 kernel_limit: int | None, kernel_name: str, cancel=None) -> None:
        from ..lang.front.regions import DeviceLoop, IfRegion, RepeatLoop, Sequence, loop_limit

        self._types = (DeviceLoop, IfRegion, RepeatLoop, Sequence)
        self._limit = lambda loop: loop_limit(loop, kernel_limit)
        self._body, self._runs, self._slots, self._loops = body, task_runs, slots, loops
        self._name = kernel_name
        self._cancel = cancel  # the launcher's runtime.cancel.CancelWord, read after each pass
        self.passes = [0] * len(loops)
        self._read = FlagReader(target).read

    def run(self, args: tuple, packs: tuple, stream: int) -> None:
        self.passes = [0] * len(self._loops)
        self._walk(self._body, args, packs, stream)

    def _value(self, name: str, packs: tuple) -> bytes:
        k, j = self._slots[name]
        return packs[k] if j is None else packs[k][j]

    def _flag(self, name: str, packs: tuple, stream: int) -> bool:
        return self._read(int.from_bytes(self._value(name, packs)[FlagKind.address], "little"), stream)

    def _passed(self, k: int) -> None:
        """Count a pass of loop k; the outermost loop's count is published for progress bars."""
        self.passes[k] += 1
        if k == 0 and self._cancel is not None:
            self._cancel.host_passes = self.passes[k]

    def _walk(self, region, args: tuple, packs: tuple, stream: int) -> None:
        DeviceLoop, IfRegion, RepeatLoop, Sequence = self._types
        if isinstance(region, Sequence):
            for child in region.children:
                self._walk(child, args, packs, stream)
        elif isinstance(region, IfRegion):
            taken = self._flag(region.flag, packs, stream)
            self._walk(region.then if taken else region.orelse, args, packs, stream)
        elif isinstance(region, RepeatLoop):
            k = self._loops.index(region)
            count = int.from_bytes(self._value(region.count, packs), "little", signed=True)
            self.passes[k] = 0
            for _ in range(max(count, 0)):
                if self._cancel is not None and self._cancel.is_set:  # passes queued so far still run
                    self._cancel.clear()
                    raise cancelled_error(self._name, region, self.passes[k])
                self._walk(region.body, args, packs, stream)
                self._passed(k)
        elif isinstance(region, DeviceLoop):
            k, limit = self._loops.index(region), self._limit(region)
            self.passes[k] = 0
            if region.test_first and not self._flag(region.flag, packs, stream):
                return
            while True:
                self._walk(region.body, args, packs, stream)
                self._passed(k)
                if not self._flag(region.flag, packs, stream):
                    return
                if self._cancel is not None and self._cancel.is_set:
                    self._cancel.clear()
                    raise cancelled_error(self._name, region, self.passes[k])
                if limit is not None and self.passes[k] >= limit:
                    raise runaway_error(self._name, region, limit)
        else:
            self._runs[region.index](args, packs, stream)
