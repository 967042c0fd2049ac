"""Unrolled device loops (graph_unroll): U copies of a body per WHILE pass give the results, pass
counts and guard of U = 1, bit for bit, on the device loop, the host fallback and the CPU runner
(the loop_arch fixture); the tree the graph builder builds; how U is chosen and spelled."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph
from qgraph.compiler.cuda_program import TaskKernel
from qgraph.compiler.launch_code import block_expr
from qgraph.conditional import _int64_bytes
from qgraph.graph_unroll import CountPart, Gated, body_nodes, gated_kernel, unroll_factor, unrolled
from qgraph.lang.front.regions import DeviceLoop, IfRegion, RepeatLoop, leaf_tasks
from qgraph.runtime.settings import Settings

UNROLLS = (1, 2, 3, None)  # None: chosen


@qgraph.kernel
def mixed(x, left, flag, odd, hits, k: int):
    while qgraph.loop(flag):
        for i in range(x.shape[0]):
            x[i] = x[i] * 1.25 + 0.5
        left[0] -= 1
        odd[0] = left[0] % 2
        flag[0] = 1 if left[0] > 0 else 0
        if qgraph.cond(odd):  # an if region inside the unrolled body
            hits[0] += 1
        else:
            hits[1] += 1
    for _ in qgraph.repeat(k):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.75 + 1.0
        hits[2] += 1


def _mixed_reference(x: np.ndarray, passes: int, k: int) -> tuple[np.ndarray, list[int]]:
    x = x.copy()
    hits = [0, 0, 0]
    for p in range(passes):
        x = x * 1.25 + 0.5
        hits[0 if (passes - p - 1) % 2 else 1] += 1
    for _ in range(max(k, 0)):
        x = x * 0.75 + 1.0
        hits[2] += 1
    return x, hits


def test_every_unroll_gives_the_same_bits_passes_and_counts(loop_arch):
    x0 = np.random.default_rng(7).standard_normal(37)
    results = {}
    for u in UNROLLS:
        kernel = mixed._variant(unroll=u)
        for passes, k in ((7, 5), (0, 3), (1, 0), (4, -2)):
            x, hits = qgraph.from_numpy(x0), qgraph.ndarray(qgraph.i64, (3,))
            flag = qgraph.from_numpy(np.array([int(passes > 0)], np.int32))
            left, odd = qgraph.from_numpy(np.array([passes], np.int32)), qgraph.ndarray(qgraph.i32, (1,))
            kernel(x, left, flag, odd, hits, k)  # a new count each call: node updates, no rebuild
            ref_x, ref_hits = _mixed_reference(x0, passes, k)
            np.testing.assert_allclose(x.to_numpy(), ref_x, rtol=1e-14)
            assert list(hits.to_numpy()) == ref_hits
            assert kernel.stats.iterations == (passes, max(k, 0))
            results.setdefault((passes, k), []).append(x.to_numpy())
        if loop_arch == "cuda":
            assert kernel.stats.builds == 1
    for found in results.values():
        for other in found[1:]:
            np.testing.assert_array_equal(other, found[0])  # bit-identical for every U


@qgraph.kernel(graph_while="flag", max_iterations=5)
def spinning(x, flag):
    x[0] += 1.0


@qgraph.kernel(graph_while="flag")
def countdown(x, flag):
    x[0] += 1.0
    flag[0] = 1 if x[0] < x[1] else 0


@pytest.mark.parametrize("u", [2, 3])
def test_an_unrolled_do_while_stops_where_it_would_and_keeps_its_guard(loop_arch, u):
    x = qgraph.from_numpy(np.array([0.0, 4.0]))
    countdown._variant(unroll=u)(x, qgraph.from_numpy(np.array([0], np.int32)))  # do-while: one pass, flag 0
    assert x.to_numpy()[0] == 4.0
    x = qgraph.ndarray(qgraph.f64, (1,))
    guarded = spinning._variant(unroll=u)
    with pytest.raises(qgraph.QgraphError, match="ran 5 passes with its flag 'flag' still non-zero"):
        guarded(x, qgraph.from_numpy(np.array([1], np.int32)))
        qgraph.sync()
    assert x.to_numpy()[0] == 5.0 and guarded.stats.iterations == (5,)


@qgraph.kernel
def spelled(x, flag, k: int):
    while qgraph.loop(flag, unroll=3):
        x[0] += 1.0
        flag[0] = 1 if x[0] < 4 else 0
    for _ in qgraph.repeat(k, unroll=4):
        x[1] += 1.0


def test_a_loops_own_unroll_wins_and_counts_its_nodes(loop_arch):
    x, kernel = qgraph.ndarray(qgraph.f64, (2,)), spelled._variant(unroll=2)
    kernel(x, qgraph.from_numpy(np.array([1], np.int32)), 6)
    np.testing.assert_array_equal(x.to_numpy(), [4.0, 6.0])
    assert kernel.stats.iterations == (4, 6)
    if loop_arch == "cuda":
        # loop: slot writer, 3 copies, 2 gates, condition; repeat: (slot, 4 copies, condition) + (slot, 1, condition)
        assert kernel.stats.graph_nodes == 7 + 6 + 3


def _tree(kernel):
    return kernel._source.body


def test_the_tree_the_graph_builds():
    tree = unrolled(_tree(mixed), 3)
    loop, (main, rest) = tree.children[0], tree.children[1].children
    assert isinstance(loop, DeviceLoop) and loop.test_first
    first, *gated = loop.body.children
    assert not isinstance(first, Gated) and [type(g) for g in gated] == [Gated, Gated]
    assert len([r for r in gated[0].children if isinstance(r, IfRegion)]) == 1  # the if is copied too
    assert isinstance(main, CountPart) and (main.divisor, main.remainder) == (3, False)
    assert isinstance(rest, CountPart) and (rest.divisor, rest.remainder) == (3, True)
    assert len(list(leaf_tasks(main.body))) == 3 * 2 and len(list(leaf_tasks(rest.body))) == 2
    copies = [t for t in leaf_tasks(tree)]
    assert len({id(t) for t in copies}) == len(copies)  # every copy a node of its own
    assert {t.index for t in copies} == {t.index for t in leaf_tasks(_tree(mixed))}  # the same kernels
    assert unrolled(_tree(mixed), 1).children[1].__class__ is RepeatLoop


def test_how_unroll_is_chosen():
    loop, repeat = _tree(mixed).children
    assert body_nodes(loop.body) == 5 and body_nodes(repeat.body) == 2
    assert unroll_factor(repeat, 4) == 4 and unroll_factor(repeat, 1) == 1
    assert unroll_factor(repeat, None) > 1  # a short body: the WHILE pass dominates
    assert unroll_factor(loop, None) == 32 // (5 + 1)  # a flag loop's copy adds its gate kernel
    assert unroll_factor(_tree(spelled).children[0], 2) == 3  # the loop's own unroll= wins


@qgraph.kernel
def outer_inner(x, flag, k: int):
    while qgraph.loop(flag):
        for _ in qgraph.repeat(k):
            x[0] += 1.0
        flag[0] = 0


def test_a_loop_around_a_loop_keeps_one_copy():
    outer = _tree(outer_inner).children[0]
    assert unroll_factor(outer, 4) == 1 and unroll_factor(outer.body.children[0], 4) == 4


def test_repeat_counts_split_exactly():
    def split(k: int, u: int) -> tuple[int, int]:
        b = k.to_bytes(8, "little", signed=True)
        main, rest = (int.from_bytes(_int64_bytes(b, u, r), "little", signed=True) for r in (False, True))
        return main, rest

    for k in range(-3, 20):
        for u in (2, 3, 5):
            main, rest = split(k, u)
            assert main * u + rest == max(k, 0) and 0 <= rest < u
    assert _int64_bytes((-4).to_bytes(4, "little", signed=True)) == (-4).to_bytes(8, "little", signed=True)


def test_unroll_is_spelled_and_checked():
    assert Settings.from_environ({}).unroll is None
    assert Settings.from_environ({"QGRAPH_UNROLL": "4"}).unroll == 4
    assert Settings.from_environ({"QGRAPH_UNROLL": "auto"}).unroll is None
    with pytest.raises(qgraph.QgraphError, match="QGRAPH_UNROLL='0': expected a positive integer"):
        Settings.from_environ({"QGRAPH_UNROLL": "0"})
    with pytest.raises(ValueError, match="unroll must be a positive int"):
        qgraph.kernel(unroll=0)
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"unroll= of qgraph.repeat is a positive int literal"):

        @qgraph.kernel
        def bad(x, k: int):
            for _ in qgraph.repeat(k, unroll=0):
                x[0] += 1.0

    with pytest.raises(qgraph.QgraphSyntaxError, match=r"qgraph.cond takes one argument"):

        @qgraph.kernel
        def bad_cond(x, flag):
            if qgraph.cond(flag, unroll=2):
                x[0] += 1.0

    assert isinstance(_tree(spelled).children[1], RepeatLoop) and _tree(spelled).children[1].unroll == 4


def test_a_gated_copys_node_takes_the_live_address_last():
    task = next(leaf_tasks(_tree(countdown)))
    tk = TaskKernel(task, "plain", 1, 20, None, (0,), True, trigger_function="trigger", gated_function="gated",
                    gated_trigger_function="gated trigger", wave=4)
    gated = gated_kernel(tk, 0x1234)
    assert (gated.function, gated.function_for(1, True), gated.param_size) == ("gated", "gated trigger", 32)
    assert gated.function_for(100, True) == "gated"
    assert gated.gate == bytes(4) + (0x1234).to_bytes(8, "little")  # at an 8-byte boundary after 20 bytes
    assert block_expr(gated) == block_expr(tk) + f" + {gated.gate!r}" and tk.gate == b""
