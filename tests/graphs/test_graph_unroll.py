"""Unrolled device loops (graph_unroll): U copies of a body per WHILE pass give the results, pass
counts and guard of U = 1, bit for bit, on the device loop, the host fallback and the CPU runner
(the loop_arch fixture); the tree the graph builder builds; how U is chosen and spelled."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest

import qgraph
from qgraph.compiler.cuda_program import TaskKernel
from qgraph.compiler.launch_code import block_expr
from qgraph.conditional import _int64_bytes
from qgraph.graphs.unroll import (
    MAX_COPY_NODES,
    MAX_STRAIGHT_NODES,
    MAX_UNROLL,
    CountPart,
    FixedCount,
    Gated,
    Straight,
    body_nodes,
    counts_hold,
    folds_gate,
    gated_kernel,
    gating_kernel,
    graph_tree,
    loop_passes,
    unroll_factor,
    unrolled,
)
from qgraph.lang.front.regions import DeviceLoop, IfRegion, RepeatLoop, control_regions, leaf_tasks
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
        kernel = mixed.variant(unroll=u)
        for passes, k in ((7, 5), (0, 3), (1, 0), (4, -2)):
            x, hits = qgraph.from_numpy(x0), qgraph.ndarray(qgraph.i64, (3,))
            flag = qgraph.from_numpy(np.array([int(passes > 0)], np.int32))
            left, odd = qgraph.from_numpy(np.array([passes], np.int32)), qgraph.ndarray(qgraph.i32, (1,))
            kernel(x, left, flag, odd, hits, k)  # a new count: a node update (chosen U: one rebuild, below)
            ref_x, ref_hits = _mixed_reference(x0, passes, k)
            np.testing.assert_allclose(x.to_numpy(), ref_x, rtol=1e-14)
            assert list(hits.to_numpy()) == ref_hits
            assert kernel.stats.iterations == (passes, max(k, 0))
            results.setdefault((passes, k), []).append(x.to_numpy())
        if loop_arch == "cuda":  # chosen U: built straight for k = 5, rebuilt in the WHILE form for k = 3
            assert kernel.stats.builds == (2 if u is None else 1)
    for found in results.values():
        for other in found[1:]:
            np.testing.assert_array_equal(other, found[0])  # bit-identical for every U


@qgraph.kernel(graph_while="flag", max_iterations=5)
def spinning(x, flag):
    x[0] += 1.0
    flag[0] = 1  # never cleared: the guard stops it


@qgraph.kernel(graph_while="flag")
def countdown(x, flag):
    x[0] += 1.0
    flag[0] = 1 if x[0] < x[1] else 0


@pytest.mark.parametrize("u", [2, 3])
def test_an_unrolled_do_while_stops_where_it_would_and_keeps_its_guard(loop_arch, u):
    x = qgraph.from_numpy(np.array([0.0, 4.0]))
    countdown.variant(unroll=u)(x, qgraph.from_numpy(np.array([0], np.int32)))  # do-while: one pass, flag 0
    assert x.to_numpy()[0] == 4.0
    x = qgraph.ndarray(qgraph.f64, (1,))
    guarded = spinning.variant(unroll=u)
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
    x, kernel = qgraph.ndarray(qgraph.f64, (2,)), spelled.variant(unroll=2)
    kernel(x, qgraph.from_numpy(np.array([1], np.int32)), 6)
    np.testing.assert_array_equal(x.to_numpy(), [4.0, 6.0])
    assert kernel.stats.iterations == (4, 6)
    if loop_arch == "cuda":
        # loop: slot writer, 3 copies (its serial task does the gates' work), condition; repeat: (slot, 4 copies,
        # condition) + (slot, 1, condition)
        assert kernel.stats.graph_nodes == 5 + 6 + 3


def _tree(kernel):
    return kernel.source.body


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
    assert unroll_factor(loop, None) == MAX_COPY_NODES // (5 + 1)  # a flag loop's copy adds its gate kernel
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


@qgraph.kernel(graph_while="flag")
def settle(x, flag, left):
    for i in range(x.shape[0]):
        x[i] = x[i] * 0.5 + 1.0
    left[0] -= 1
    flag[0] = 1 if left[0] > 0 else 0


def test_a_body_ending_in_a_serial_task_folds_its_gates_into_it():
    """Copies of a body whose last task is serial have no gate kernel: that task in every copy but the
    last does the gate's work (its gating variant), where the kernels have one (`gating`)."""
    loop = _tree(settle).children[0]
    assert folds_gate(loop) and not folds_gate(_tree(mixed).children[0])  # mixed's body ends in an if
    assert unroll_factor(loop, None) == min(MAX_UNROLL, MAX_COPY_NODES // 2)  # no gate node per copy
    copies = unrolled(_tree(settle), 3).children[0].body.children
    assert [(type(c), c.gate, c.gating, c.first) for c in copies] == [(Gated, False, True, True),
                                                                     (Gated, False, True, False),
                                                                     (Gated, False, False, False)]
    first, *gated = unrolled(_tree(settle), 3, gating=set()).children[0].body.children  # no gating variant
    assert not isinstance(first, Gated) and [(g.gate, g.gating) for g in gated] == [(True, False)] * 2


def test_a_gating_node_takes_the_state_address_then_the_live_address():
    task = _tree(settle).children[0].body.children[-1]
    tk = TaskKernel(task, "plain", 1, 20, None, (0,), True, trigger_function="trigger", gated_function="gated",
                    gating=("gating", "gated gating"))
    first = gating_kernel(tk, 0x1000, None)
    assert (first.function, first.function_for(1, True), first.param_size) == ("gating", "gating", 32)
    assert first.gate == bytes(4) + (0x1000).to_bytes(8, "little")
    gated = gating_kernel(tk, 0x1000, 0x1038)
    assert (gated.function, gated.param_size) == ("gated gating", 40)
    assert gated.gate == bytes(4) + (0x1000).to_bytes(8, "little") + (0x1038).to_bytes(8, "little")


class _FakeLoop:
    """graphs.builder's WhileLoop for a flag loop with the driver faked: names the nodes it adds."""

    kernel_nodes, slot, live_address = 2, 0x1000, 0x1038

    def __init__(self) -> None:
        self.predicated: set = set()

    def add_loop(self, graph, deps, block):
        return "body", "WHILE", types.SimpleNamespace(handle="slot writer")

    def add_condition(self, body, deps, programmatic):
        self.condition = (body, deps, programmatic)

    def add_gate(self, *args):
        raise AssertionError("a folded gate has no node")


def _fake_build(monkeypatch, kernels: list) -> tuple[list, _FakeLoop]:
    """Build settle's graph, 3 copies, with the driver faked: (function, graph, deps) of each task node."""
    from qgraph.graphs import builder as graph_builder
    from qgraph.graphs.builder import GraphBuilder

    loop = _FakeLoop()
    monkeypatch.setattr(graph_builder.WhileLoop, "of_region", classmethod(lambda cls, *args: loop))
    spec = _spec(settle, unroll=3)
    spec.kernels = kernels
    tree, _ = graph_tree(spec, _packed(0), True)
    graph = GraphBuilder(spec, True)
    plan = graph.plan_tree(tree, {tk.task.index: tk for tk in kernels})
    added = []

    def add_task(builder, task, tk, k, deps, block, grid):
        added.append((tk.function, builder.graph, deps))
        builder.nodes[k] = types.SimpleNamespace(handle=f"node {len(added) - 1}")
        return builder.nodes[k].handle

    monkeypatch.setattr(GraphBuilder, "_add_task", add_task)
    assert graph.add_tree(tree, "graph", [], [b""] * len(plan), [None] * len(plan)) == ["WHILE"]
    return added, loop


def _settle_kernels(gated: bool) -> list:
    return [TaskKernel(t, f"task {t.index}", 1, 16, None, (0,), True,
                       gated_function=f"gated {t.index}" if gated else None,
                       gating=(("gating", "gated gating") if not t.parallel else ())) for t in settle.tasks]


def test_the_builder_chains_folded_copies_without_gate_nodes(monkeypatch):
    """With the driver faked: 3 copies of settle's 2 tasks, each copy's first task behind the copy
    before's last (a kernel node: a programmatic edge), no gate; the serial task of the first copy
    as its gating variant, of the second gated and gating, of the third gated only."""
    added, loop = _fake_build(monkeypatch, _settle_kernels(gated=True))
    assert added == [("task 0", "body", []), ("gating", "body", ["node 0"]),
                     ("gated 0", "body", ["node 1"]), ("gated gating", "body", ["node 2"]),
                     ("gated 0", "body", ["node 3"]), ("gated 1", "body", ["node 4"])]
    assert loop.condition == ("body", ["node 5"], True)


def test_a_folded_copy_without_gated_tasks_is_refused(monkeypatch):
    """No gate kernel and no gated tasks would run a copy after the loop ended: an error, not a graph."""
    with pytest.raises(qgraph.QgraphError, match="without its tasks' gated variants; please report"):
        _fake_build(monkeypatch, _settle_kernels(gated=False))


@qgraph.kernel
def short_repeat(x, odd, hits, k: int):
    for _ in qgraph.repeat(k):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5 + 1.0
        hits[0] += 1
        odd[0] = hits[0] % 2
        if qgraph.cond(odd):  # each straight copy gets its own branch
            hits[1] += 1


def _short_reference(x: np.ndarray, hits: list[int], k: int) -> tuple[np.ndarray, list[int]]:
    x, hits = x.copy(), list(hits)
    for _ in range(max(k, 0)):
        x = x * 0.5 + 1.0
        hits[0] += 1
        hits[1] += hits[0] % 2
    return x, hits


def test_a_short_repeat_runs_straight_and_a_new_count_rebuilds_once(loop_arch):
    """k copies in a straight line for the first call's count (k x 4 nodes <= MAX_STRAIGHT_NODES);
    another count rebuilds once in the WHILE form, whose later counts (above the threshold too) are
    node updates: the same values and stats.iterations on every path."""
    x0 = np.random.default_rng(3).standard_normal(19)
    x, odd, hits = qgraph.from_numpy(x0), qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i64, (2,))
    ref, ref_hits = x0, [0, 0]
    builds = []
    for k in (5, 5, 7, 0, MAX_STRAIGHT_NODES, -1, 5):
        short_repeat(x, odd, hits, k)
        ref, ref_hits = _short_reference(ref, ref_hits, k)
        np.testing.assert_allclose(x.to_numpy(), ref, rtol=1e-14)
        assert list(hits.to_numpy()) == ref_hits
        assert short_repeat.stats.iterations == (max(k, 0),)
        builds.append(short_repeat.stats.builds)
    if loop_arch == "cuda":
        assert builds == [1, 1, 2, 2, 2, 2, 2]


