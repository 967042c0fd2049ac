"""Whole-step capture on CUDA: every kernel call of a @qgraph.graph function as one CUDA graph.

A call runs the Python function with this thread recording (runtime.call_hooks.run_body): each kernel
call inside resolves its arguments, compiles its signature if new, and is recorded instead of
launched (the hook in the kernels' generated launch costs them one list read otherwise). The recorded calls key
a built step graph: each call's nodes are added to one graph by the same builder a kernel
uses (graph_cache.TaskGraph, `into=`), after the earlier calls whose arrays overlap its own
where either writes (so independent calls run concurrently; aliasing views stay ordered).
Later calls with the same kernels and signatures replay that graph; changed arrays, shapes
and numbers update the nodes of the calls that changed, in place (as a kernel's graph
does); a different overlap between the calls' arrays builds another graph. Python code in
the function runs on every call, so values it computes are never stale.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..args.kinds import FLAG_SIGS, FlagKind, arg_type
from ..args.structs import RESOLVED_ATTR, STRUCT_EPOCH
from ..conditional import WhileLoop
from ..driver.device import check, driver, kernel_failure
from ..driver.loop_state import LoopMode
from ..errors import QgraphError
from ..graph_cache import TaskGraph
from ..runtime.arrays import Ndarray
from ..runtime.call_hooks import BoundCall, StepBody, note_writes
from .step_collective import CollectiveCall, CollectiveNode
from .step_dependencies import array_positions, dependencies, first_readers, written
from .step_host import host_node, queue_host_calls, unqueue_host_calls


def recorded(body: StepBody, call: BoundCall) -> bool:
    """A CUDA step body's `take` (runtime.call_hooks): the call is compiled and recorded for the
    step's graph instead of launched."""
    if call.stream is not None:
        raise QgraphError(f"kernel {call.launcher.src.name} was given stream= inside a @qgraph.graph function: its "
                          "calls run in the step's graph, on the stream the step is called with; drop stream=")
    call.launcher.specialisation(call.key, call.args)  # compiled now: the step's graph is built from compiled tasks
    body.calls.append(call)
    return True


class _LoopPlace:
    """What the runaway guard's message names: the flag and the step's line."""

    def __init__(self, flag: str, lineno: int) -> None:
        self.flag, self.lineno = flag, lineno


# ---------------------------------------------------------------------- replaying without the body

_NUMBERS = (int, float, bool, np.number, np.bool_)


def _reusable(value) -> bool:
    """Values whose identity (arrays, structs) or equality (numbers) says the call is the same:
    qgraph arrays never change layout; structs are watched through STRUCT_EPOCH. Foreign arrays
    (a tensor can be resized in place) always run the body."""
    return isinstance(value, (Ndarray,) + _NUMBERS) or hasattr(type(value), RESOLVED_ATTR["cuda"])


def _same_values(now: tuple, then: tuple) -> bool:
    if len(now) != len(then):
        return False
    for a, b in zip(now, then):
        if a is b:
            continue
        if type(a) is not type(b) or not isinstance(a, _NUMBERS) or not a == b:
            return False
    return True


# ---------------------------------------------------------------------- the built graph

