"""Device control-flow regions (`while qgraph.loop(flag):`, `if qgraph.cond(flag):`,
`for _ in qgraph.repeat(k):`), nested, with identical results on the CPU, the CUDA graph with
conditional nodes, and the host fallback (the loop_arch fixture); stats.iterations; the guard
per loop; the errors."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph


@qgraph.kernel
def nested(x, outer, inner, passes, hits, k: int):
    outer[0] = 1
    passes[0] = 0
    while qgraph.loop(outer):
        inner[0] = 3
        while qgraph.loop(inner):
            for i in range(x.shape[0]):
                x[i] += 1.0
            inner[0] -= 1
        passes[0] += 1
        if qgraph.cond(inner):  # 0 here: the else branch
            hits[0] += 1
        else:
            hits[1] += 1
        for _ in qgraph.repeat(k):
            hits[2] += 1
        outer[0] = 1 if passes[0] < 4 else 0


def _arrays(n=5):
    return (qgraph.ndarray(qgraph.f64, (n,)), qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,)),
            qgraph.ndarray(qgraph.i64, (1,)), qgraph.ndarray(qgraph.i64, (3,)))


def test_nested_loops_branches_and_repeats(loop_arch):
    x, outer, inner, passes, hits = _arrays()
    nested(x, outer, inner, passes, hits, 2)
    np.testing.assert_array_equal(x.to_numpy(), 12.0)  # 4 outer passes x 3 inner passes
    assert passes.to_numpy()[0] == 4
    np.testing.assert_array_equal(hits.to_numpy(), [0, 4, 8])
    assert nested.stats.iterations == (4, 3, 2)  # outer, inner (its last entry), repeat
    nested(x, outer, inner, passes, hits, 5)  # a new count: the straight repeat rebuilt once, in the WHILE form
    np.testing.assert_array_equal(hits.to_numpy(), [0, 8, 28])
    assert nested.stats.iterations == (4, 3, 5)
    nested(x, outer, inner, passes, hits, 3)  # and from then on a node update
    assert nested.stats.iterations == (4, 3, 3)
    if loop_arch != "cpu":
        assert nested.stats.builds == (0 if loop_arch == "cuda-host" else 2)


@qgraph.kernel
def loop_then_branch(x, outer, inner, passes):
    outer[0] = 1
    while qgraph.loop(outer):
        passes[0] += 1
        outer[0] = 1 if passes[0] < 3 else 0
        inner[0] = 2
        while qgraph.loop(inner):
            x[0] += 1.0
            inner[0] -= 1
        if qgraph.cond(outer):  # a body ending in an IF node after a WHILE node: a plain edge to the condition
            x[1] += 1.0


def test_a_loop_body_ending_in_a_branch_after_a_loop(loop_arch):
    x, outer, inner, passes = (qgraph.ndarray(qgraph.f64, (2,)), qgraph.ndarray(qgraph.i32, (1,)),
                               qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i64, (1,)))
    loop_then_branch(x, outer, inner, passes)
    np.testing.assert_array_equal(x.to_numpy(), [6.0, 2.0])  # 3 passes of 2 inner passes; the last pass skips
    assert loop_then_branch.stats.iterations == (3, 2)


@qgraph.kernel
def while_first(x, flag):
    while qgraph.loop(flag):  # tested before each pass: a 0 flag runs no pass
        x[0] += 1.0
        flag[0] = 1 if x[0] < 3 else 0


def test_while_tests_before_each_pass(loop_arch):
    x, flag = qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
    while_first(x, flag)
    assert x.to_numpy()[0] == 0.0 and while_first.stats.iterations == (0,)
    flag.from_numpy(np.array([1], np.int32))
    while_first(x, flag)
    assert x.to_numpy()[0] == 3.0 and while_first.stats.iterations == (3,)


@qgraph.kernel
def branch(x, flag, out):
    if qgraph.cond(flag):
        for i in range(x.shape[0]):
            out[i] = x[i] * 2.0
        flag[0] = 0  # the else branch is decided by the flag's value at the if, not after
    else:
        for i in range(x.shape[0]):
            out[i] = -x[i]


def test_if_else_on_a_flag_changed_by_the_branch(loop_arch):
    rng = np.random.default_rng(4)
    x_np = rng.standard_normal(33)
    x, out = qgraph.from_numpy(x_np), qgraph.ndarray(qgraph.f64, (33,))
    flags = [qgraph.from_numpy(np.array([1], np.int32)), qgraph.from_numpy(np.array([0], np.int32))]
    branch(x, flags[0], out)
    np.testing.assert_allclose(out.to_numpy(), 2 * x_np)
    assert flags[0].to_numpy()[0] == 0
    branch(x, flags[1], out)  # another flag array: a node update, no rebuild
    np.testing.assert_allclose(out.to_numpy(), -x_np)
    if loop_arch == "cuda":
        assert branch.stats.builds == 1


@pytest.mark.cuda
def test_two_if_nodes_where_the_driver_has_no_if_else(monkeypatch):
    """Before CUDA 12.8 an if/else is two IF nodes whose handles one kernel sets; the same results."""
    from helpers.arch import use_arch

    import qgraph.conditional as conditional

    use_arch("cuda")
    monkeypatch.setattr(conditional, "IF_ELSE_DRIVER", 10**9)
    fresh = branch.variant(cuda_graph=True)
    x_np = np.arange(9.0)
    x, out = qgraph.from_numpy(x_np), qgraph.ndarray(qgraph.f64, (9,))
    for flag, expected in ((1, 2 * x_np), (0, -x_np), (1, 2 * x_np)):
        fresh(x, qgraph.from_numpy(np.array([flag], np.int32)), out)
        np.testing.assert_allclose(out.to_numpy(), expected)
    assert fresh.stats.builds == 1


@qgraph.kernel
def runaway_inner(x, outer, inner):
    while qgraph.loop(outer, max_iterations=5):
        while qgraph.loop(inner, max_iterations=20):
            x[0] += 1.0
        outer[0] = 0


def test_each_loop_has_its_own_guard(loop_arch):
    x = qgraph.ndarray(qgraph.f64, (1,))
    one = lambda: qgraph.from_numpy(np.array([1], np.int32))  # noqa: E731
    with pytest.raises(qgraph.QgraphError, match=r"runaway_inner: the device loop at line \d+ ran 20 passes with "
                                                 r"its flag 'inner' still non-zero .*max_iterations=20"):
        runaway_inner(x, one(), one())
        qgraph.sync()
    assert x.to_numpy()[0] == 20.0
    x.fill(0)
    inner = qgraph.from_numpy(np.array([0], np.int32))
    runaway_inner(x, one(), inner)
    assert x.to_numpy()[0] == 0.0 and runaway_inner.stats.iterations == (1, 0)


def test_region_errors_name_the_line_and_the_fix(cpu):
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"qgraph.loop opens a region only as `while qgraph.loop"):
        @qgraph.kernel
        def wrong(flag):
            if qgraph.loop(flag):
                flag[0] = 0
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"qgraph.cond\(flag\[0\]\): pass a parameter"):
        @qgraph.kernel
        def indexed(flag):
            if qgraph.cond(flag[0]):
                flag[0] = 0
    with pytest.raises(qgraph.QgraphSyntaxError, match="opens a device region only as a statement at the top level"):
        @qgraph.kernel
        def inside(x, flag):
            for i in range(x.shape[0]):
                while qgraph.loop(flag):
                    x[i] = 0
    with pytest.raises(qgraph.QgraphSyntaxError, match="the repeat loop's variable 'n' does not exist"):
        @qgraph.kernel
        def counted(x, k: int):
            for n in qgraph.repeat(k):
                x[0] += n
    with pytest.raises(qgraph.QgraphSyntaxError, match="random numbers inside a qgraph.loop or qgraph.repeat"):
        @qgraph.kernel
        def draws(x, k: int):
            for _ in qgraph.repeat(k):
                x[0] += qgraph.random()


@qgraph.kernel
def repeat_float(x, k):
    for _ in qgraph.repeat(k):
        x[0] += 1.0


def test_a_repeat_count_must_be_an_integer(loop_arch):
    x = qgraph.ndarray(qgraph.f64, (1,))
    with pytest.raises(TypeError, match="qgraph.repeat count 'k' must be an integer scalar"):
        repeat_float(x, 2.5)
    repeat_float(x, 3)
    repeat_float(x, -1)  # no passes
    assert x.to_numpy()[0] == 3.0
