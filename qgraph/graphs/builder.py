"""The graph builder: a specialisation's region tree as the nodes of a CUDA graph.

Tasks become kernel nodes chained in order, built with the explicit node API (faster to replay
than a stream capture), each node reading its by-value parameter block from a persistent
`ParamBuffer`; on Hopper and newer a task behind one kernel node follows it by a programmatic
edge. A DeviceLoop or RepeatLoop region becomes a slot writer and a WHILE node
(conditional.WhileLoop), an IfRegion a branch kernel and IF nodes (conditional.IfBranch).

A WHILE or IF node's body graph is built by a builder of its own (`GraphBuilder.body`), which
shares the tree's plan, nodes and loops with the builder it is in and knows the loop it is in
(`loop`), so loops nest structurally. How the tree is shaped before it is built (loops
unrolled, short repeats straight, stencil loops tiled) is graphs.unroll's strategy: `tree`
asks it, and its gated copies are planned and added through this builder's public methods
(`plan`, `add`, `body`, `is_kernel_node`, `count_as_kernel_node`).

Building walks the tree twice: `plan` gives each updatable node (a task's kernel node, a loop's
slot writer, a branch's) an index into the parameter blocks, by region; `add` adds each region's
nodes at the index its plan entry names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple, Protocol

from ..compiler.cuda_program import TaskKernel
from ..compiler.launch_code import block_expr, grid_expr
from ..conditional import IfBranch, WhileLoop
from ..driver.device import check, driver
from ..driver.nodes import GraphNode, add_edge, kernel_node_params
from ..driver.params import ParamBuffer
from ..errors import QgraphError
from ..lang.front.regions import DeviceLoop, IfRegion, Region, RepeatLoop, Sequence, Task
from ..lang.options import KernelOptions
from .unroll import Gated, add_gated, count_part, graph_tree, plan_gated, tiled_choice


class GraphSpec(Protocol):
    """What a graph is built from: a compiled specialisation (backends.cuda_spec.Specialisation)."""

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
    straight_counts: bool  # repeat loops may be built as straight lines for a call's count (graphs.unroll)


class Planned(NamedTuple):
    """A region's updatable node in a graph's plan: its parameter block's index, and its maker."""

    index: int
    item: object


