"""CUDA graphs of kernel specialisations: build, cache (LRU), replay with in-place updates.

A `TaskGraph` holds one kernel node per task, built with the explicit node API (faster to
replay than a stream capture), each node reading its by-value parameter block from a
persistent `ParamBuffer`. A replay compares the call's parameter blocks with what each
node holds and calls `cuGraphExecKernelNodeSetParams` only for nodes whose bytes changed,
then `cuGraphLaunch`. Updates affect later launches only, and the driver copies the block
during the update, so back-to-back calls with different arguments need no sync.

Node-state transitions, per graph: BUILT (instantiated and uploaded) -> replayed any
number of times -> CLOSED (exec and graph destroyed; only after the device is idle).
"""

from __future__ import annotations

from collections import OrderedDict

from .cuda_backend import TaskKernel
from .cuda_device import CudaDevice, check, driver, fail
from .errors import QgraphError
from .param_buffers import ParamBuffer, block_expr, generate, grid_expr, signature_with_constants


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
    """One updatable kernel node: its parameter block expression and persistent state."""

    __slots__ = ("expr", "grid", "buffer", "params", "handle")

    def __init__(self, expr: str, grid: str, buffer: ParamBuffer, params, handle) -> None:
        self.expr = expr
        self.grid = grid
        self.buffer = buffer
        self.params = params
        self.handle = handle


def kernel_node_params(function, grid: int, block: int, buffer: ParamBuffer):
    d = driver()
    params = d.CUDA_KERNEL_NODE_PARAMS()
    params.func = function
    params.gridDimX, params.gridDimY, params.gridDimZ = grid, 1, 1
    params.blockDimX, params.blockDimY, params.blockDimZ = block, 1, 1
    params.sharedMemBytes = 0
    params.kernelParams = 0
    params.extra = buffer.extra
    return params


def first_block(tk: TaskKernel, bounds: tuple, packs: tuple) -> bytes:
    parts = [] if tk.bounds_slot is None else [bounds[tk.bounds_slot]]
    parts += [packs[k] for k in tk.arg_slots]
    return b"".join(parts)


class TaskGraph:
    """An instantiated graph of a specialisation's tasks (optionally inside a WHILE loop)."""

    def __init__(self, device: CudaDevice, kernels: list[TaskKernel], bounds, lifetimes, stats, name: str,
                 args: tuple, packs: tuple, stream: int, loop=None) -> None:
        d = driver()
        self._device = device
        self._loop = loop
        self.name = name
        self.exec = None
        self.graph = None
        self.kernel_nodes = 0
        has_bounds = any(tk.parallel for tk in kernels)
        b, n = bounds(*args) if has_bounds else ((), ())
        try:
            self.graph = check(d.cuGraphCreate(0), "cuGraphCreate")
            nodes: list[_Node] = []
            parent, deps = self.graph, []
            if loop is not None:
                parent, deps, slot_node = loop.build_prologue(self.graph, packs)
                nodes.append(slot_node)
            for k, tk in enumerate(kernels):
                block = first_block(tk, b, packs)
                if len(block) != tk.param_size:
                    raise QgraphError(f"task {k} of kernel {name}: parameter block of {len(block)} bytes for a "
                                      f"kernel taking {tk.param_size}; please report this")
                buffer = ParamBuffer(tk.param_size)
                buffer.data[:] = block
                grid = max(1, -(-n[tk.bounds_slot] // tk.block)) if tk.parallel else 1
                params = kernel_node_params(tk.function, grid, tk.block, buffer)
                handle = check(d.cuGraphAddKernelNode(parent, deps, len(deps), params),
                               f"cuGraphAddKernelNode (task {k})")
                nodes.append(_Node(block_expr(tk), grid_expr(tk, True), buffer, params, handle))
                deps = [handle]
            self.kernel_nodes = len(kernels)
            if loop is not None:
                loop.build_condition(parent, deps)
                self.kernel_nodes += loop.kernel_nodes
            self.exec = check(d.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate")
            check(d.cuGraphUpload(self.exec, stream), "cuGraphUpload")
        except BaseException as e:
            self.close()
            if isinstance(e, QgraphError):
                raise QgraphError(f"building the CUDA graph of kernel {name} failed: {e}") from e
            raise
        self._nodes = nodes
        self.replay = self._generate_replay(kernels, bounds, lifetimes, stats, has_bounds, packs, b)
        self.relaunch = self._generate_relaunch(stats)

    def _generate_replay(self, kernels, bounds, lifetimes, stats, has_bounds: bool, packs, b):
        d = driver()
        last = [packs, b]
        blocks = [bytes(node.buffer.data) for node in self._nodes]
        constants = {"_last": last, "_blk": blocks, "_set": d.cuGraphExecKernelNodeSetParams, "_ge": self.exec,
                     "_stats": stats, "_fail": _failure(self.name)}
        lines = ["    _last[0] = p", "    _last[1] = b"]
        for k, node in enumerate(self._nodes):
            constants[f"buf{k}"] = node.buffer.data
            constants[f"np{k}"] = node.params
            constants[f"node{k}"] = node.handle
            lines += [f"    x = {node.expr}",
                      f"    if x != _blk[{k}]:",
                      f"        _blk[{k}] = x",
                      f"        buf{k}[:] = x"]
            if node.grid != "1":
                lines.append(f"        np{k}.gridDimX = {node.grid}")
            lines += [f"        r = _set(_ge, node{k}, np{k})[0]",
                      "        if r:",
                      f"            raise _fail(r, 'updating node {k}')",
                      "        _stats.node_updates += 1"]
        if self._loop is not None:
            constants.update(self._loop.constants())
        update = generate(f"def update({signature_with_constants('p, b, n', constants)}):\n" + "\n".join(lines) + "\n",
                          "update", constants)

        rc = {"_bounds": bounds, "_hold": lifetimes.hold, "_update": update, "_last": last,
              "_glaunch": d.cuGraphLaunch, "_ge": self.exec, "_stats": stats, "_fail": _failure(self.name)}
        body = []
        if has_bounds:
            body += ["    b, n = _bounds(*args)",
                     "    _hold(stream, args)",
                     "    if p != _last[0] or b != _last[1]:",
                     "        _update(p, b, n)"]
        else:
            body += ["    _hold(stream, args)",
                     "    if p != _last[0]:",
                     "        _update(p, (), ())"]
        body += ["    r = _glaunch(_ge, stream)[0]",
                 "    if r:",
                 "        raise _fail(r, 'cuGraphLaunch')",
                 "    _stats.replays += 1"]
        source = f"def replay({signature_with_constants('args, p, stream', rc)}):\n" + "\n".join(body) + "\n"
        return generate(source, "replay", rc)

    def _generate_relaunch(self, stats):
        launch, ge, failure = driver().cuGraphLaunch, self.exec, _failure(self.name)

        def relaunch(stream: int) -> None:
            """Launch again with the parameters already in the graph (host do-while)."""
            err = launch(ge, stream)[0]
            if err:
                raise failure(err, "cuGraphLaunch")
            stats.replays += 1
        return relaunch

    def close(self) -> None:
        """Destroy the graph; the caller makes sure no launch of it is still queued."""
        d = driver()
        if self.exec is not None:
            d.cuGraphExecDestroy(self.exec)
            self.exec = None
        if self.graph is not None:
            d.cuGraphDestroy(self.graph)
            self.graph = None
        if self._loop is not None:
            self._loop.close()
            self._loop = None


def _failure(name: str):
    def failure(err, what: str):
        return fail(err, f"{what} of kernel {name}")
    return failure