class BuiltStep:
    """One step graph: each call's nodes, its executable instance and the blocks it holds."""

    def __init__(self, target, calls: list[BoundCall], deps: tuple, stream: int, name: str, stats,
                 loop: tuple | None = None, block=None) -> None:
        d = driver()
        self._target = target
        self.stats = stats
        self.graph = check(d.cuGraphCreate(0), "cuGraphCreate")
        self.parts: list[TaskGraph] = []
        self.loop = None
        self.exec = None
        kernel_handles: frozenset = frozenset()  # kernel nodes so far: a call after one waits on a programmatic edge
        self.block = block  # a traced step's parameter block (capture/number_block.py): its loaders lead
        try:
            head = block.add(self.graph) if block is not None else []
            kernel_handles = frozenset(int(n) for n in head)
            into = self.graph
            if loop is not None:  # (the flag's element pointer, guard): the whole step inside a WHILE node
                flag_address, guard, programmatic = loop
                self.loop = WhileLoop(target, (0, None), 0, guard, LoopMode.DO_WHILE)
                constants = self.loop.constants()
                self._slot_block = (constants["_slot0"], constants["_limit0"])
                self.flag_address = flag_address
                into, _, self._slot_node = self.loop.add_loop(self.graph, list(head), self._slot_block[0] +
                                                              flag_address + self._slot_block[1])
                head = []  # the loop follows the loaders
            ends: list[list] = []
            # the calls reading the block wait for its loaders, unless an earlier such call already does
            lead = first_readers(deps, block.readers) if block is not None else set()
            for index, (call, waits) in enumerate(zip(calls, deps)):
                launcher = call.launcher
                if launcher is None:  # qgraph.host_call, or a collective (qgraph.distributed)
                    after, in_loop = [n for i in waits for n in ends[i]], self.loop is not None
                    part = CollectiveNode(into, after, call, in_loop) if type(call) is CollectiveCall \
                        else host_node(into, after, in_loop, name, target)
                    self.parts.append(part)
                    ends.append(part.ends)
                    continue
                if launcher.while_mode == "host":
                    raise QgraphError(f"kernel {launcher.src.name} has device control flow that runs on the host "
                                      f"here ({launcher.while_reason}), so it cannot be part of a @qgraph.graph "
                                      "step; call it outside the step")
                spec = launcher.specialisation(call.key, call.args)  # compiled when the call was recorded
                after = [n for i in waits for n in ends[i]] + (list(head) if index in lead else [])
                part = spec.build_graph(call.args, call.packs, stream, stats, into=(into, after),
                                        kernel_deps=kernel_handles)
                self.parts.append(part)
                ends.append(part.ends)
                kernel_handles = kernel_handles | part.kernel_handles()
            if self.loop is not None:  # the condition kernel after every call
                last = [n for e in ends for n in e]  # programmatic only behind one kernel node
                self.loop.add_condition(into, last, programmatic and len(last) == 1 and int(last[0]) in kernel_handles)
            loop_nodes = self.loop.kernel_nodes if self.loop is not None else 0  # the slot writer, the condition
            self.kernel_nodes = sum(p.kernel_nodes for p in self.parts) + loop_nodes
            self.exec = check(d.cuGraphInstantiate(self.graph, 0), f"cuGraphInstantiate (step {name})")
            check(d.cuGraphUpload(self.exec, stream), "cuGraphUpload")
        except BaseException:
            self.close()
            raise
        self.held = [c.packs for c in calls]
        self.version = 0  # bumped by every change of the nodes: a remembered call must see the same version
        self._instances = [p.instance_of(self.exec) for p in self.parts]

    def set_flag(self, address: bytes) -> None:
        """Point the loop's slot writer at another flag array (an in-place node update)."""
        if address == self.flag_address:
            return
        node = self._slot_node
        node.buffer.data[:] = self._slot_block[0] + address + self._slot_block[1]
        check(driver().cuGraphExecKernelNodeSetParams(self.exec, node.handle, node.params),
              "updating the step loop's flag")
        self.flag_address = address
        self.version += 1

    def update(self, calls: list[BoundCall]) -> None:
        """Set the nodes of the calls whose arguments changed since this graph last ran."""
        held = self.held
        for k, call in enumerate(calls):
            if call.packs is held[k] or call.packs == held[k]:
                continue
            part = self.parts[k]
            part.update_for(self._instances[k], call.args, call.packs)
            held[k] = call.packs
            self.version += 1

    def update_call(self, k: int, call: BoundCall) -> None:
        """Set call k's nodes for its new arguments (a traced step's number that shapes more than bytes)."""
        self.parts[k].update_for(self._instances[k], call.args, call.packs)
        self.held[k] = call.packs

    def number_places(self, k: int, call: BoundCall, position: int, other):
        """Where the number at argument `position` of call k (as `call`, which this graph holds now) lies in
        the nodes (graph_cache.NumberPlace), or None where it shapes more than bytes (a loop bound)."""
        pack = arg_type(call.key[position]).pack
        args, packs = call.args, call.packs
        other_args = args[:position] + (other,) + args[position + 1:]
        other_packs = packs[:position] + (pack(other),) + packs[position + 1:]
        return self.parts[k].number_places(self._instances[k], position, (args, packs), (other_args, other_packs))

    def spliced(self, k: int) -> None:
        """Call k's numbers were set in its nodes' bytes: its packs are no longer those held."""
        self.held[k] = None

    def close(self) -> None:
        d = driver()
        if self.exec is not None:
            d.cuGraphExecDestroy(self.exec)
            self.exec = None
        for part in self.parts:
            part.close()  # its loop state; the nodes belong to this graph
        self.parts = []
        if self.loop is not None:
            self.loop.close()
            self.loop = None
        if self.graph is not None:
            d.cuGraphDestroy(self.graph)
            self.graph = None


