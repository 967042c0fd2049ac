"""Owned driver handles (driver.device.owned, weakref.finalize): each is released exactly once,
when its owner is collected or closed, never at interpreter exit, and a failing release is
reported rather than swallowed. The CUDA tests follow each owner qgraph has: arrays, the flag
reader, the debug record, scratch arrays, and a closed graph's loop and branch state."""

from __future__ import annotations

import gc
import subprocess
import sys

import numpy as np
import pytest

import qgraph
from qgraph.driver.device import owned

pytestmark = pytest.mark.usefixtures("collect_only_new_objects")  # their gc.collect() calls, cheap late in a run


class _Owner:
    pass


@pytest.fixture
def unraisable(monkeypatch):
    """What reached sys.unraisablehook (where an error in a finalizer goes) during the test."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


def _collect(*finalizers) -> None:
    gc.collect()
    assert not any(f.alive for f in finalizers), "a handle was not released when its owner went"


def test_a_handle_is_released_once_when_its_owner_is_collected(unraisable):
    released = []
    owner = _Owner()
    finalizer = owned(owner, released.append, 7)
    assert released == [] and finalizer.alive
    del owner
    _collect(finalizer)
    assert released == [7]
    finalizer()  # a later close() does nothing
    assert released == [7] and unraisable == []


def test_a_closed_owner_releases_now_and_not_again_when_collected():
    released = []
    owner = _Owner()
    finalizer = owned(owner, released.append, 7)
    finalizer()
    assert released == [7]
    del owner
    gc.collect()
    assert released == [7]


def test_a_failing_release_is_reported_not_swallowed(unraisable):
    def fail(what):
        raise RuntimeError(f"{what} could not be released")

    owner = _Owner()
    owned(owner, fail, "the slot")
    del owner
    gc.collect()
    assert [str(u.exc_value) for u in unraisable] == ["the slot could not be released"]


def test_nothing_is_released_at_interpreter_exit():
    script = ("from qgraph.driver.device import owned\n"
              "class Owner: pass\n"
              "kept = Owner()\n"
              "owned(kept, print, 'released at exit')\n"
              "print('done')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n" and out.stderr == ""


class _FakeDevice:
    """The memory calls Scratch makes, recorded (no GPU needed)."""

    def __init__(self) -> None:
        self.live: set[int] = set()
        self.freed: list[int] = []
        self._next = 0x10000

    def alloc(self, nbytes: int) -> int:
        self._next += 0x1000
        self.live.add(self._next)
        return self._next

    def free(self, ptr: int) -> None:
        self.live.remove(ptr)  # a second free of the same pointer fails here
        self.freed.append(ptr)

    def memset(self, ptr: int, value: bytes, count: int) -> None:
        assert ptr in self.live

    def sync_stream(self) -> None:
        pass


def test_scratch_arrays_are_freed_once_with_their_kernel(unraisable):
    from qgraph.compiler.cuda_program import Scratch

    device = _FakeDevice()
    scratch = Scratch(device, [(np.dtype(np.float64), 40), (np.dtype(np.int32), 1)])
    pointers = list(scratch.pointers)
    assert device.live == set(pointers) and len(pointers) == 2
    del scratch
    gc.collect()
    assert sorted(device.freed) == sorted(pointers) and device.live == set() and unraisable == []


# ---------------------------------------------------------------------- CUDA


def _pinned(ptr) -> bool:
    """Whether `ptr` is pinned host memory the driver knows (false once cuMemFreeHost ran)."""
    from qgraph.driver.device import driver

    return not driver().cuMemHostGetFlags(ptr)[0]


def test_an_arrays_device_memory_is_freed_when_the_last_reference_goes(cuda, unraisable):
    device = qgraph.runtime.STATE.cuda
    a = qgraph.ndarray(qgraph.f32, (1000,))
    finalizer = a._free
    _, release, args, _ = finalizer.peek()
    assert release == device.free and args == (a.address,)
    view = a  # a second reference keeps it
    del a
    gc.collect()
    assert finalizer.alive
    del view
    _collect(finalizer)
    qgraph.sync()
    assert unraisable == []


def test_a_flag_readers_pinned_memory_and_event_go_back_when_it_is_collected(cuda, unraisable):
    from qgraph.graphs.host_fallback import FlagReader

    target = qgraph.runtime.STATE.target
    reader = FlagReader(target)
    host, event, releases = reader._host, reader._event, list(reader._releases)
    assert _pinned(host) and event not in target.device._events
    del reader
    _collect(*releases)
    assert not _pinned(host)
    assert event in target.device._events  # back in the pool
    assert unraisable == []


def test_a_debug_record_is_released_once_by_close_or_by_the_collector(cuda, unraisable):
    from qgraph.backends.debug_report import DeviceRecord

    device = qgraph.runtime.STATE.cuda
    closed, collected = DeviceRecord(device), DeviceRecord(device)
    closed_host, collected_host = closed._host, collected._host
    releases = list(closed._releases)
    closed.close()
    assert not any(f.alive for f in releases) and not _pinned(closed_host) and closed.pointer == 0
    closed.close()  # again: nothing left to release
    releases = list(collected._releases)
    del collected
    _collect(*releases)
    assert not _pinned(collected_host)
    assert unraisable == []


@qgraph.kernel
def _looping(x, flag, k: int):
    flag[0] = 2
    while qgraph.loop(flag):
        for i in range(x.shape[0]):
            x[i] += 1.0
        flag[0] -= 1
    if qgraph.cond(flag):
        x[0] = -1.0
    for _ in qgraph.repeat(k, unroll=2):  # unroll set: the WHILE form (else 2 passes are built straight)
        x[1] += 10.0


def test_a_closed_graph_releases_its_loop_and_branch_state(cuda, unraisable):
    from qgraph.driver.loop_state import LoopMode

    x, flag = qgraph.ndarray(qgraph.f64, (3,)), qgraph.ndarray(qgraph.i32, (1,))
    _looping(x, flag, 2)
    np.testing.assert_array_equal(x.to_numpy(), [2.0, 22.0, 2.0])
    target = qgraph.runtime.STATE.target
    launcher = _looping.launchers[target.key]
    graph = launcher.specialisations()[0][1].graph
    if graph is None or not graph._loops:
        pytest.skip("no device WHILE loops here (conditional nodes need compute capability 9.0 and CUDA 12.4)")
    loops, branches = list(graph._loops), list(graph._branches)
    # the repeat loop, unrolled, is two WHILE nodes (count // U passes of U copies, then count % U)
    assert [loop.mode for loop in loops] == [LoopMode.WHILE, LoopMode.COUNT, LoopMode.COUNT] and len(branches) == 1
    records = [loop._record for loop in loops]
    releases = [f for item in loops for f in item._releases] + [b._free for b in branches]
    assert all(f.alive for f in releases) and all(loop in target.guards for loop in loops)
    qgraph.reset()  # closes every graph
    assert not any(f.alive for f in releases)
    assert not any(_pinned(r) for r in records) and not any(loop in target.guards for loop in loops)
    assert unraisable == []


@qgraph.kernel(deterministic=True)
def _total(x, out):
    for i in range(x.shape[0]):
        out[0] += x[i]


def test_a_deterministic_kernels_scratch_is_freed_when_its_code_is_dropped(cuda, unraisable):
    x, out = qgraph.from_numpy(np.arange(1000.0)), qgraph.ndarray(qgraph.f64, (1,))
    _total(x, out)
    assert out.to_numpy()[0] == np.arange(1000.0).sum()
    launcher = _total.launchers[qgraph.runtime.STATE.target.key]
    scratches = [tk.scratch for spec, _ in launcher.specialisations() for tk in spec.kernels if tk.scratch is not None]
    assert scratches, "a deterministic reduction keeps per-block partials in scratch arrays"
    releases = [f for s in scratches for f in s._releases]
    del scratches, launcher
    qgraph.reset()  # drops the compiled code
    _collect(*releases)
    assert unraisable == []
