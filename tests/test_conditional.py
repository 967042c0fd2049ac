"""The graph_while fallback policy (pure: runs in CI) and the fallback warning (CUDA)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import qgraph
from qgraph.conditional import while_strategy
from qgraph.graphs.unroll import unroll_factor


@pytest.mark.parametrize("cc,driver,graphs,force,expected", [
    ((9, 0), 13000, True, False, "device"),
    ((10, 0), 12040, True, False, "device"),
    ((9, 0), 12030, True, False, "host"),  # driver too old for conditional nodes
    ((8, 9), 13000, True, False, "host"),  # pre-Hopper
    ((7, 5), 12000, True, False, "host"),
    ((9, 0), 13000, True, True, "host"),  # QGRAPH_GRAPH_WHILE=host
    ((9, 0), 13000, False, False, "host"),  # graphs off
])
def test_while_strategy(cc, driver, graphs, force, expected):
    mode, reason = while_strategy(cc, driver, graphs=graphs, force_host=force)
    assert mode == expected
    assert (reason is None) == (expected == "device")


def test_fallback_reasons_name_the_cause():
    assert "8.9" in while_strategy((8, 9), 13000, graphs=True, force_host=False)[1]
    assert "12.3" in while_strategy((9, 0), 12030, graphs=True, force_host=False)[1]
    assert "QGRAPH_GRAPH_WHILE=host" in while_strategy((9, 0), 13000, graphs=True, force_host=True)[1]
    assert "QGRAPH_GRAPHS=0" in while_strategy((9, 0), 13000, graphs=False, force_host=False)[1]


@qgraph.kernel(graph_while="flag")
def tick(counter, flag):
    counter[0] -= 1
    flag[0] = 1 if counter[0] > 0 else 0


def test_fallback_warning_fires_once_per_kernel_and_names_the_reason(cuda, monkeypatch):
    monkeypatch.setenv("QGRAPH_GRAPH_WHILE", "host")
    qgraph.init("cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            counter = qgraph.from_numpy(np.array([3], np.int32))
            tick(counter, qgraph.ndarray(qgraph.i32, (1,)))
            assert counter.to_numpy()[0] == 0
    fallback = [w for w in caught if issubclass(w.category, qgraph.FallbackWarning)]
    assert len(fallback) == 1
    assert "QGRAPH_GRAPH_WHILE=host" in str(fallback[0].message)
    assert tick.stats.host_loop
    monkeypatch.delenv("QGRAPH_GRAPH_WHILE")
    qgraph.init("cuda")


def test_device_loop_is_one_graph_launch_per_call(cuda):
    qgraph.init("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", qgraph.FallbackWarning)
        counter = qgraph.from_numpy(np.array([50], np.int32))
        tick(counter, qgraph.ndarray(qgraph.i32, (1,)))
    assert counter.to_numpy()[0] == 0
    assert tick.stats.replays == 1
    assert not tick.stats.host_loop
    u = unroll_factor(tick.source.body.children[0], None)  # copies of the body per WHILE pass (graph_unroll)
    assert u > 1
    # the copies (the serial task in all but the last does the gate's work: no gate node), the slot writer
    # and the condition
    assert tick.stats.graph_nodes == u + 2


def test_graphs_off_runs_an_eager_host_loop(cuda, monkeypatch):
    monkeypatch.setenv("QGRAPH_GRAPHS", "0")
    qgraph.init("cuda")
    with pytest.warns(qgraph.FallbackWarning, match="graphs are off"):
        counter = qgraph.from_numpy(np.array([4], np.int32))
        tick(counter, qgraph.ndarray(qgraph.i32, (1,)))
    assert counter.to_numpy()[0] == 0
    assert tick.stats.host_loop and not tick.stats.used_graph
    monkeypatch.delenv("QGRAPH_GRAPHS")
    qgraph.init("cuda")


# ------------------------------------------------ state blocks as the host writes them (no GPU)


class _RecordingDevice:
    """Device memory as bytearrays; the driver calls WhileLoop and IfBranch make, recorded."""

    context = "context"

    def __init__(self, driver_version: int = 13000) -> None:
        import types

        self.info = types.SimpleNamespace(driver_version=driver_version)
        self.memory: dict[int, bytearray] = {}
        self.freed: list[int] = []
        self._events: list = []

    def alloc(self, nbytes: int) -> int:
        address = 0x1000 * (len(self.memory) + len(self.freed) + 1)
        self.memory[address] = bytearray(nbytes)
        return address

    def free(self, address: int) -> None:
        del self.memory[address]  # a second free fails here
        self.freed.append(address)

    def _at(self, address: int, nbytes: int) -> tuple[bytearray, slice]:
        base = max(b for b in self.memory if b <= address)
        assert address + nbytes <= base + len(self.memory[base]), "outside the allocation"
        return self.memory[base], slice(address - base, address - base + nbytes)

    def copy_to_device(self, address: int, host: int, nbytes: int) -> None:
        import ctypes

        block, where = self._at(address, nbytes)
        block[where] = ctypes.string_at(host, nbytes)

    def copy_to_host(self, host: int, address: int, nbytes: int) -> None:
        import ctypes

        block, where = self._at(address, nbytes)
        ctypes.memmove(host, bytes(block[where]), nbytes)


@pytest.fixture
def recording(monkeypatch):
    """conditional's driver calls, recorded: (device, target, host buffers freed)."""
    import ctypes
    import types

    import qgraph.conditional as conditional
    import qgraph.driver.device as device_module

    kept, freed_host = [], []

    class Driver:
        CU_MEMHOSTALLOC_DEVICEMAP = 2

        def cuMemHostAlloc(self, nbytes, flags):
            kept.append(ctypes.create_string_buffer(nbytes))
            return 0, ctypes.addressof(kept[-1])

        def cuMemHostGetDevicePointer(self, address, flags):
            return 0, address + 0x40  # a device-side address of its own

        def cuMemFreeHost(self, address):
            freed_host.append(address)
            return (0,)

        def cuGraphAddKernelNode(self, *args):
            return 0, "kernel node"

    driver = Driver()
    monkeypatch.setattr(conditional, "driver", lambda: driver)
    monkeypatch.setattr(device_module, "driver", lambda: driver)
    monkeypatch.setattr(conditional, "helpers",
                        lambda target: types.SimpleNamespace(store=1, condition=2, branch=3, gate=4))
    monkeypatch.setattr(conditional, "conditional_handle", lambda graph, context: 0x60)
    monkeypatch.setattr(conditional, "kernel_node_params", lambda *args: "params")
    monkeypatch.setattr(conditional, "add_edge", lambda *args: None)
    monkeypatch.setattr(conditional, "add_while_node", lambda *args, default: (0x77, "while node", "body"))
    monkeypatch.setattr(conditional, "add_conditional_node",
                        lambda graph, context, deps, kind, size=1: (0x50 + size, "if node", f"body {size}"))
    device = _RecordingDevice()
    return device, types.SimpleNamespace(device=device, guards=set()), freed_host


