"""`qgraph.host_call(fn, *args)` in a @qgraph.graph step on CUDA: a host node of the step's graph.

The body records a `HostCall` among its kernel calls (step.host_call); the step's graph gets a
host node (cuGraphAddHostNode) after every call recorded before it, and every call after it
waits for it, so `fn` runs in order with the kernels around it. A host node belongs at the top
level of a graph: CUDA allows none inside a conditional body, so a graph_while step rejects it
(kernels get values out of a device loop with qgraph.report instead).

Lifetime: the node's C callback lives as long as the built graph (closed only after the device
is idle). Each launch of the graph queues that call's (fn, args) on the node; the callback,
on the driver's thread, takes them in launch order (a stream runs launches in order), so `fn`
and its arguments stay alive until it has run, however many launches are queued. `fn` runs
on a driver thread and must not call CUDA (qgraph's to_numpy, sync, kernel calls): CUDA
forbids it there. An exception from `fn` is printed (ctypes reports it) and the graph goes on.
"""

from __future__ import annotations

import collections
import ctypes

from ..driver.device import check, driver
from ..errors import QgraphError

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class HostCall:
    """A recorded host_call, in a step's call list beside its StepCalls (no launcher, no arrays)."""

    __slots__ = ("fn", "args", "launcher", "spec", "key", "packs")

    def __init__(self, fn, args: tuple) -> None:
        self.fn, self.args = fn, args
        self.launcher = self.spec = None
        self.key = ("host_call",)  # part of the step's signature
        self.packs = ()


class HostNode:
    """The host node of one HostCall in a built step graph, standing where a kernel call's TaskGraph
    stands in BuiltStep.parts (no kernel nodes, nothing to update or close)."""

    kernel_nodes = 0

    def __init__(self, graph, deps: list) -> None:
        d = driver()
        self.pending: collections.deque = collections.deque()  # (fn, args) of each launch not yet run
        self._callback = _HOST_FN(self._run)  # alive with the graph
        params = d.CUDA_HOST_NODE_PARAMS()
        params.fn = d.CUhostFn(ctypes.cast(self._callback, ctypes.c_void_p).value)
        params.userData = 0
        self.handle = check(d.cuGraphAddHostNode(graph, deps, len(deps), params), "adding a host_call node")
        self.ends = [self.handle]

    def instance_of(self, exec_handle) -> None:
        """No parameter blocks to keep per instance (TaskGraph.instance_of's place)."""
        return None

    def kernel_handles(self) -> set[int]:
        return set()

    def queue(self, call: HostCall) -> None:
        """Before a launch of the graph: the call this launch makes."""
        self.pending.append((call.fn, call.args))

    def _run(self, _user_data) -> None:
        fn, args = self.pending.popleft()
        fn(*args)

    def close(self) -> None:
        self.pending.clear()


def host_node(graph, deps: list, in_loop: bool, step_name: str) -> HostNode:
    """A host node after `deps`; a graph_while step's body (a conditional body) cannot have one."""
    if in_loop:
        raise QgraphError(
            f"step {step_name}: qgraph.host_call cannot run inside the device loop of a graph_while "
            "step (CUDA allows no host node in a conditional body); get values out of the loop with "
            "qgraph.report(name, value) in a kernel and read kernel.history, or call host_call in a "
            "step without graph_while"
        )
    return HostNode(graph, deps)


def queue_host_calls(parts: list, calls: list) -> None:
    """Before a launch: each host node gets the (fn, args) of this launch's call."""
    for part, call in zip(parts, calls):
        if call.launcher is None:
            part.queue(call)