def _spec(kernel, *, unroll=None, straight=True, stop_word=0, device_loops=True):
    """A GraphSpec stand-in (graph_unroll.graph_tree reads these) whose counts are argument 0's bytes."""
    from qgraph.lang.options import DEFAULT_OPTIONS

    options = DEFAULT_OPTIONS if unroll is None else dataclasses.replace(DEFAULT_OPTIONS, unroll=unroll)
    names = {r.count if isinstance(r, RepeatLoop) else r.flag for r in control_regions(kernel.source.body)}
    return types.SimpleNamespace(body=kernel.source.body, options=options, device_loops=device_loops,
                                 straight_counts=straight, stop_word=stop_word, target=None, name="spec",
                                 flags={name: (0, None) for name in names})


def _packed(k: int) -> tuple:
    return (k.to_bytes(8, "little", signed=True),)


@qgraph.kernel
def wrapped(x, flag, k: int):
    for _ in qgraph.repeat(k):  # around a loop
        while qgraph.loop(flag):
            flag[0] = 0
        x[0] += 1.0
    if qgraph.cond(flag):
        for _ in qgraph.repeat(k):  # inside an if
            x[1] += 1.0


def test_which_repeats_are_built_straight():
    tree, fixed = graph_tree(_spec(short_repeat), _packed(6), True)
    (straight,) = tree.children
    assert isinstance(straight, Straight) and straight.passes == 6 and len(straight.children) == 6
    assert len(list(leaf_tasks(tree))) == 6 * 3 and body_nodes(tree) == 6 * 4  # a branch per copy
    assert fixed == (FixedCount(0, 6, None, (0, None), _packed(6)[0]),)
    assert counts_hold(fixed, _packed(6)) and not counts_hold(fixed, _packed(7))
    most = MAX_STRAIGHT_NODES // 4
    assert isinstance(graph_tree(_spec(short_repeat), _packed(most), True)[0].children[0], Straight)
    for spec, k, own in ((_spec(short_repeat), most + 1, True),  # over the threshold
                         (_spec(short_repeat), 0, True), (_spec(short_repeat), -3, True),
                         (_spec(short_repeat), 6, False),  # a part of another graph (a step's)
                         (_spec(short_repeat, straight=False), 6, True),  # a count changed before
                         (_spec(short_repeat, stop_word=64), 6, True),  # debug mode
                         (_spec(short_repeat, unroll=2), 6, True)):  # U set: the WHILE form
        tree, fixed = graph_tree(spec, _packed(k), own)
        assert fixed == () and not any(isinstance(r, Straight) for r in tree.children), (k, own)
    assert graph_tree(_spec(short_repeat, device_loops=False), _packed(6), True) == (short_repeat.source.body, ())
    # a repeat around a loop, or inside an if, keeps its WHILE node; inside one loop it goes straight
    assert graph_tree(_spec(wrapped), _packed(2), True)[1] == ()
    tree, fixed = graph_tree(_spec(mixed), _packed(2), True)
    assert isinstance(tree.children[1], Straight) and fixed[0].index == 1 and fixed[0].inside is None
    tree, fixed = graph_tree(_spec(outer_inner), _packed(3), True)
    assert isinstance(tree.children[0].body.children[0], Straight) and (fixed[0].index, fixed[0].inside) == (1, 0)


