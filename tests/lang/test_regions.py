"""The region tree: what the front end builds, and nested regions the backends already walk."""

from __future__ import annotations

import dataclasses

import numpy as np

import qgraph
from qgraph.lang.front.regions import DeviceLoop, Sequence, Task, device_loops, leaf_tasks
from qgraph.lang.lower.debug_checks import RECORD_WORDS


@qgraph.kernel(graph_while="flag")
def looped(x, flag):
    for i in range(x.shape[0]):
        x[i] += 1
    flag[0] = 0


@qgraph.kernel
def pieces(x, y, inner, outer):
    for i in range(x.shape[0]):
        x[i] += 1
    inner[0] = inner[0] - 1
    for i in range(y.shape[0]):
        y[i] += 1
    outer[0] = outer[0] - 1
    inner[0] = 3


def test_graph_while_is_a_loop_region_around_the_body():
    body = looped.source.body
    assert isinstance(body, Sequence) and len(body.children) == 1
    loop = body.children[0]
    assert isinstance(loop, DeviceLoop) and loop.flag == "flag"
    assert list(leaf_tasks(body)) == list(looped.tasks) and list(device_loops(loop.body)) == []


def test_a_plain_kernel_is_a_sequence_of_tasks():
    body = pieces.source.body
    assert isinstance(body, Sequence) and all(isinstance(c, Task) for c in body.children)
    assert list(device_loops(body)) == []


def test_the_cpu_backend_walks_nested_loops(cpu):
    """Nested device loops are representable before the front end produces them: the CPU
    runner built from such a tree runs the inner loop to completion on each outer pass."""
    from qgraph.compiler.cpu_program import CpuProgram

    t0, t1, t2, t3 = pieces.tasks
    inner = DeviceLoop("inner", Sequence((t0, t1)), t0.lineno)
    tree = Sequence((DeviceLoop("outer", Sequence((inner, t2, t3)), t0.lineno),))
    assert [loop.flag for loop in device_loops(tree)] == ["outer", "inner"]  # nested: inner is in outer's body
    src = dataclasses.replace(pieces.source, body=tree)
    program = CpuProgram(src, None)
    x, y = np.zeros(5), np.zeros(7)
    inner_flag, outer_flag = np.array([3], np.int32), np.array([2], np.int32)
    program.runner(x, y, inner_flag, outer_flag, np.zeros(RECORD_WORDS, np.int64))
    np.testing.assert_array_equal(x, np.full(5, 6.0))  # 2 outer passes x 3 inner passes
    np.testing.assert_array_equal(y, np.full(7, 2.0))
    assert outer_flag[0] == 0 and inner_flag[0] == 3