class GraphBuilder:
    """Builds a region tree of `spec` into one graph: the top level (`graph`), or, made by `body`,
    a WHILE or IF node's body graph.

    With `spec.device_loops` False a DeviceLoop region is built as its plain body (the host do-while
    fallback repeats the whole graph instead). `kernel_deps`: the int handles of the kernel nodes
    among the nodes the tree is added after (a step's graph: programmatic edges behind them)."""

    def __init__(self, spec: GraphSpec, programmatic: bool, kernel_deps: frozenset = frozenset()) -> None:
        self.spec = spec
        self.name = spec.name
        self.programmatic = programmatic
        self.graph = None  # what `add` adds to: the graph being built, or a WHILE or IF node's body graph
        self.loop: WhileLoop | None = None  # the loop this builder's graph is in (a body's), None outside loops
        # shared with every body's builder (never rebound, only filled):
        self.loops: list[WhileLoop] = []  # in pre-order (stats.iterations)
        self.branches: list[IfBranch] = []
        self.planned: dict[Region, Planned] = {}  # region -> its updatable node's plan entry
        self.nodes: list[GraphNode | None] = []  # by plan index, set as `add` adds them
        self.tiled = None  # graphs.unroll.TiledChoice, or None: the kernel tiles no loop (after `tree`)
        self.fixed: tuple = ()  # the repeat counts the tree was built straight for (graphs.unroll.FixedCount)
        self._kernel_deps = set(kernel_deps)
        self._blocks: list = []  # parameter block per plan index (add_tree)
        self._grids: list = []  # grid per plan index

    def body(self, graph, loop: WhileLoop | None = None) -> GraphBuilder:
        """A builder of a WHILE or IF node's body `graph` (None while planning) in this one: inside `loop`
        (a WHILE node's), else inside this builder's loop; it shares the plan, nodes, loops and blocks."""
        inner = copy.copy(self)
        inner.graph = graph
        if loop is not None:
            inner.loop = loop
        return inner

    # ------------------------------------------------------------------ the tree

    def tree(self, args: tuple, packs: tuple, own: bool) -> Region:
        """The region tree to build for a call (graphs.unroll.graph_tree): loops unrolled, loops tiled where
        their tiles fit (`tiled`), short repeats straight for this call's counts when the graph is its `own`,
        not a part of another graph (`fixed`)."""
        self.tiled = tiled_choice(self.spec, args)
        tree, self.fixed = graph_tree(self.spec, packs, own, self.tiled)
        return tree

    # ------------------------------------------------------------------ the plan walk

    def plan_tree(self, tree: Region, by_task: dict) -> list:
        """The plan of the whole `tree` (`plan`; `by_task`: task index -> TaskKernel), a place in
        `nodes` made for each entry."""
        plan = self.plan(tree, by_task, [])
        self.nodes.extend([None] * len(plan))
        return plan

    def plan(self, region: Region, by_task: dict, plan: list) -> list:
        """Append the updatable nodes of `region` to `plan` in build order (a WhileLoop or IfBranch for
        its slot writer, a TaskKernel), each region's entry recorded in `planned`; returns `plan`."""
        spec = self.spec
        if isinstance(region, Task):
            self._enter(region, by_task[region.index], plan)
        elif isinstance(region, Gated):
            plan_gated(self, region, by_task, plan)
        elif isinstance(region, DeviceLoop) and not spec.device_loops:  # the host do-while repeats the graph
            self.plan(region.body, by_task, plan)
        elif isinstance(region, (DeviceLoop, RepeatLoop)):
            loop = WhileLoop.of_region(spec, region, len(self.loops), count_part(region), self.loop is None)
            self.loops.append(loop)
            self._enter(region, loop, plan)
            self.body(None, loop).plan(region.body, by_task, plan)
        elif isinstance(region, IfRegion):
            branch = IfBranch(spec.target, spec.flags[region.flag], len(self.branches))
            self.branches.append(branch)
            self._enter(region, branch, plan)
            for body in (region.then, region.orelse):
                self.plan(body, by_task, plan)
        else:
            for child in region.children:
                self.plan(child, by_task, plan)
        return plan

    def _enter(self, region: Region, item, plan: list) -> None:
        self.planned[region] = Planned(len(plan), item)
        plan.append(item)

    # ------------------------------------------------------------------ the add walk

    def add_tree(self, tree: Region, graph, deps: list, blocks: list, grids: list) -> list:
        """Add the planned `tree` to `graph` after `deps`, each node with its parameter block and grid
        (`blocks`, `grids`: by plan index); returns the nodes later work depends on."""
        self.graph, self._blocks, self._grids = graph, blocks, grids
        return self.add(tree, deps)

    def add(self, region: Region, deps: list) -> list:
        """Add `region` to this builder's graph after `deps`; returns the nodes later work depends on."""
        if isinstance(region, Gated):  # an unrolled copy of a loop's body (graphs.unroll)
            return add_gated(self, region, deps)
        if isinstance(region, Sequence):
            for child in region.children:
                deps = self.add(child, deps)
            return deps
        if isinstance(region, DeviceLoop) and not self.spec.device_loops:  # the host do-while repeats the graph
            return self.add(region.body, deps)
        k, item = self.planned[region]
        block = self._blocks[k]
        if isinstance(region, (DeviceLoop, RepeatLoop)):
            body, while_node, self.nodes[k] = item.add_loop(self.graph, deps, block)
            inner = self.body(body, item).add(region.body, [])
            # programmatic only behind one kernel node: a body ending in a WHILE or IF node gets a plain edge
            item.add_condition(body, inner, self.programmatic and len(inner) == 1 and self.is_kernel_node(inner[0]))
            return [while_node]
        if isinstance(region, IfRegion):
            self.nodes[k], then_body, else_body, after = item.add_branch(
                self.graph, deps, block, bool(region.then.children), bool(region.orelse.children))
            for sub, body in ((region.then, then_body), (region.orelse, else_body)):
                if body is not None:
                    self.body(body).add(sub, [])
            return after
        return [self._add_task(region, item, k, deps, block, self._grids[k])]

    def _add_task(self, task: Task, tk: TaskKernel, k: int, deps: list, block: bytes, grid):
        """The kernel node of `task` (plan index `k`) in this builder's graph, after `deps`."""
        if len(block) != tk.param_size:
            raise QgraphError(f"task {task.index}: parameter block of {len(block)} bytes for a kernel taking "
                              f"{tk.param_size}; please report this")
        buffer = ParamBuffer(tk.param_size)
        buffer.data[:] = block
        params = kernel_node_params(tk.function_for(grid, self.programmatic), grid, tk.block, buffer)
        graph = self.graph
        handle = check(driver().cuGraphAddKernelNode(graph, [], 0, params), f"cuGraphAddKernelNode (task {task.index})")
        for dep in deps:
            # a task after a conditional node waits for it to complete (a plain edge); after a task, programmatic
            programmatic = self.programmatic and tk.waits and len(deps) == 1 and self.is_kernel_node(dep)
            add_edge(graph, dep, handle, programmatic)
        self.nodes[k] = GraphNode(block_expr(tk), grid_expr(tk, True), buffer, params, handle, tk, grid)
        return handle

    def is_kernel_node(self, node) -> bool:
        """Whether `node` is a kernel node (a task's, a slot writer's, a branch kernel's, or one counted as
        one): a task behind it alone may follow it by a programmatic edge."""
        return any(n is not None and n.handle is node for n in self.nodes) or int(node) in self._kernel_deps

    def count_as_kernel_node(self, node) -> None:
        """Count `node`, a helper kernel's (an unrolled loop's gate), as a kernel node from now on."""
        self._kernel_deps.add(int(node))