class _Loop:
    """A graph's WhileLoop as loop_passes reads it."""

    def __init__(self, passes: int, remainder: bool = False) -> None:
        self.remainder, self._passes = remainder, passes

    def passes(self) -> int:
        return self._passes


def test_stats_iterations_put_a_straight_repeat_in_its_place():
    inside = FixedCount(1, 3, 0, (0, None), b"")
    assert loop_passes([_Loop(4)], (inside,)) == (4, 3)
    assert loop_passes([_Loop(0)], (inside,)) == (0, 0)  # the loop around it ran no pass: never entered
    assert loop_passes([_Loop(8), _Loop(1, True)], (FixedCount(0, 5, None, (0, None), b""),)) == (5, 9)


class _Driverless:
    """graphs.builder's WhileLoop and IfBranch stand-in: adding one names it in the nodes it returns."""

    kernel_nodes = 1

    def __init__(self, target, slot, *rest) -> None:
        self.slot = slot

    @classmethod
    def of_region(cls, spec, region, number, count_part, outermost):
        raise AssertionError("a straight repeat has no WHILE node")

    def add_branch(self, graph, deps, block, has_then, has_else):
        return ("branch", tuple(deps)), "then body", None, [f"IF after {deps}"]


def test_the_builder_adds_k_straight_copies_chained_and_no_while_node(monkeypatch):
    """With the driver faked: a Straight repeat of 5 passes is 5 copies of the body's task nodes,
    each after the one before (the body's if: a branch kernel and IF node per copy), no WHILE."""
    from qgraph.graphs import builder as graph_builder
    from qgraph.graphs.builder import GraphBuilder

    monkeypatch.setattr(graph_builder, "WhileLoop", _Driverless)
    monkeypatch.setattr(graph_builder, "IfBranch", _Driverless)
    spec = _spec(short_repeat)
    tree, fixed = graph_tree(spec, _packed(5), True)
    kernels = [types.SimpleNamespace(task=t) for t in short_repeat.tasks]
    graph = GraphBuilder(spec, True)
    plan = graph.plan_tree(tree, {tk.task.index: tk for tk in kernels})
    added = []
    monkeypatch.setattr(GraphBuilder, "_add_task", lambda builder, task, tk, k, deps, block, grid:
                        added.append((task, builder.graph, deps)) or f"node {len(added) - 1}")
    ends = graph.add_tree(tree, "graph", [], [b""] * len(plan), [None] * len(plan))
    # copy c: its first task (node 3c) after the copy before it (its IF node), its second (3c + 1) after
    # the first, the then body's task (3c + 2) in the IF node's body
    after_copy = [[]] + [[f"IF after {[f'node {3 * c + 1}']}"] for c in range(4)]
    expected = [(t, where, deps) for c in range(5) for t, where, deps in
                ((0, "graph", after_copy[c]), (1, "graph", [f"node {3 * c}"]), (2, "then body", []))]
    assert [(task.index, g, deps) for task, g, deps in added] == expected
    assert ends == [f"IF after {['node 13']}"] and len(graph.branches) == 5 and graph.loops == []
    assert len(plan) == 5 * 4  # per copy: 3 task nodes and a branch kernel
