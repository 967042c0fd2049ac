"""Device control flow: the WHILE loop of a DeviceLoop region, its condition kernel and
pointer slot, the capability check and the host fallback.

Device loop (compute capability 9.0+, driver for CUDA 12.4+), per DeviceLoop region:

    [store flag address -> slot] -> WHILE(handle) { body region ... -> condition kernel }

The handle's default value is 1 and is re-armed on every launch (CU_GRAPH_COND_ASSIGN_DEFAULT),
so each call runs the body at least once: do-while. The condition kernel reads the flag
through the device pointer slot (`**slot != 0`). The slot is written by a kernel node ahead
of the loop whose parameter is the flag's address: a different flag array changes that
node's parameter bytes, updated in place like any task node, so it needs no rebuild and
stays ordered with earlier launches of the same graph.

Host loop (everything else): host_fallback.py.

The helper kernels' C source and the state blocks they share with Python: driver/loop_state.py.
"""

from __future__ import annotations

import ctypes

from .args.kinds import FlagKind
from .compiler.code_cache import entry_key
from .driver import nvrtc
from .driver.device import check, driver, free_host, owned
from .driver.loop_state import (
    BRANCH_PARAMS,
    CANCELLED,
    CONDITION_PARAMS,
    GATE_PARAMS,
    HELPER_SOURCE,
    STORE_PARAMS,
    BranchBodies,
    BranchState,
    LoopMode,
    LoopState,
    write_field,
)
from .driver.nodes import (
    GraphNode,
    add_conditional_node,
    add_edge,
    add_while_node,
    conditional_handle,
    kernel_node_params,
)
from .driver.params import ParamBuffer
from .errors import runaway_error
from .lang.front.regions import RepeatLoop, loop_limit
from .runtime import DeviceState
from .runtime.cancel import cancelled_error

MIN_COMPUTE_CAPABILITY = (9, 0)
MIN_DRIVER_VERSION = 12040  # CUDA 12.4
IF_ELSE_DRIVER = 12080  # CUDA 12.8: IF nodes with an else body


def while_strategy(compute_capability: tuple[int, int], driver_version: int, *, graphs: bool,
                   force_host: bool) -> tuple[str, str | None]:
    """('device', None) or ('host', why): where a graph_while loop runs. Pure, for testing."""
    if force_host:
        return "host", "QGRAPH_GRAPH_WHILE=host is set"
    if not graphs:
        return "host", "CUDA graphs are off (QGRAPH_GRAPHS=0 or cuda_graph disabled)"
    if tuple(compute_capability) < MIN_COMPUTE_CAPABILITY:
        cc = ".".join(map(str, compute_capability))
        return "host", f"the GPU's compute capability {cc} is below 9.0 (conditional graph nodes need Hopper or newer)"
    if driver_version < MIN_DRIVER_VERSION:
        major, minor = driver_version // 1000, (driver_version % 1000) // 10
        return "host", f"the driver supports CUDA {major}.{minor}; conditional graph nodes need CUDA 12.4 or newer"
    return "device", None


NO_LIMIT = (1 << 64) - 1


class HelperKernels:
    """The slot-writer and condition kernels, loaded once per device (`source`: HELPER_SOURCE, or
    the benchmark's former condition kernel)."""

    def __init__(self, target: DeviceState, source: str = HELPER_SOURCE) -> None:
        device = target.device
        cc = device.info.compute_capability
        key = entry_key("while-helpers", source, f"sm_{cc[0]}{cc[1]}")
        cached = target.code_cache.load(key)
        if cached is not None:
            cubin = cached[1]
        else:
            cubin = nvrtc.compile_cubin(source, "qgraph_while.cu", cc)
            target.code_cache.store(key, {"nvrtc": nvrtc.version()}, cubin)
        module = device.load_module(cubin)
        self.store = device.function(module, "qgraph_store_flag_address")
        self.condition = device.function(module, "qgraph_while_condition")
        self.gate = device.function(module, "qgraph_loop_gate")
        self.branch = device.function(module, "qgraph_set_branch")


