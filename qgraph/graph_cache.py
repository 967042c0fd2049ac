"""CUDA graphs of kernel specialisations: build, cache (LRU), replay with in-place updates.

A `TaskGraph` holds one kernel node per task, built with the explicit node API (faster to
replay than a stream capture), each node reading its by-value parameter block from a
persistent `ParamBuffer`. On Hopper and newer the edges between task nodes are
programmatic: each task kernel starts with `griddepcontrol.wait`, so the next one is
launched as the previous one's blocks exit, and most of the launch gap leaves the
critical path.

A graph keeps up to `INSTANCES` executable instances, each keyed by the exact parameter
bytes of the call it was last set up for:

- a call whose bytes match an instance launches it: one dict lookup and cuGraphLaunch,
  no bounds, no node updates (same arrays every call; two buffer sets swapped per call);
- otherwise the oldest instance (or a new one, while fewer than INSTANCES exist) gets
  `cuGraphExecKernelNodeSetParams` on exactly the nodes whose bytes changed.

Node updates affect later launches only and the driver copies the parameter block during
the update, so back-to-back calls with different arguments need no sync. A WHILE graph
keeps a single instance (its conditional handle belongs to the graph).

Lifecycle: BUILT (graph created, first instance uploaded) -> replayed any number of times
-> CLOSED (instances and graph destroyed; the owner makes sure the device is idle first).
"""

from __future__ import annotations

import time
from collections import OrderedDict

from .cuda_backend import TaskKernel
from .cuda_device import CudaDevice, check, driver, fail, kernel_failure
from .errors import QgraphError
from .param_buffers import ParamBuffer, block_expr, generate, grid_expr, signature_with_constants

INSTANCES = 4  # executable instances per graph (distinct argument sets kept update-free)


class GraphCache:
    """The graphs of one kernel, one per specialisation, least recently used evicted first."""

    def __init__(self, capacity: int, device: CudaDevice, on_evict) -> None:
        self.capacity = capacity
        self._device = device
        self._on_evict = on_evict
        self._graphs: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self._graphs)

    def __contains__(self, key) -> bool:
        return key in self._graphs

    def add(self, key, graph: TaskGraph) -> None:
        self._graphs[key] = graph
        while len(self._graphs) > self.capacity:
            old_key, old = self._graphs.popitem(last=False)
            self._device.synchronize()  # queued launches of the evicted graph must finish first
            old.close()
            self._on_evict(old_key)

    def touch(self, key) -> None:
        if key in self._graphs:
            self._graphs.move_to_end(key)

    def clear(self) -> None:
        if self._graphs:
            self._device.synchronize()
        while self._graphs:
            _, graph = self._graphs.popitem()
            graph.close()


class _Node:
    """One updatable kernel node: how to compute its block, and its persistent state."""

    __slots__ = ("expr", "grid", "buffer", "params", "handle", "kernel")

    def __init__(self, expr: str, grid: str, buffer: ParamBuffer, params, handle, kernel=None) -> None:
        self.expr = expr
        self.grid = grid
        self.buffer = buffer
        self.params = params
        self.handle = handle
        self.kernel = kernel  # the TaskKernel of a task node (its function variant follows the grid)


class _Instance:
    """One executable instance and the parameter blocks its nodes hold."""

    __slots__ = ("exec", "blocks")

    def __init__(self, exec_handle, blocks: list) -> None:
        self.exec = exec_handle
        self.blocks = blocks


def add_edge(graph, before, after, programmatic: bool) -> None:
    """`before` -> `after`; programmatic: `after` launches early and waits in its first instruction."""
    d = driver()
    edge = d.CUgraphEdgeData()
    if programmatic:
        edge.type = d.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        edge.from_port = d.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
    check(d.cuGraphAddDependencies(graph, [before], [after], [edge], 1), "cuGraphAddDependencies")


def kernel_node_params(function, grid: int, block: int, buffer: ParamBuffer | None = None,
                       kernel_params: int = 0):
    """A 1-D kernel node: parameters from `buffer` (by `extra`) or a `kernel_params` array."""
    d = driver()
    params = d.CUDA_KERNEL_NODE_PARAMS()
    params.func = function
    params.gridDimX, params.gridDimY, params.gridDimZ = grid, 1, 1
    params.blockDimX, params.blockDimY, params.blockDimZ = block, 1, 1
    params.sharedMemBytes = 0
    params.kernelParams = kernel_params
    params.extra = buffer.extra if buffer is not None else 0
    return params