class StepRunner:
    """The CUDA side of one @qgraph.graph function on one device: its built graphs and replays."""

    def __init__(self, target, name: str, stats, capacity: int, loop: tuple | None = None) -> None:
        self._loop = loop  # (flag name, guard limit or None, first line) for graph_while steps
        self._target = target
        self._name = name
        self._stats = stats
        self._capacity = capacity
        self._built: OrderedDict = OrderedDict()  # (signature, dependencies) -> BuiltStep, LRU
        self._last: dict = {}  # (signature, the calls' array bytes) -> BuiltStep seen recently
        self._array_slots: dict = {}  # signature -> per call, the positions of its arrays and structs
        self._launch = driver().cuGraphLaunch
        self.own_stream = target.device.stream_handle
        self._fail = kernel_failure(name)
        self._current = None  # the graph the last body run replayed
        self._current_calls: list[BoundCall] = []
        self._current_version = 0
        self._same = None  # (args, kwargs values, stream, graph, struct epoch, kwargs names, result, version)

    def replay_same(self, args: tuple, kwargs: dict, stream: int):
        """Replay the last graph if this call's arguments are the last call's (the same qgraph
        arrays and structs, equal numbers): (True, what the body returned then), else (False, None).
        The body is not run again, so values it computes in Python are those of that run."""
        last = self._same
        if last is None or last[2] != stream or last[4] != STRUCT_EPOCH[0]:
            return False, None
        if not (_same_values(args, last[0]) and _same_values(tuple(kwargs.values()), last[1])
                and tuple(kwargs) == last[5]):
            return False, None
        built = last[3]
        with self._target.lock:
            if built.exec is None or built.version != last[7]:  # evicted, or set for another call meanwhile
                return False, None
            if stream != self.own_stream:  # qgraph arrays are freed in order on its own stream
                self._target.lifetimes.hold(stream, args)
            queue_host_calls(built.parts, self._current_calls)
            err = self._launch(built.exec, stream)[0]
            if err:
                unqueue_host_calls(built.parts, self._current_calls)
                raise self._fail(err, "cuGraphLaunch")
            self._stats.replays += 1
        return True, last[6]

    def note_writes(self) -> None:
        """A replay's writes counted in the versions of the arrays it writes (a tape checks them)."""
        for call in self._current_calls:
            if call.launcher is not None:
                note_writes(written(call.launcher.src), call.args)

    def forget(self) -> None:
        """The next call runs through the step's traces (or its body), not replay_same."""
        self._same = None

    def remember(self, args: tuple, kwargs: dict, stream: int, result) -> None:
        """After a run of the body: what replay_same compares the next call with."""
        built = self._current
        # a kernel drawing random numbers takes a fresh stream position on every call: run the body
        draws = any(p.source is not None and "rng" in p.source for c in self._current_calls
                    if c.launcher is not None for p in c.launcher.src.params)
        if built is None or draws or not all(_reusable(v) for v in args + tuple(kwargs.values())):
            self._same = None
            self._current_calls = []  # never replayed: its arguments (a host_call's too) go at the sync
            return
        self._same = (args, tuple(kwargs.values()), stream, built, STRUCT_EPOCH[0], tuple(kwargs), result,
                      self._current_version)

    def replay_traced(self, step, values: tuple, stream: int) -> bool:
        """Launch a traced step's graph with its numbers set to `values` (capture.traced_step); False
        when that graph was evicted (the step is traced again)."""
        built = step.built
        with self._target.lock:
            if built is None or built.exec is None:
                return False
            step.set_numbers(values)
            calls = step.calls
            if stream != self.own_stream:  # qgraph arrays are freed in order on its own stream
                self._target.lifetimes.hold(stream, step.arrays)
            hosts = step.host_calls
            if hosts:
                queue_host_calls(built.parts, calls)
            err = self._launch(built.exec, stream)[0]
            if err:
                if hosts:
                    unqueue_host_calls(built.parts, calls)
                raise self._fail(err, "cuGraphLaunch")
            self._current, self._current_calls, self._current_version = built, calls, built.version
            stats = self._stats
            stats.replays += 1
            stats.graph_nodes = built.kernel_nodes
            stats.kernel_calls = step.kernel_calls
        return True

    @property
    def target(self):
        """The DeviceState its graphs live on."""
        return self._target

    def current(self):
        """The graph the last body run (or traced replay) launched."""
        return self._current

    def run(self, calls: list[BoundCall], stream: int, flag=None) -> None:
        try:
            signature = tuple((id(c.launcher), c.key) for c in calls)
            address = self._flag_address(calls, flag) if self._loop is not None else None
            slots = self._array_slots.get(signature)
            if slots is None:
                slots = self._array_slots[signature] = tuple(array_positions(c) for c in calls)
            # the dependencies follow the arrays alone: a changed number is a node update, never a new analysis
            arrays = tuple(tuple(c.packs[k] for k in where) for c, where in zip(calls, slots))
            with self._target.lock:
                found = self._last.get((signature, arrays))
                if found is None or found not in self._built.values():
                    deps = dependencies(calls)
                    found = self._built.get((signature, deps))
                    if found is None:
                        found = self._build(signature, deps, calls, stream, address)
                    if len(self._last) >= 4 * self._capacity:
                        self._last.clear()
                        self._array_slots.clear()
                    self._last[(signature, arrays)] = found
                found.update(calls)
                if address is not None:
                    found.set_flag(address)
                self._current, self._current_calls, self._current_version = found, calls, found.version
                self._target.lifetimes.hold(stream, [c.args for c in calls])
                queue_host_calls(found.parts, calls)
                err = self._launch(found.exec, stream)[0]
                if err:
                    unqueue_host_calls(found.parts, calls)
                    raise self._fail(err, "cuGraphLaunch")
                stats = self._stats
                stats.replays += 1
                stats.graph_nodes = found.kernel_nodes
                stats.kernel_calls = sum(c.launcher is not None for c in calls)
        finally:
            calls = flag = None  # this frame may outlive the call, as GraphFunction.__call__'s may (qgraph/step.py)

    def _flag_address(self, calls: list[BoundCall], flag) -> bytes:
        """The flag's element pointer, from a kernel call the flag is passed to (one must set it)."""
        name = self._loop[0]
        for call in calls:
            for arg, sig, pack in zip(call.args, call.key, call.packs):
                if arg is flag:
                    if sig not in FLAG_SIGS:
                        raise TypeError(f"graph_while={name!r}: the flag must be an int32 array of shape (1,) or (), "
                                        f"got {sig}")
                    return pack[FlagKind.address]
        raise QgraphError(f"graph_while={name!r}: no kernel call in step {self._name} takes the flag, so nothing "
                          "could set it to 0; pass the flag to the kernel that decides whether to go on")

    def build_with_block(self, calls: list[BoundCall], block, stream: int, flag, owner) -> BuiltStep:
        """A traced step's own graph of `calls`, led by the loaders of its parameter block (capture/number_block.py);
        cached under the step (`owner`), as the other graphs are."""
        signature = tuple((id(c.launcher), c.key) for c in calls)
        address = self._flag_address(calls, flag) if self._loop is not None else None
        for call in calls:  # compiled first: a compile takes the device's lock
            if call.launcher is not None:
                call.launcher.specialisation(call.key, call.args)
        with self._target.lock:
            deps = dependencies(calls)
            key = (signature, deps, id(owner))
            built = self._built.get(key)
            if built is None:
                built = self._build(signature, deps, calls, stream, address, block, key)
            return built

    def _build(self, signature: tuple, deps: tuple, calls: list[BoundCall], stream: int,
               address: bytes | None, block=None, key=None) -> BuiltStep:
        loop = None
        if self._loop is not None:
            flag, limit, lineno = self._loop
            guard = (limit, self._name, _LoopPlace(flag, lineno))
            first = next(c.launcher for c in calls if c.launcher is not None)  # one sets the flag
            loop = (address, guard, first.settings.programmatic_edges)
        built = BuiltStep(self._target, calls, deps, stream, self._name, self._stats, loop, block)
        self._built[key or (signature, deps)] = built
        if len(self._built) > self._capacity:
            _, old = self._built.popitem(last=False)
            self._target.device.synchronize()
            old.close()
            if self._same is not None and self._same[3] is old:
                self._same = None
        self._stats.builds += 1
        self._stats.cache_size = len(self._built)
        self._stats.waits = deps
        return built

    def close(self) -> None:
        self._same = self._current = None
        if self._built:
            self._target.device.synchronize()
        for built in self._built.values():
            built.close()
        self._built.clear()
        self._last.clear()
