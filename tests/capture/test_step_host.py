"""qgraph.host_call in @qgraph.graph steps: in order with the kernel calls around it (a host node on
CUDA, a plain call on the CPU), its function and arguments alive until it ran, rejected where it
cannot run (a kernel body, a graph_while step's device loop)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import qgraph
from qgraph.runtime.arrays import host_mapped

pytestmark = pytest.mark.usefixtures("collect_only_new_objects")  # their gc.collect() calls, cheap late in a run


@qgraph.kernel
def put(mapped, value: float):
    mapped[1] = value


@qgraph.kernel
def take(mapped, out):
    out[0] = mapped[0]


def test_a_host_call_runs_between_the_kernels_around_it(arch):
    mapped, view = host_mapped(np.float64, 2)  # memory both the device and the host function see
    out = qgraph.ndarray(qgraph.f64, (1,))
    seen = []

    def between(scale):
        seen.append(view[1])  # what `put` wrote before it
        view[0] = scale * view[1]  # what `take` reads after it

    @qgraph.graph
    def step(value, scale):
        put(mapped, value)
        qgraph.host_call(between, scale)
        take(mapped, out)

    for value in (3.0, 5.0):
        step(value, 2.0)
        assert out.to_numpy()[0] == 2.0 * value
    assert seen == [3.0, 5.0]
    assert step.stats.kernel_calls == 2


def test_the_step_keeps_the_function_and_its_arguments_until_they_ran(arch):
    class Payload:
        pass

    got = []
    payload = Payload()
    alive = weakref.ref(payload)

    @qgraph.graph
    def step(x, item):
        put(x, 1.0)
        qgraph.host_call(lambda p: got.append(p is alive()), item)

    x = qgraph.ndarray(qgraph.f64, (2,))
    step(x, payload)
    del payload
    gc.collect()
    qgraph.sync()
    assert got == [True]
    step(x, 0)  # the next call's arguments replace it: the first payload is gone
    qgraph.sync()
    gc.collect()
    assert alive() is None


def test_a_step_called_many_times_keeps_only_the_arguments_of_calls_not_yet_synced(arch):
    class Payload:
        pass

    got = []

    @qgraph.graph
    def step(x, item):
        put(x, 2.0)
        qgraph.host_call(lambda p: got.append(type(p) is Payload), item)

    x = qgraph.ndarray(qgraph.f64, (2,))
    alive = []
    for k in range(16):
        payload = Payload()
        alive.append(weakref.ref(payload))
        step(x, payload)
        del payload
        if k == 7:
            qgraph.sync()
    gc.collect()
    assert [a() is None for a in alive[:8]] == [True] * 8  # ran before a sync: released
    qgraph.sync()
    gc.collect()
    assert got == [True] * 16 and [a() for a in alive] == [None] * 16
    assert x.to_numpy()[1] == 2.0


def test_the_host_drops_a_call_only_once_its_callback_has_returned():
    """The node's bookkeeping without a device: callbacks run the queued calls in launch order and
    only count them; the host drops the counted ones (at the next queue, or sync's drop_ran), never
    one whose callback has not returned, and a failed launch's call is taken back."""
    from qgraph.capture.step_host import HostCall, HostNode

    class Target:
        host_nodes: set = set()

    node = HostNode.__new__(HostNode)  # no graph: __init__ adds the CUDA host node
    node.pending, node.queued, node.ran, node._dropped, node._target = {}, 0, 0, 0, Target()
    ran = []
    payloads = [type("Payload", (), {})() for _ in range(3)]
    alive = [weakref.ref(p) for p in payloads]
    for p in payloads:
        node.queue(HostCall(lambda q: ran.append(q is not None), (p,)))
    node.unqueue()  # the third launch failed
    del p, payloads
    node._run(None)
    gc.collect()
    assert ran == [True] and alive[0]() is not None  # counted, but the host has not dropped it yet
    node.drop_ran()
    gc.collect()
    assert [a() is None for a in alive] == [True, False, True]  # the second has not run: kept
    node._run(None)
    node.queue(HostCall(ran.append, (None,)))  # the next launch drops what ran
    gc.collect()
    assert alive[1]() is None and ran == [True, True] and list(node.pending) == [2]
    late = threading.Timer(0.05, node._run, (None,))  # a callback still running when the sync returns
    late.start()
    assert node.settle(time.monotonic() + 5.0) and ran == [True, True, None] and node.pending == {}
    late.join()


def test_a_host_call_in_a_kernel_points_to_report(tmp_path):
    path = tmp_path / "bad_host_call.py"
    path.write_text("import qgraph\n\ndef bad(x, flag):\n    x[0] += 1.0\n    qgraph.host_call(print, 1)\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"qgraph.report\(name, value\)") as info:
        qgraph.kernel(graph_while="flag")(namespace["bad"])
    assert info.value.lineno == 5


def test_a_graph_while_step_rejects_a_host_call(cuda):
    flag = qgraph.from_numpy(np.zeros(1, np.int32))

    @qgraph.kernel
    def stop(flag):
        flag[0] = 0

    @qgraph.graph(graph_while="flag")
    def loop(flag):
        stop(flag)
        qgraph.host_call(print, "never")

    with pytest.raises(qgraph.QgraphError, match="no host node in a conditional body"):
        loop(flag)


def test_host_call_takes_a_callable():
    with pytest.raises(TypeError, match="takes a callable first"):
        qgraph.host_call(3)
