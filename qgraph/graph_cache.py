"""CUDA graphs of kernel specialisations: build, cache (LRU), replay with in-place updates.

A `TaskGraph` is one specialisation's graph: built by graphs.builder (one kernel node per task,
each reading its by-value parameter block from a persistent `ParamBuffer`; WHILE and IF nodes
for the device control flow), then instantiated, replayed and updated here. On Hopper and
newer the edges between task nodes are programmatic: each task kernel starts with
`griddepcontrol.wait`, so the next one is launched as the previous one's blocks exit, and
most of the launch gap leaves the critical path.

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
from dataclasses import dataclass

from .compiler.cuda_program import TaskKernel
from .compiler.launch_code import generate, graph_blocks, signature_with_constants
from .driver.device import CudaDevice, check, driver, fail, kernel_failure
from .driver.nodes import set_shape
from .errors import QgraphError
from .graphs.builder import GraphBuilder, GraphSpec
from .graphs.unroll import counts_hold, loop_passes

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
        replaced = self._graphs.pop(key, None)  # a graph rebuilt in another form (graphs.unroll.Straight)
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


@dataclass(frozen=True)
class NumberPlace:
    """Where a number lies in a graph instance's node: the node's parameter buffer (`data`, which holds
    the instance's block: one instance per step graph) and offset, what cuGraphExecKernelNodeSetParams
    takes, and the instance's record of its blocks (`blocks[index]`: set to None when the bytes are
    spliced, so a later full update compares against nothing and sets the node again)."""

    data: bytearray
    offset: int
    exec: object
    handle: object
    params: object
    blocks: list
    index: int


@dataclass(slots=True)
class _Instance:
    """One executable instance and the parameter blocks its nodes hold."""

    exec: object
    blocks: list


def _spliced_at(one: bytes, other: bytes, mine: bytes, theirs: bytes) -> int | None:
    """Where `one` holds `mine` and `other` holds `theirs`, all else equal; None if nowhere."""
    if len(one) != len(other):
        return None
    first = next(i for i, (a, b) in enumerate(zip(one, other)) if a != b)
    size = len(mine)
    for offset in range(max(0, first - size + 1), first + 1):
        if one[offset:offset + size] == mine and other[offset:offset + size] == theirs and \
                one[:offset] == other[:offset] and one[offset + size:] == other[offset + size:]:
            return offset
    return None


class GraphState(enum.Enum):
    """Where a TaskGraph stands. Transitions (nothing else is allowed):

        BUILDING -> BUILT     the graph and its first instance exist
        BUILDING -> CLOSED    the build failed; what was made is destroyed
        BUILT    -> CLOSED    close(): instances, graph and loop slots destroyed (final)
    """

    BUILDING = "building"
    BUILT = "built"
    CLOSED = "closed"


class TaskGraph:
    """A graph of a specialisation's region tree and its executable instances.

    graphs.builder.GraphBuilder builds the tree (the call's, as graphs.unroll shapes it) into a new
    graph. With `into=(graph, deps)` the nodes are added to another graph after `deps` (a stream
    capture of another library's, a step's graph) and nothing is instantiated: `ends` are the nodes
    later work there depends on; `kernel_deps` are the int handles of the kernel nodes among `deps`
    (programmatic edges).
    """

    def __init__(self, spec: GraphSpec, args: tuple, packs: tuple, stream: int, stats,
                 into: tuple | None = None, kernel_deps: frozenset = frozenset()) -> None:
        d = driver()
        started = time.perf_counter()
        self.state = GraphState.BUILDING
        self._device = spec.target.device
        self._stats = stats
        self.name = spec.name
        self.graph = None
        self._instances: dict[tuple, _Instance] = {}
        self.programmatic = spec.programmatic
        builder = GraphBuilder(spec, self.programmatic, kernel_deps)
        self._loops = builder.loops  # WhileLoops, in pre-order (stats.iterations)
        self._branches = builder.branches  # IfBranches
        self._nodes = builder.nodes  # by plan index, filled as the builder adds them
        body = builder.tree(args, packs, into is None)  # loops unrolled and tiled, counts fixed
        self._tiled, self._fixed = builder.tiled, builder.fixed  # graphs.unroll.TiledChoice or None; FixedCounts
        self.on_new_form = None  # (args, packs, stream, new_count) -> the graph replacing this one (_miss)
        # interchanged loops' arrays must not overlap: checked by build_graph, then at each miss and update
        self._overlap = getattr(spec, "overlap", None) or (lambda packs: None)
        try:
            plan = builder.plan_tree(body, {tk.task.index: tk for tk in spec.kernels})
            # a conditional handle belongs to its graph
            self._max_instances = 1 if self._loops or self._branches else INSTANCES
            self._blocks = graph_blocks(plan, spec.kernels, spec.bounds, self.name)
            blocks, grids = self._blocks(args, packs)
            if into is None:
                self.graph = check(d.cuGraphCreate(0), "cuGraphCreate")
            graph, deps = into if into is not None else (self.graph, [])
            self.ends = builder.add_tree(body, graph, list(deps), blocks, grids)
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

    def loop_passes(self) -> tuple[int, ...]:
        """Passes of each device loop in the last launch (waits for it)."""
        return loop_passes(self._loops, self._fixed)

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

    def number_places(self, instance: _Instance, position: int, one: tuple, other: tuple):
        """Where the number at argument `position` lies in `instance`'s nodes, found by building the
        blocks for two values of it (`one`, `other`: (args, packs)): a NumberPlace per node it is in,
        or None where it changes more than those bytes (a loop bound, a grid)."""
        try:
            blocks, grids = self._blocks(*one)
            blocks2, grids2 = self._blocks(*other)
        except Exception:  # the other value is no valid call: set the call in full instead
            return None
        mine, theirs = one[1][position], other[1][position]
        if grids != grids2 or mine == theirs:  # (two values of one packing: where it lands cannot be told)
            return None
        places = []
        for k, (b1, b2) in enumerate(zip(blocks, blocks2)):
            if b1 == b2:
                continue
            offset = _spliced_at(b1, b2, mine, theirs)
            if offset is None:
                return None
            node = self._nodes[k]
            places.append(NumberPlace(node.buffer.data, offset, instance.exec, node.handle, node.params,
                                      instance.blocks, k))
        return places

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