def test_a_loop_fills_its_state_block_at_the_layouts_offsets_and_frees_it_once(recording):
    import ctypes

    from qgraph.conditional import WhileLoop
    from qgraph.driver.loop_state import LoopMode, LoopState

    device, target, freed_host = recording
    loop = WhileLoop(target, (0, None), 0, (10, "k", None), LoopMode.WHILE, stop_word=0xABC)
    state = LoopState.from_buffer_copy(device.memory[loop.slot])
    assert (state.trip_record, state.mode, state.stop_record) == (loop._record + 0x40, LoopMode.WHILE, 0xABC)
    loop.add_loop("graph", [], bytes(24))
    assert LoopState.from_buffer_copy(device.memory[loop.slot]).handle == 0x77
    loop.add_condition("body", ["last task"], programmatic=False)
    condition = bytes(loop._buffers[-1].data)  # the condition kernel's (handle, state)
    assert condition == (0x77).to_bytes(8, "little") + loop.slot.to_bytes(8, "little")
    device.memory[loop.slot][LoopState.passes.offset] = 5  # as the condition kernel counts
    assert loop.passes() == 5
    slot, record = loop.slot, loop._record
    assert target.guards == {loop}
    loop.close()
    loop.close()
    assert device.freed == [slot] and freed_host == [record] and target.guards == set()
    assert ctypes.sizeof(LoopState) == 10 * 8  # with `live` (unrolled copies) and the cancel word


def test_a_gate_between_unrolled_copies_reads_the_loops_state(recording):
    """A predicated copy's gate takes the state block alone (its tasks read `live` at
    live_address); otherwise the condition kernel sets the handle of an IF node around the copy."""
    from qgraph.conditional import WhileLoop
    from qgraph.driver.loop_state import LoopMode, LoopState

    device, target, _ = recording
    loop = WhileLoop(target, (0, None), 0, (10, "k", None), LoopMode.DO_WHILE)
    loop.add_loop("graph", [], bytes(24))
    assert loop.add_gate("body", ["task"], True, predicated=True) == ("body", ["kernel node"])
    assert bytes(loop._buffers[-1].data) == loop.slot.to_bytes(8, "little")
    assert loop.live_address == loop.slot + LoopState.live.offset
    body, after = loop.add_gate("body", ["task"], True, predicated=False)
    assert bytes(loop._buffers[-1].data) == (0x60).to_bytes(8, "little") + loop.slot.to_bytes(8, "little")
    assert after == ["if node"] and loop.kernel_nodes == 2 + 2
    loop.close()


@pytest.mark.parametrize("has_then,has_else,driver_version,expected", [
    (True, True, 12080, (0x52, 0, 1)),  # one IF node with an else body: one handle
    (True, True, 12040, (0x51, 0x51, 3)),  # an IF node per body
    (True, False, 13000, (0x51, 0, 1)),
    (False, True, 13000, (0, 0x51, 2)),
])
def test_a_branch_records_its_handles_and_which_bodies_exist(recording, has_then, has_else, driver_version,
                                                             expected):
    from qgraph.conditional import IfBranch
    from qgraph.driver.loop_state import BranchState

    device, target, _ = recording
    device.info.driver_version = driver_version
    branch = IfBranch(target, (1, None), 0)
    _, then_body, else_body, _ = branch.add_branch("graph", [], bytes(16), has_then, has_else)
    state = BranchState.from_buffer_copy(device.memory[branch.slot])
    assert (state.then_handle, state.else_handle, state.bodies) == expected
    assert then_body is not None or else_body is not None
    slot = branch.slot
    branch.close()
    assert device.freed == [slot]
