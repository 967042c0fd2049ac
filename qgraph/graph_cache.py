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

Lifecycle: GraphState (BUILDING -> BUILT -> CLOSED); a replay after close raises QgraphError.
"""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from .compiler.cuda_program import TaskKernel
from .compiler.launch_code import block_expr, generate, graph_blocks, grid_expr, signature_with_constants
from .conditional import IfBranch, WhileLoop
from .driver.device import CudaDevice, check, driver, fail, kernel_failure
from .driver.nodes import GraphNode, add_edge, kernel_node_params, set_shape
from .driver.params import ParamBuffer
from .errors import QgraphError
from .graph_unroll import Gated, add_gated, count_part, counts_hold, graph_tree, loop_passes, plan_gated, tiled_choice
from .lang.front.regions import DeviceLoop, IfRegion, Region, RepeatLoop, Sequence, Task
from .lang.options import KernelOptions

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

    def add(self, key, graph: TaskGraph) -> None:
        replaced = self._graphs.pop(key, None)  # a graph rebuilt in another form (graph_unroll.Straight)
        if replaced is not None:
            self._device.synchronize()
            replaced.close()
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


@dataclass(slots=True)
class _Instance:
    """One executable instance and the parameter blocks its nodes hold."""

    exec: object
    blocks: list


class _Planned(NamedTuple):
    """A region's updatable node in a graph's plan: its parameter block's index, and its maker."""

    index: int
    item: object


class GraphState(enum.Enum):
    """Where a TaskGraph stands. Transitions (nothing else is allowed):

        BUILDING -> BUILT     the graph and its first instance exist
        BUILDING -> CLOSED    the build failed; what was made is destroyed
        BUILT    -> CLOSED    close(): instances, graph and loop slots destroyed (final)
    """

    BUILDING = "building"
    BUILT = "built"
    CLOSED = "closed"


class GraphSpec(Protocol):
    """What a TaskGraph is built from: a compiled specialisation (backends.cuda_spec.Specialisation)."""

    target: object  # the runtime DeviceState
    kernels: list[TaskKernel]  # one per task
    body: Region  # the region tree
    bounds: Callable  # the host bounds function
    name: str  # the kernel's, for messages
    flags: dict[str, tuple]  # loop or branch flag (or repeat count) -> where its pointer is in a call
    options: KernelOptions  # resolved: max_iterations guards the device loops
    device_loops: bool  # loop regions as WHILE nodes (else their plain body: the host do-while repeats it)
    programmatic: bool  # programmatic edges between kernel nodes
    stop_word: int  # debug mode: device loops end once the word at this address is non-zero (a failed check)
    cancel_word: int  # the kernel's cancel word (runtime.cancel; 0: none); loops no loop encloses clear it
    straight_counts: bool  # repeat loops may be built as straight lines for a call's count (graph_unroll)


