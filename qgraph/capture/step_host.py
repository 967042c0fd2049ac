"""`qgraph.host_call(fn, *args)` in a @qgraph.graph step on CUDA: a host node of the step's graph.

The body records a `HostCall` among its kernel calls (host_call below); the step's graph gets a
host node (cuGraphAddHostNode) after every call recorded before it, and every call after it
waits for it, so `fn` runs in order with the kernels around it. A host node belongs at the top
level of a graph: CUDA allows none inside a conditional body, so a graph_while step rejects it
(kernels get values out of a device loop with qgraph.report instead).

Lifetime: the node's C callback lives as long as the built graph (closed only after the device
is idle). Each launch of the graph queues that call's (fn, args) on the node, numbered; the
callback, on the driver's thread, runs them in launch order (a stream runs launches in order)
and only counts what has run, after dropping its own references. The host drops the (fn, args)
of launches counted as run, at the node's next launch and at qgraph.sync(), which first waits
(a second at most) for the count to reach the launches it waited for (a bound, not a cost: the
callback counts before it returns, so a synchronised stream normally finds the count there
already; what once looked like a late callback under compute-sanitizer was that tool keeping
the launching frames, below): so `fn` and its arguments stay
alive until it has run, however many launches are queued, and are released on the host's
thread once the sync returns. Nothing else keeps them past that sync: the step keeps its last
call list only while it may replay it (StepRunner.remember: all arguments qgraph arrays,
structs or numbers, the body not run again), the launching frames unbind the call's arguments
on return (compute-sanitizer keeps the caller frames of every CUDA launch), and compiled task
code keeps only the globals it reads (lang.generated.namespace: a copy of the module's globals
kept a script's global payload alive for good). `fn` runs on a driver thread and must not call
CUDA (qgraph's to_numpy, sync, kernel calls): CUDA forbids it there. An exception from `fn` is
printed (ctypes reports it) and the graph goes on.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

from .. import runtime
from ..driver.device import check, driver
from ..errors import QgraphError
from ..lang import roles

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
SETTLE_POLL_S = 1e-4  # DeviceState.sync's wait for callbacks still returning (runtime/state.py)


class HostCall:
    """A recorded host_call, in a step's call list beside its kernel calls (runtime.call_hooks.BoundCall)
    and read like one: no launcher, no arrays."""

    __slots__ = ("fn", "args", "launcher", "key", "packs")

    def __init__(self, fn, args: tuple) -> None:
        self.fn, self.args = fn, args
        self.launcher = None
        self.key = ("host_call",)  # part of the step's signature
        self.packs = ()


class HostNode:
    """The host node of one HostCall in a built step graph, standing where a kernel call's TaskGraph
    stands in BuiltStep.parts (no kernel nodes, nothing to update or close)."""

    kernel_nodes = 0

    def __init__(self, graph, deps: list, target) -> None:
        d = driver()
        self.pending: dict[int, tuple] = {}  # launch number -> (fn, args), until it ran and the host dropped it
        self.queued = 0  # launches queued so far
        self.ran = 0  # callbacks that have returned (the callback's count: the host never writes it)
        self._dropped = 0  # launches whose (fn, args) the host has dropped: all below `ran`
        self._target = target  # its DeviceState: sync() drops what ran (host_nodes)
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
        """Before a launch of the graph: the call this launch makes (and what ran is dropped)."""
        self.drop_ran()
        self.pending[self.queued] = (call.fn, call.args)
        self.queued += 1
        self._target.host_nodes.add(self)

    def unqueue(self) -> None:
        """The launch after queue() failed: its call never runs."""
        self.queued -= 1
        self.pending.pop(self.queued, None)

    def drop_ran(self) -> None:
        """On the host's thread: drop the (fn, args) of every launch whose callback has returned."""
        ran = self.ran
        while self._dropped < ran:
            self.pending.pop(self._dropped, None)
            self._dropped += 1

    def settle(self, deadline: float) -> bool:
        """After a sync: wait (until `deadline`, time.monotonic(); the GIL released) for the callbacks
        of the launches the device has finished, then drop what ran; whether all have. The count is
        what the host trusts, not the stream's state, so a callback still returning is waited for."""
        while self.ran < self.queued and time.monotonic() < deadline:
            time.sleep(SETTLE_POLL_S)
        self.drop_ran()
        return self.ran >= self.queued

    def _run(self, _user_data) -> None:
        number = self.ran
        fn, args = self.pending[number]
        try:
            fn(*args)
        finally:
            del fn, args  # this frame holds nothing once counted: the host may drop the last references
            self.ran = number + 1

    def close(self) -> None:
        self.pending.clear()
        self._target.host_nodes.discard(self)


def host_node(graph, deps: list, in_loop: bool, step_name: str, target) -> HostNode:
    """A host node after `deps`; a graph_while step's body (a conditional body) cannot have one."""
    if in_loop:
        raise QgraphError(
            f"step {step_name}: qgraph.host_call cannot run inside the device loop of a graph_while "
            "step (CUDA allows no host node in a conditional body); get values out of the loop with "
            "qgraph.report(name, value) in a kernel and read kernel.history, or call host_call in a "
            "step without graph_while"
        )
    return HostNode(graph, deps, target)


def queue_host_calls(parts: list, calls: list) -> None:
    """Before a launch: each host node gets the (fn, args) of this launch's call."""
    for part, call in zip(parts, calls):
        if type(call) is HostCall:
            part.queue(call)


def unqueue_host_calls(parts: list, calls: list) -> None:
    """After a failed launch: take back what queue_host_calls queued."""
    for part, call in zip(parts, calls):
        if type(call) is HostCall:
            part.unqueue()


def host_call(fn: Callable, *args) -> None:
    """In a @qgraph.graph step: call `fn(*args)` on the host in order with the step's kernel calls
    (on CUDA a host node of the step's graph, run on a driver thread: `fn` must not call CUDA,
    and the graph keeps `fn` and `args` alive until it has run). On the
    CPU, or outside a step (after qgraph.sync()), it calls `fn(*args)` at once."""
    from ..runtime import DeviceState, call_hooks

    if not callable(fn):
        raise TypeError(f"qgraph.host_call takes a callable first, got {fn!r}")
    body = call_hooks.current_body()
    calls = None if body is None else body.calls
    trace = None if body is None else body.trace
    if trace is not None:
        from .tracing import Traced, plain

        if any(type(a) is Traced for a in args):
            trace.leave("qgraph.host_call is given a traced number: the host function would get the first "
                        "call's value at every replay, so the step runs its body on every call")
            args = tuple(plain(a) for a in args)
    if calls is not None and (trace is not None or isinstance(runtime.STATE.current(), DeviceState)):
        calls.append(HostCall(fn, args))  # on the CPU a traced run keeps it too: a replay calls it in order
        if isinstance(runtime.STATE.current(), DeviceState):
            return
    if calls is None:
        runtime.sync()
    fn(*args)


roles.mark(host_call, roles.HOST_CALL)  # what the kernel front end rejects (lang.front.reports)
