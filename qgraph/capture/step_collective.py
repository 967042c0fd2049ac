"""A collective (qgraph.distributed) in a @qgraph.graph step on CUDA: NCCL's kernels as a child graph.

The body records a `CollectiveCall` among its kernel calls (distributed.group); the step's graph
gets a child-graph node holding what NCCL enqueues for it, captured once on a private stream when
the graph is built. Like a host_call it waits for every call before it and every call after it
waits for it, so the collectives of a step run in the order the body made them on every rank
(NCCL requires that). The captured graph keeps NCCL's plan alive (a user object NCCL attaches)
until the step graph closes.

Inside a graph_while step the node sits in the WHILE body: CUDA allows kernel, memcpy, memset
and empty nodes there, and NCCL's collectives are kernels once the event nodes NCCL adds for
mixing captured with uncaptured work (NCCL_GRAPH_MIXING_SUPPORT, on unless qgraph loaded NCCL
first) are taken out, their ordering kept by joining their predecessors to their successors.
Every rank then loops on its own device and takes the same decision at the same pass: the
flag is computed from the all-reduced value.
"""

from __future__ import annotations

from collections.abc import Callable

from ..driver.device import check, driver
from ..errors import DeviceLoopRefused

_EVENT_NODES = ("CU_GRAPH_NODE_TYPE_EVENT_RECORD", "CU_GRAPH_NODE_TYPE_WAIT_EVENT")
_BODY_NODES = ("CU_GRAPH_NODE_TYPE_KERNEL", "CU_GRAPH_NODE_TYPE_MEMCPY", "CU_GRAPH_NODE_TYPE_MEMSET",
               "CU_GRAPH_NODE_TYPE_EMPTY")


class CollectiveCall:
    """A recorded collective, in a step's call list beside its kernel calls and read like one: no
    launcher; `key` names the operation and its arrays' bytes (another array builds another graph).
    `fn(*args)` runs it now (a CPU replay); `enqueue(stream)` puts it on a CUDA stream."""

    __slots__ = ("fn", "args", "launcher", "key", "packs", "enqueue", "what")

    def __init__(self, fn: Callable, args: tuple, key: tuple, enqueue: Callable[[int], None], what: str) -> None:
        self.fn, self.args, self.key, self.enqueue, self.what = fn, args, key, enqueue, what
        self.launcher = None
        self.packs = ()


def _node_type(node) -> str:
    return check(driver().cuGraphNodeGetType(node), "cuGraphNodeGetType").name


def _listed(fn, handle, what: str) -> list:
    """A driver list getter's answer (asked twice: its size, then its items); the count is the
    result's last field whether or not the bindings also return edge data."""
    count = check(fn(handle, 0), what)[-1]
    if not count:
        return []
    return list(check(fn(handle, count), what)[0])[:count]


def _nodes(graph) -> list:
    return _listed(driver().cuGraphGetNodes, graph, "cuGraphGetNodes")


def _edges_of(node) -> tuple[list, list]:
    d = driver()
    return (_listed(d.cuGraphNodeGetDependencies, node, "cuGraphNodeGetDependencies"),
            _listed(d.cuGraphNodeGetDependentNodes, node, "cuGraphNodeGetDependentNodes"))


def without_event_nodes(graph) -> list[str]:
    """Take NCCL's event nodes out of a captured graph (each predecessor then leads to each
    successor); the types of the nodes left."""
    d = driver()
    for node in _nodes(graph):
        if _node_type(node) in _EVENT_NODES:
            preds, succs = _edges_of(node)
            for p in preds:
                for s in succs:
                    try:
                        check(d.cuGraphAddDependencies(graph, [p], [s], None, 1), "cuGraphAddDependencies")
                    except TypeError:  # bindings without edge data
                        check(d.cuGraphAddDependencies(graph, [p], [s], 1), "cuGraphAddDependencies")
            check(d.cuGraphDestroyNode(node), "cuGraphDestroyNode")
    return [_node_type(n) for n in _nodes(graph)]


class CollectiveNode:
    """The child-graph node of one CollectiveCall in a built step graph, standing where a kernel
    call's TaskGraph stands in BuiltStep.parts (nothing to update: its arrays are in its key)."""

    def __init__(self, graph, deps: list, call: CollectiveCall, in_loop: bool) -> None:
        d = driver()
        stream = check(d.cuStreamCreate(1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING, for the capture only
        self.captured = None
        try:
            mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
            check(d.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
            try:
                call.enqueue(int(stream))
            finally:
                self.captured = check(d.cuStreamEndCapture(stream), "cuStreamEndCapture")
            kinds = without_event_nodes(self.captured)
            other = sorted({k for k in kinds if k not in _BODY_NODES})
            if in_loop and other:
                raise DeviceLoopRefused(f"{call.what} put {', '.join(other)} nodes in the step's graph, which "
                                        "CUDA allows in no conditional body")
            self.kernel_nodes = kinds.count("CU_GRAPH_NODE_TYPE_KERNEL")
            self.handle = check(d.cuGraphAddChildGraphNode(graph, deps, len(deps), self.captured),
                                "adding a collective's child graph")
        except BaseException:
            self.close()
            raise
        finally:
            d.cuStreamDestroy(stream)
        self.ends = [self.handle]

    def instance_of(self, exec_handle) -> None:
        """No parameter blocks to keep per instance (TaskGraph.instance_of's place)."""
        return None

    def kernel_handles(self) -> set[int]:
        return set()

    def close(self) -> None:
        if self.captured is not None:
            driver().cuGraphDestroy(self.captured)
            self.captured = None