class TaskGraph:
    """A graph of a specialisation's tasks (optionally inside a WHILE loop) and its instances."""

    def __init__(self, device: CudaDevice, kernels: list[TaskKernel], bounds, lifetimes, stats, name: str,
                 args: tuple, packs: tuple, stream: int, loop=None, programmatic: bool = False) -> None:
        d = driver()
        started = time.perf_counter()
        self._device = device
        self._loop = loop
        self._stats = stats
        self.name = name
        self.graph = None
        self.kernel_nodes = 0
        self._instances: dict[tuple, _Instance] = {}
        self._max_instances = 1 if loop is not None else INSTANCES
        self.programmatic = programmatic
        self._nodes: list[_Node] = []
        self._blocks = self._generate_blocks(kernels, bounds, loop)
        blocks, grids = self._blocks(args, packs)
        try:
            self.graph = check(d.cuGraphCreate(0), "cuGraphCreate")
            parent, deps = self.graph, []
            if loop is not None:
                parent, deps, slot_node = loop.build_prologue(self.graph, blocks[0])
                self._nodes.append(slot_node)
            first_task = len(self._nodes)
            for k, tk in enumerate(kernels):
                block = blocks[first_task + k]
                if len(block) != tk.param_size:
                    raise QgraphError(f"task {k}: parameter block of {len(block)} bytes for a kernel taking "
                                      f"{tk.param_size}; please report this")
                buffer = ParamBuffer(tk.param_size)
                buffer.data[:] = block
                grid = grids[first_task + k]
                params = kernel_node_params(tk.function_for(grid, programmatic), grid, tk.block, buffer)
                handle = check(d.cuGraphAddKernelNode(parent, [], 0, params), f"cuGraphAddKernelNode (task {k})")
                if deps:
                    add_edge(parent, deps[0], handle, programmatic and tk.waits)
                self._nodes.append(_Node(block_expr(tk), grid_expr(tk, True), buffer, params, handle, tk))
                deps = [handle]
            self.kernel_nodes = len(kernels)
            if loop is not None:
                loop.build_condition(parent, deps, programmatic)
                self.kernel_nodes += loop.kernel_nodes
            self._template_blocks = list(blocks)  # what every fresh instance starts with
            self._instances[packs] = self._instantiate(stream)
        except BaseException as e:
            self.close()
            if isinstance(e, QgraphError):
                raise QgraphError(f"building the CUDA graph of kernel {name} failed: {e}") from e
            raise
        self.build_seconds = time.perf_counter() - started
        self.replay = self._generate_replay(lifetimes, stats)

    # ------------------------------------------------------------------ instances

    def _instantiate(self, stream: int) -> _Instance:
        d = driver()
        exec_handle = check(d.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate")
        try:
            check(d.cuGraphUpload(exec_handle, stream), "cuGraphUpload")
        except BaseException:
            d.cuGraphExecDestroy(exec_handle)
            raise
        return _Instance(exec_handle, list(self._template_blocks))

    def _generate_blocks(self, kernels, bounds, loop):
        """blocks(args, p) -> (parameter block per node, grid per node), as generated code."""
        exprs, grids = [], []
        if loop is not None:
            exprs.append(loop.slot_expr)
            grids.append("1")
        for tk in kernels:
            exprs.append(block_expr(tk))
            grids.append(grid_expr(tk, True))
        has_bounds = any(tk.parallel for tk in kernels)
        constants = {"_bounds": bounds}
        if loop is not None:
            constants.update(loop.constants())
        lines = ["    b, n = _bounds(*args)" if has_bounds else "    b = n = ()",
                 f"    return [{', '.join(exprs)}], [{', '.join(grids)}]"]
        source = f"def blocks({signature_with_constants('args, p', constants)}):\n" + "\n".join(lines) + "\n"
        return generate(source, "blocks", constants)

    def _generate_replay(self, lifetimes, stats):
        d = driver()
        constants = {"_get": self._instances.get, "_miss": self._miss, "_hold": lifetimes.hold,
                     "_glaunch": d.cuGraphLaunch, "_stats": stats, "_fail": kernel_failure(self.name), "_keep": self}
        lines = ["    inst = _get(p)",
                 "    if inst is None:",
                 "        inst = _miss(args, p, stream)",
                 "    _hold(stream, args)",
                 "    r = _glaunch(inst.exec, stream)[0]",
                 "    if r:",
                 "        raise _fail(r, 'cuGraphLaunch')",
                 "    _stats.replays += 1"]
        source = f"def replay({signature_with_constants('args, p, stream', constants)}):\n" + "\n".join(lines) + "\n"
        return generate(source, "replay", constants)

    def _miss(self, args: tuple, packs: tuple, stream: int) -> _Instance:
        """An instance set up for these arguments: a new one, or the oldest one updated."""
        blocks, grids = self._blocks(args, packs)
        instances = self._instances
        if len(instances) < self._max_instances:
            instance = self._instantiate(stream)
        else:
            instance = instances.pop(next(iter(instances)))  # the oldest
        self._update(instance, blocks, grids)
        instances[packs] = instance
        return instance

    def _update(self, instance: _Instance, blocks: list, grids: list) -> None:
        """Set the nodes whose parameter blocks differ from what the instance holds."""
        d = driver()
        set_params = d.cuGraphExecKernelNodeSetParams
        held = instance.blocks
        for k, node in enumerate(self._nodes):
            block = blocks[k]
            if block == held[k]:
                continue
            node.buffer.data[:] = block
            node.params.gridDimX = grids[k]
            if node.kernel is not None:
                node.params.func = node.kernel.function_for(grids[k], self.programmatic)
            err = set_params(instance.exec, node.handle, node.params)[0]
            if err:
                raise fail(err, f"updating node {k} of kernel {self.name}")
            self._stats.node_updates += 1
        instance.blocks = list(blocks)

    def exec_for(self, packs: tuple):
        """The instance set up for `packs` (after a replay with them)."""
        return self._instances[packs].exec

    def relaunch(self, exec_handle, stream: int) -> None:
        """Launch an instance again as it is (the host do-while's later iterations)."""
        err = driver().cuGraphLaunch(exec_handle, stream)[0]
        if err:
            raise fail(err, f"cuGraphLaunch of kernel {self.name}")
        self._stats.replays += 1

    def close(self) -> None:
        """Destroy instances and graph; the caller makes sure no launch is still queued."""
        d = driver()
        for instance in self._instances.values():
            d.cuGraphExecDestroy(instance.exec)
        self._instances.clear()
        if self.graph is not None:
            d.cuGraphDestroy(self.graph)
            self.graph = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None
