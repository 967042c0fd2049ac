"""Kernel nodes of CUDA graphs: parameters, edges, and the updatable node record.

Shared by the task graphs (graph_cache) and the device control flow (conditional).
"""

from __future__ import annotations

import contextlib

from .device import check, driver
from .params import ParamBuffer


class GraphNode:
    """One updatable kernel node: the expressions of its block and grid, and its persistent state."""

    __slots__ = ("expr", "grid", "buffer", "params", "handle", "kernel", "shape")

    def __init__(self, expr: str, grid: str, buffer: ParamBuffer, params, handle, kernel=None, shape=None) -> None:
        self.expr = expr
        self.grid = grid
        self.buffer = buffer
        self.params = params
        self.handle = handle
        self.kernel = kernel  # the TaskKernel of a task node (its function variant follows the grid)
        self.shape = shape  # the grid `params` holds now: an update to the same grid leaves them alone


def add_edge(graph, before, after, programmatic: bool) -> None:
    """`before` -> `after`; programmatic: `after` launches early and waits in its first instruction."""
    d = driver()
    edge = d.CUgraphEdgeData()
    if programmatic:
        edge.type = d.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        edge.from_port = d.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
    check(d.cuGraphAddDependencies(graph, [before], [after], [edge], 1), "cuGraphAddDependencies")


def kernel_node_params(function, grid, block: int, buffer: ParamBuffer | None = None,
                       kernel_params: int = 0):
    """A kernel node: parameters from `buffer` (by `extra`) or a `kernel_params` array.

    `grid` is a block count (1-D blocks of `block` threads) or a tile shape (gx, gy, gz, bx, by)."""
    d = driver()
    params = d.CUDA_KERNEL_NODE_PARAMS()
    params.func = function
    set_shape(params, grid, block)
    params.sharedMemBytes = 0
    params.kernelParams = kernel_params
    params.extra = buffer.extra if buffer is not None else 0
    return params


def set_shape(params, grid, block: int) -> None:
    """Set a node's grid and block from a block count or a tile shape (gx, gy, gz, bx, by)."""
    if type(grid) is int:
        params.gridDimX, params.gridDimY, params.gridDimZ = grid, 1, 1
        params.blockDimX, params.blockDimY, params.blockDimZ = block, 1, 1
    else:
        params.gridDimX, params.gridDimY, params.gridDimZ, params.blockDimX, params.blockDimY = grid
        params.blockDimZ = 1


def add_while_node(graph, context, deps: list, default: int = 1):
    """A conditional WHILE node after `deps`; returns (handle, node, body graph). The handle is
    `default` at every launch (1: do-while) until a kernel sets it (conditional.WhileLoop
    passes 0 and sets it from the kernel ahead of the node)."""
    return add_conditional_node(graph, context, deps, "WHILE", conditional_handle(graph, context, default))


def conditional_handle(graph, context, default: int = 0):
    """A conditional handle of `graph`, `default` at every launch until a kernel sets it."""
    d = driver()
    return check(d.cuGraphConditionalHandleCreate(graph, context, default, d.CU_GRAPH_COND_ASSIGN_DEFAULT),
                 "cuGraphConditionalHandleCreate")


def add_conditional_node(graph, context, deps: list, kind: str, handle=None, size: int = 1):
    """A conditional WHILE or IF node after `deps`, with `handle` (a new one when None):
    (handle, node, body graph), or with size=2 (an IF-ELSE node, CUDA 12.8+) (handle, node,
    (then graph, else graph))."""
    d = driver()
    if handle is None:
        handle = conditional_handle(graph, context)
    params = d.CUgraphNodeParams()
    params.type = d.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle = handle
    params.conditional.type = getattr(d.CUgraphConditionalNodeType, f"CU_GRAPH_COND_TYPE_{kind}")
    params.conditional.size = size
    params.conditional.ctx = context
    node = check(d.cuGraphAddNode(graph, deps, None, len(deps), params), f"adding the {kind} node")
    out = params.conditional.phGraph_out
    return handle, node, out[0] if size == 1 else (out[0], out[1])


def capture_graph(stream: int) -> tuple:
    """(graph, dependency nodes) of the capture in progress on `stream`: the graph another library
    is capturing, which accepts nodes added directly while the capture runs."""
    d = driver()
    info = check(d.cuStreamGetCaptureInfo(stream), "cuStreamGetCaptureInfo")  # (status, id, graph, deps, ...)
    return info[2], list(info[3])


def set_capture_dependencies(stream: int, nodes: list) -> None:
    """Make `nodes` what the next work captured on `stream` depends on."""
    d = driver()
    flag = d.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES
    try:
        result = d.cuStreamUpdateCaptureDependencies(stream, nodes, len(nodes), flag)
    except TypeError:  # bindings whose signature takes edge data
        result = d.cuStreamUpdateCaptureDependencies(stream, nodes, None, len(nodes), flag)
    check(result, "cuStreamUpdateCaptureDependencies")


@contextlib.contextmanager
def relaxed_capture_mode():
    """Let this thread make calls a capture in global mode forbids (allocating, copying on qgraph's
    own stream) while another library captures: the driver's documented way
    (cuThreadExchangeStreamCaptureMode), restored afterwards."""
    d = driver()
    previous = check(d.cuThreadExchangeStreamCaptureMode(d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
                     "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        check(d.cuThreadExchangeStreamCaptureMode(previous), "cuThreadExchangeStreamCaptureMode")