def helpers(target: DeviceState) -> HelperKernels:
    found = target.helpers.get("while")
    if found is None:
        found = target.helpers["while"] = HelperKernels(target)
    return found


class WhileLoop:
    """The graph part of one DeviceLoop region: its state block (the flag's address, the pass
    count, the guard's limit, the trip record), conditional handle and condition kernel.

    `number` tells the loops of one graph apart (each has its own state constant). `guard`
    is (limit or None, kernel name, the DeviceLoop): a loop stopped by the guard writes its
    pass count into pinned host memory, which qgraph.sync() reads (DeviceState.check_guards).
    """

    @classmethod
    def of_region(cls, spec, region, number: int, count_part: tuple[int, bool], outermost: bool) -> WhileLoop:
        """The loop of a DeviceLoop or RepeatLoop region of `spec` (graphs.builder.GraphSpec). A loop no loop
        encloses clears the cancel word as it starts; not a repeat's remainder part, which runs after
        its main part (a cancel during that must stop it too)."""
        cancel = (spec.cancel_word, outermost and not count_part[1])
        if isinstance(region, RepeatLoop):
            return cls(spec.target, spec.flags[region.count], number, (None, spec.name, region), LoopMode.COUNT,
                       spec.stop_word, count_part, cancel)
        return cls(spec.target, spec.flags[region.flag], number,
                   (loop_limit(region, spec.options.max_iterations), spec.name, region),
                   LoopMode.WHILE if region.test_first else LoopMode.DO_WHILE, spec.stop_word, cancel=cancel)

    def __init__(self, target: DeviceState, flag_slot: tuple[int, int | None], number: int = 0,
                 guard: tuple = (None, "", None), mode: LoopMode = LoopMode.DO_WHILE, stop_word: int = 0,
                 count_part: tuple[int, bool] = (1, False), cancel: tuple[int, bool] = (0, False)) -> None:
        d = driver()
        self.kernel_nodes = 2  # the slot writer and the condition kernel (and a gate per unrolled copy)
        # a repeat loop unrolled U times: (U, False) runs count // U passes of U copies, (U, True) count % U
        divisor, remainder = count_part
        self.scale = 1 if remainder else divisor  # body runs per pass (stats.iterations)
        self.remainder = remainder  # the second WHILE node of an unrolled repeat loop
        self.predicated: set = set()  # the unrolled copies whose tasks read `live` themselves (graphs.unroll)
        self._device = target.device
        self._target = target
        self._helpers = helpers(target)
        self.limit, self.kernel_name, self.region = guard
        self.mode = mode
        self.slot = self._device.alloc(ctypes.sizeof(LoopState))
        self._releases = [owned(self, self._device.free, self.slot)]  # close() or the collector
        self._record = check(d.cuMemHostAlloc(8, d.CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc (trip record)")
        self._releases.append(owned(self, free_host, self._record))
        self.tripped = ctypes.c_uint64.from_address(int(self._record))
        self.tripped.value = 0
        record_device = int(check(d.cuMemHostGetDevicePointer(self._record, 0), "cuMemHostGetDevicePointer"))
        # the slot writer sets the flag's address, the passes and the limit; add_loop the handle
        state = LoopState(trip_record=record_device, mode=mode, stop_record=stop_word, cancel_word=cancel[0],
                          clears_cancel=int(cancel[1]))  # cancel: (the kernel's word, whether it clears it)
        self._device.copy_to_device(self.slot, ctypes.addressof(state), ctypes.sizeof(state))
        target.guards.add(self)
        self._buffers: list[ParamBuffer] = []
        self._constant = f"_slot{number}"
        self._limit = f"_limit{number}"
        address = FlagKind.address
        # the slot writer's parameters: (state address, the flag's element pointer from its array bytes, limit)
        k, j = flag_slot  # the flag's (or count's) value: p[k], or leaf j of a struct argument p[k]
        value = f"p[{k}]" if j is None else f"p[{k}][{j}]"
        if mode == LoopMode.COUNT:  # (state, 0, the count as 8 bytes)
            self.slot_expr = f"{self._constant} + _zero8 + _int64_bytes({value}, {divisor}, {remainder})"
        else:
            self.slot_expr = f"{self._constant} + {value}[{address.start}:{address.stop}] + {self._limit}"

    def add_loop(self, graph, deps: list, block: bytes):
        """Add the slot writer (after `deps`) and the WHILE node; returns (body graph, WHILE node, slot node)."""
        d = driver()
        store = ParamBuffer(STORE_PARAMS)
        store.data[:] = block
        store_params = kernel_node_params(self._helpers.store, 1, 1, store)
        store_node = check(d.cuGraphAddKernelNode(graph, deps, len(deps), store_params), "adding the flag-slot node")
        self._buffers.append(store)
        self.handle, while_node, body = add_while_node(graph, self._device.context, [store_node], default=0)
        write_field(self._device, self.slot, LoopState.handle, int(self.handle))
        slot_node = GraphNode(self.slot_expr, "1", store, store_params, store_node)
        return body, while_node, slot_node

    def add_condition(self, body, deps: list, programmatic: bool) -> None:
        """The condition kernel after `deps`; `programmatic` only behind one kernel node (not a conditional)."""
        d = driver()
        cond = ParamBuffer(CONDITION_PARAMS)
        cond.data[:] = int(self.handle).to_bytes(8, "little") + self.slot.to_bytes(8, "little")
        params = kernel_node_params(self._helpers.condition, 1, 1, cond)
        node = check(d.cuGraphAddKernelNode(body, [], 0, params), "adding the condition kernel")
        for dep in deps:
            add_edge(body, dep, node, programmatic)
        self._buffers.append(cond)

    def add_gate(self, body, deps: list, programmatic: bool, predicated: bool):
        """Between unrolled copies: count the pass, check flag and guard. `predicated`: the next copy's
        tasks read `live` (gated variants): (body, [gate]); else an IF node guards it: (its body, [IF])."""
        d = driver()
        handle = None if predicated else conditional_handle(body, self._device.context)
        gate = ParamBuffer(GATE_PARAMS if predicated else CONDITION_PARAMS)
        gate.data[:] = (b"" if predicated else int(handle).to_bytes(8, "little")) + self.slot.to_bytes(8, "little")
        params = kernel_node_params(self._helpers.gate if predicated else self._helpers.condition, 1, 1, gate)
        node = check(d.cuGraphAddKernelNode(body, [], 0, params), "adding a gate between unrolled copies")
        for dep in deps:
            add_edge(body, dep, node, programmatic)
        self._buffers.append(gate)
        self.kernel_nodes += 1
        if predicated:
            return body, [node]
        _, if_node, copy = add_conditional_node(body, self._device.context, [node], "IF", handle)
        return copy, [if_node]

    @property
    def live_address(self) -> int:
        """The device address of the state block's `live` word, which gated task variants read."""
        return self.slot + LoopState.live.offset

    def constants(self) -> dict:
        limit = NO_LIMIT if self.limit is None else self.limit
        return {self._constant: self.slot.to_bytes(8, "little"), self._limit: limit.to_bytes(8, "little"),
                "_zero8": bytes(8), "_int64_bytes": _int64_bytes}

    def tripped_error(self) -> Exception | None:
        """After a sync (DeviceState.check_guards): the guard's QgraphError if it stopped this loop,
        LoopCancelled if its cancel word did (the record cleared), else None."""
        value = self.tripped.value
        if not value:
            return None
        self.tripped.value = 0
        if value & CANCELLED:
            return cancelled_error(self.kernel_name, self.region, value & ~CANCELLED)
        return runaway_error(self.kernel_name, self.region, self.limit)

    def passes(self) -> int:
        """Passes of the last launch (waits for the stream)."""
        value = ctypes.c_uint64(0)
        passes = LoopState.passes
        self._device.copy_to_host(ctypes.addressof(value), self.slot + passes.offset, passes.size)
        return value.value * self.scale

    def close(self) -> None:
        """Free the state block and the trip record (once; the caller made sure no launch is queued)."""
        self._target.guards.discard(self)
        self.slot = 0
        for release in self._releases:
            release()


def _int64_bytes(scalar: bytes, divisor: int = 1, remainder: bool = False) -> bytes:
    """A repeat count's parameter bytes (int8 to int64, little-endian) as 8 signed bytes; unrolled
    `divisor` times, the passes of its main loop (count // divisor) or of its remainder loop."""
    count = int.from_bytes(scalar, "little", signed=True)
    if divisor > 1:
        count = max(count, 0) % divisor if remainder else max(count, 0) // divisor
    return count.to_bytes(8, "little", signed=True)


class IfBranch:
    """The graph part of one IfRegion: a one-thread kernel reads the flag and sets the handles of
    an IF node for the `then` body and one for the `orelse` body (each only if non-empty)."""

    kernel_nodes = 1

    def __init__(self, target: DeviceState, flag_slot: tuple[int, int | None], number: int) -> None:
        self._device = target.device
        self._helpers = helpers(target)
        self.slot = self._device.alloc(ctypes.sizeof(BranchState))
        self._free = owned(self, self._device.free, self.slot)  # close() or the collector
        self._buffers: list[ParamBuffer] = []
        self._constant = f"_branch{number}"
        address = FlagKind.address
        k, j = flag_slot
        flag = f"p[{k}]" if j is None else f"p[{k}][{j}]"
        self.slot_expr = f"{self._constant} + {flag}[{address.start}:{address.stop}]"

    def add_branch(self, graph, deps: list, block: bytes, has_then: bool, has_else: bool):
        """Add the branch kernel (after `deps`) and the conditional nodes: one IF-ELSE node where
        the driver has it (CUDA 12.8+) and both branches have work, else an IF node per non-empty
        branch. Returns (kernel GraphNode, then body or None, else body or None, the nodes later
        work depends on)."""
        d = driver()
        buffer = ParamBuffer(BRANCH_PARAMS)
        buffer.data[:] = block
        params = kernel_node_params(self._helpers.branch, 1, 1, buffer)
        node = check(d.cuGraphAddKernelNode(graph, deps, len(deps), params), "adding the branch kernel")
        self._buffers.append(buffer)
        handles, bodies, after = [0, 0], [None, None], []
        context = self._device.context
        if has_then and has_else and self._device.info.driver_version >= IF_ELSE_DRIVER:
            handles[0], if_node, bodies = add_conditional_node(graph, context, [node], "IF", size=2)
            has_else, after = False, [if_node]  # one handle: non-zero runs the first body, zero the second
        else:
            for side, wanted in enumerate((has_then, has_else)):
                if wanted:
                    handles[side], if_node, bodies[side] = add_conditional_node(graph, context, [node], "IF")
                    after.append(if_node)
        present = (BranchBodies.THEN if has_then else 0) | (BranchBodies.ELSE if has_else else 0)
        state = BranchState(then_handle=int(handles[0]), else_handle=int(handles[1]), bodies=present)
        self._device.copy_to_device(self.slot, ctypes.addressof(state), ctypes.sizeof(state))
        return GraphNode(self.slot_expr, "1", buffer, params, node), bodies[0], bodies[1], after or [node]

    def constants(self) -> dict:
        return {self._constant: self.slot.to_bytes(8, "little")}

    def close(self) -> None:
        """Free the state block (once; the caller made sure no launch is queued)."""
        self.slot = 0
        self._free()