class TaskGraph:
    """A graph of a specialisation's region tree and its executable instances.

    Tasks become kernel nodes chained in order; a DeviceLoop region becomes a slot writer
    and a WHILE node whose body graph is built from the loop's body region (so loops nest
    structurally). With `spec.device_loops` False a loop region is built as its plain body (the
    host do-while fallback repeats the whole graph instead). With `into=(graph, deps)` the nodes
    are added to another graph after `deps` (a stream capture of another library's, a step's
    graph) and nothing is instantiated: `ends` are the nodes later work there depends on;
    `kernel_deps` are the int handles of the kernel nodes among `deps` (programmatic edges).

    Building walks the region tree twice: `_plan` gives each updatable node (a task's kernel
    node, a loop's slot writer, a branch's) an index into the parameter blocks, by region;
    `_add` adds each region's nodes at the index its plan entry names.
    """

    def __init__(self, spec: GraphSpec, args: tuple, packs: tuple, stream: int, stats,
                 into: tuple | None = None, kernel_deps: frozenset = frozenset()) -> None:
        d = driver()
        started = time.perf_counter()
        self.state = GraphState.BUILDING
        self._spec = spec
        self._device = spec.target.device
        self._stats = stats
        self.name = spec.name
        self.graph = None
        self._loops: list = []  # WhileLoops, in pre-order (stats.iterations)
        self._branches: list = []  # IfBranches
        self._instances: dict[tuple, _Instance] = {}
        self.programmatic = spec.programmatic
        self._kernel_deps = kernel_deps
        self._planned: dict[Region, _Planned] = {}  # region -> its updatable node's plan entry
        self._open_loops: list[WhileLoop] = []  # while adding: the loops around the region being added
        self._loop_depth = 0  # while planning: the loops around the region being planned
        self._tiled = tiled_choice(spec, args)  # graph_unroll.TiledChoice, or None: the kernel tiles no loop
        body, self._fixed = graph_tree(spec, packs, into is None, self._tiled)  # loops unrolled, counts fixed
        self.on_new_form = None  # (args, packs, stream, new_count) -> the graph replacing this one (_miss)
        # interchanged loops' arrays must not overlap: checked by build_graph, then at each miss and update
        self._overlap = getattr(spec, "overlap", None) or (lambda packs: None)
        try:
            plan = self._plan(body, {tk.task.index: tk for tk in spec.kernels}, [])
            self._nodes: list[GraphNode | None] = [None] * len(plan)  # by plan index, set as _add adds them
            # a conditional handle belongs to its graph
            self._max_instances = 1 if self._loops or self._branches else INSTANCES
            self._blocks = graph_blocks(plan, spec.kernels, spec.bounds, self.name)
            blocks, grids = self._blocks(args, packs)
            if into is None:
                self.graph = check(d.cuGraphCreate(0), "cuGraphCreate")
            graph, deps = into if into is not None else (self.graph, [])
            self.ends = self._add(body, graph, list(deps), blocks, grids)
            self.kernel_nodes = sum(isinstance(item, TaskKernel) for item in plan) + \
                sum(item.kernel_nodes for item in self._loops + self._branches)
            self._template_blocks = list(blocks)  # what every fresh instance starts with
            if into is None:
                self._instances[packs] = self._instantiate(stream)
        except BaseException as e:
            self.close()
            if isinstance(e, QgraphError):
                raise QgraphError(f"building the CUDA graph of kernel {self.name} failed: {e}") from e
            raise
        self.state = GraphState.BUILT
        self.build_seconds = time.perf_counter() - started
        self.replay = self._generate_replay(stats)

    # ------------------------------------------------------------------ building

    def _plan(self, region: Region, by_task: dict, plan: list) -> list:
        """Append the updatable nodes of `region` to `plan` in build order (a WhileLoop or IfBranch for
        its slot writer, a TaskKernel), each region's entry recorded in `_planned`; returns `plan`."""
        spec = self._spec
        if isinstance(region, Task):
            self._enter(region, by_task[region.index], plan)
        elif isinstance(region, Gated):
            plan_gated(self, region, by_task, plan)
        elif isinstance(region, DeviceLoop) and not spec.device_loops:  # the host do-while repeats the graph
            self._plan(region.body, by_task, plan)
        elif isinstance(region, (DeviceLoop, RepeatLoop)):
            loop = WhileLoop.of_region(spec, region, len(self._loops), count_part(region), self._loop_depth == 0)
            self._loops.append(loop)
            self._enter(region, loop, plan)
            self._loop_depth += 1
            self._plan(region.body, by_task, plan)
            self._loop_depth -= 1
        elif isinstance(region, IfRegion):
            branch = IfBranch(spec.target, spec.flags[region.flag], len(self._branches))
            self._branches.append(branch)
            self._enter(region, branch, plan)
            for body in (region.then, region.orelse):
                self._plan(body, by_task, plan)
        else:
            for child in region.children:
                self._plan(child, by_task, plan)
        return plan

    def _enter(self, region: Region, item, plan: list) -> None:
        self._planned[region] = _Planned(len(plan), item)
        plan.append(item)

    def _add(self, region: Region, graph, deps: list, blocks: list, grids: list) -> list:
        """Add `region` to `graph` after `deps`; returns the nodes later work depends on."""
        if isinstance(region, Gated):  # an unrolled copy of a loop's body (graph_unroll)
            return add_gated(self, region, graph, deps, blocks, grids)
        if isinstance(region, Sequence):
            for child in region.children:
                deps = self._add(child, graph, deps, blocks, grids)
            return deps
        if isinstance(region, DeviceLoop) and not self._spec.device_loops:  # the host do-while repeats the graph
            return self._add(region.body, graph, deps, blocks, grids)
        k, item = self._planned[region]
        if isinstance(region, (DeviceLoop, RepeatLoop)):
            body, while_node, self._nodes[k] = item.add_loop(graph, deps, blocks[k])
            self._open_loops.append(item)
            inner = self._add(region.body, body, [], blocks, grids)
            self._open_loops.pop()
            # programmatic only behind one kernel node: a body ending in a WHILE or IF node gets a plain edge
            item.add_condition(body, inner, self.programmatic and len(inner) == 1 and self._is_kernel_node(inner[0]))
            return [while_node]
        if isinstance(region, IfRegion):
            self._nodes[k], then_body, else_body, after = item.add_branch(
                graph, deps, blocks[k], bool(region.then.children), bool(region.orelse.children))
            for sub, body in ((region.then, then_body), (region.orelse, else_body)):
                if body is not None:
                    self._add(sub, body, [], blocks, grids)
            return after
        return [self._add_task(region, item, k, graph, deps, blocks[k], grids[k])]

    def _add_task(self, task: Task, tk: TaskKernel, k: int, graph, deps: list, block: bytes, grid):
        """The kernel node of `task` (plan index `k`), after `deps`."""
        if len(block) != tk.param_size:
            raise QgraphError(f"task {task.index}: parameter block of {len(block)} bytes for a kernel taking "
                              f"{tk.param_size}; please report this")
        buffer = ParamBuffer(tk.param_size)
        buffer.data[:] = block
        params = kernel_node_params(tk.function_for(grid, self.programmatic), grid, tk.block, buffer)
        handle = check(driver().cuGraphAddKernelNode(graph, [], 0, params), f"cuGraphAddKernelNode (task {task.index})")
        for dep in deps:
            # a task after a conditional node waits for it to complete (a plain edge); after a task, programmatic
            programmatic = self.programmatic and tk.waits and len(deps) == 1 and self._is_kernel_node(dep)
            add_edge(graph, dep, handle, programmatic)
        self._nodes[k] = GraphNode(block_expr(tk), grid_expr(tk, True), buffer, params, handle, tk, grid)
        return handle

    def loop_passes(self) -> tuple[int, ...]:
        """Passes of each device loop in the last launch (waits for it)."""
        return loop_passes(self._loops, self._fixed)

    def _is_kernel_node(self, node) -> bool:
        return any(n is not None and n.handle is node for n in self._nodes) or int(node) in self._kernel_deps

    # ------------------------------------------------------------------ instances

    def _instantiate(self, stream: int) -> _Instance:
        d = driver()
        exec_handle = check(d.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate")
        try:
            check(d.cuGraphUpload(exec_handle, stream), "cuGraphUpload")
        except BaseException:
            d.cuGraphExecDestroy(exec_handle)
            raise
        return self.instance_of(exec_handle)

    def instance_of(self, exec_handle) -> _Instance:
        """An instance of `exec_handle` (this graph's, or a step's graph this one is part of) holding
        the parameter blocks the graph was built with."""
        return _Instance(exec_handle, list(self._template_blocks))

    def update_for(self, instance: _Instance, args: tuple, packs: tuple) -> None:
        """Set `instance`'s nodes for a call with other arguments (a @qgraph.graph step's part)."""
        self._overlap(packs)
        self._update(instance, *self._blocks(args, packs))

    def kernel_handles(self) -> set[int]:
        """The int handles of this graph's kernel nodes (later nodes may follow them programmatically)."""
        return {int(n.handle) for n in self._nodes if n is not None and n.kernel is not None}

    def _generate_replay(self, stats):
        d = driver()
        constants = {"_get": self._instances.get, "_miss": self._miss,
                     "_glaunch": d.cuGraphLaunch, "_stats": stats, "_fail": kernel_failure(self.name), "_keep": self}
        lines = ["    inst = _get(p)",
                 "    if inst is None:",
                 "        inst = _miss(args, p, stream)",
                 "    r = _glaunch(inst.exec, stream)[0]",
                 "    if r:",
                 "        raise _fail(r, 'cuGraphLaunch')",
                 "    _stats.replays += 1",
                 "    return inst"]  # the launch's same-arguments fast path replays it next time
        source = f"def replay({signature_with_constants('args, p, stream', constants)}):\n" + "\n".join(lines) + "\n"
        return generate(source, "replay", constants, f"graph replay of kernel {self.name}")

    def _miss(self, args: tuple, packs: tuple, stream: int) -> _Instance:
        """An instance set up for these arguments: a new one, or the oldest one updated."""
        if self.state is not GraphState.BUILT:
            raise self._closed_error()
        # built straight for another repeat count, or tiled for a grid: its graph, built for these
        if (new_count := not counts_hold(self._fixed, packs)) or not (self._tiled is None or self._tiled.holds(args)):
            return self.on_new_form(args, packs, stream, new_count)._instances[packs]
        self._overlap(packs)
        blocks, grids = self._blocks(args, packs)
        instances = self._instances  # a new instance, or the oldest one updated
        full = len(instances) >= self._max_instances
        instance = instances.pop(next(iter(instances))) if full else self._instantiate(stream)
        self._update(instance, blocks, grids)
        instances[packs] = instance
        return instance

    def renumber(self, held: tuple, packs: tuple, args: tuple, stream: int):
        """Launch the instance set up for `held` with the new numbers in `packs` (the same arrays):
        its changed nodes updated in place, no other instance touched. None if it is gone."""
        instance = self._instances.get(packs)
        if instance is None:
            instance = self._instances.get(held)
            if instance is None or self.state is not GraphState.BUILT or not counts_hold(self._fixed, packs):
                return None
            blocks, grids = self._blocks(args, packs)
            self._update(instance, blocks, grids)
            del self._instances[held]
            self._instances[packs] = instance
        self.relaunch(instance.exec, stream)
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
            if node.kernel is not None and node.shape != grids[k]:  # a new number keeps the grid: bytes only
                set_shape(node.params, grids[k], node.kernel.block)
                node.params.func = node.kernel.function_for(grids[k], self.programmatic)
                node.shape = grids[k]
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
        if self.state is not GraphState.BUILT:
            raise self._closed_error()
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
        for item in self._loops + self._branches:
            item.close()
        self._loops.clear()
        self._branches.clear()
        self.state = GraphState.CLOSED

    def _closed_error(self) -> QgraphError:
        return QgraphError(f"the CUDA graph of kernel {self.name} was closed (qgraph.reset(), init() or "
                           "eviction from the graph cache); call the kernel again to rebuild it")
