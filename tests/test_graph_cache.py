"""cuda_graph=True: one build, reuse across new arrays, shapes and scalars; the LRU cache;
safety under asynchrony; failure leaves nothing poisoned."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import qgraph


@qgraph.kernel(cuda_graph=True)
def axpy2(x, y, out, a: float):
    for i in range(x.shape[0]):
        out[i] = a * x[i] + y[i]
    for i in range(x.shape[0]):
        out[i] = out[i] * 2.0


@qgraph.kernel(cuda_graph=True)
def bump(x):
    for i in range(x.shape[0]):
        x[i] += 1.0


@qgraph.kernel(cuda_graph=True, graph_cache_size=2)
def small_cache(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1


def ref(x, y, a):
    return (a * x + y) * 2.0


def arrays(n, seed=0):
    rng = np.random.default_rng(seed)
    x, y = rng.random(n), rng.random(n)
    return x, y, qgraph.from_numpy(x), qgraph.from_numpy(y), qgraph.ndarray(qgraph.f64, (n,))


def test_same_arrays_twice_one_build(cuda):
    x, y, dx, dy, out = arrays(500)
    axpy2(dx, dy, out, 1.5)
    axpy2(dx, dy, out, 1.5)
    np.testing.assert_allclose(out.to_numpy(), ref(x, y, 1.5))
    s = axpy2.stats
    assert (s.builds, s.replays, s.cache_size, s.used_graph, s.graph_nodes, s.num_tasks) == (1, 2, 1, True, 2, 2)


def test_new_arrays_each_call_no_rebuild(cuda):
    for seed in range(5):
        x, y, dx, dy, out = arrays(300, seed)
        axpy2(dx, dy, out, 0.5)
        np.testing.assert_allclose(out.to_numpy(), ref(x, y, 0.5))
    assert axpy2.stats.builds == 1


def test_alternating_array_sets_async_1000_calls(cuda):
    sets = [qgraph.from_numpy(np.zeros(257)), qgraph.from_numpy(np.full(257, 10.0))]
    for k in range(1000):
        bump(sets[k % 2])
    np.testing.assert_array_equal(sets[0].to_numpy(), 500.0)
    np.testing.assert_array_equal(sets[1].to_numpy(), 510.0)
    assert bump.stats.builds == 1 and bump.stats.replays == 1000


def test_sizes_256_1024_64_every_element_right(cuda):
    for n in (256, 1024, 64):
        x, y, dx, dy, out = arrays(n, n)
        out.fill(-7.0)
        axpy2(dx, dy, out, 2.0)
        np.testing.assert_allclose(out.to_numpy(), ref(x, y, 2.0))
    assert axpy2.stats.builds == 1


def test_grid_shrinks_so_no_thread_touches_past_the_end(cuda):
    cupy = pytest.importorskip("cupy")
    big = cupy.zeros(4096)
    bump(big)  # the graph is built for 4096 iterations
    bump(big[:100])  # a view: the same base address, 100 elements
    host = cupy.asnumpy(big)
    np.testing.assert_array_equal(host[:100], 2.0)
    np.testing.assert_array_equal(host[100:], 1.0)
    assert bump.stats.builds == 1


def test_changed_scalar_values(cuda):
    x, y, dx, dy, out = arrays(100)
    for a in (0.0, 1.0, -3.25):
        axpy2(dx, dy, out, a)
        np.testing.assert_allclose(out.to_numpy(), ref(x, y, a))
    assert axpy2.stats.builds == 1


def test_two_specialisations_two_graphs_and_reset(cuda):
    bump(qgraph.from_numpy(np.zeros(10)))
    bump(qgraph.from_numpy(np.zeros(10, np.float32)))
    assert bump.stats.cache_size == 2
    qgraph.reset()
    assert bump.stats.cache_size == 0
    x = qgraph.from_numpy(np.zeros(10))
    bump(x)
    assert x.to_numpy()[0] == 1.0 and bump.stats.cache_size == 1


def test_lru_bound_evicts_and_rebuilds(cuda):
    dtypes = (np.float32, np.float64, np.int32)
    for dt in dtypes:
        small_cache(qgraph.from_numpy(np.zeros(8, dt)))
    assert small_cache.stats.cache_size == 2
    x = qgraph.from_numpy(np.zeros(8, np.float32))  # evicted first: rebuilt
    small_cache(x)
    assert x.to_numpy()[0] == 1 and small_cache.stats.builds == 4


@pytest.mark.usefixtures("collect_only_new_objects")
def test_dropping_the_only_reference_after_an_async_call(cuda):
    out = qgraph.ndarray(qgraph.f64, (1 << 16,))
    for _ in range(50):
        x = qgraph.from_numpy(np.full(1 << 16, 2.0))
        axpy2(x, x, out, 1.0)
        del x
        gc.collect()
    qgraph.sync()
    np.testing.assert_array_equal(out.to_numpy(), 8.0)  # (1 * 2 + 2) * 2


def test_graphs_off_runs_eagerly(cuda, monkeypatch):
    monkeypatch.setenv("QGRAPH_GRAPHS", "0")
    qgraph.init("cuda")
    x, y, dx, dy, out = arrays(64)
    axpy2(dx, dy, out, 1.0)
    np.testing.assert_allclose(out.to_numpy(), ref(x, y, 1.0))
    assert not axpy2.stats.used_graph and axpy2.stats.graph_nodes == 0 and axpy2.stats.builds == 0
    monkeypatch.delenv("QGRAPH_GRAPHS")
    qgraph.init("cuda")


def test_cuda_graph_is_a_no_op_on_cpu(cpu):
    x = np.zeros(5)
    bump(x)
    assert x[0] == 1.0
    assert not bump.stats.used_graph and bump.stats.builds == 0


@qgraph.kernel(cuda_graph=True)
def broken_then_fine(x, mode):
    for i in range(x.shape[0]):
        x[i] = x[i] + mode


def test_a_failed_compile_leaves_the_next_good_call_working(arch):
    bad = qgraph.ndarray(qgraph.f64, ())  # x.shape[0] of a 0-d array cannot compile
    with pytest.raises(qgraph.QgraphSyntaxError, match="broken_then_fine"):
        broken_then_fine(bad, 1.0)
    good = qgraph.from_numpy(np.zeros(4))
    broken_then_fine(good, 2.0)
    np.testing.assert_array_equal(good.to_numpy(), 2.0)


@qgraph.kernel(cuda_graph=True)
def bad_body(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + "text"


def test_typing_error_names_the_line_and_next_call_works(arch):
    with pytest.raises(qgraph.QgraphSyntaxError) as info:
        bad_body(qgraph.from_numpy(np.zeros(4)))
    assert info.value.lineno == bad_body.tasks[0].body[0].lineno
    with pytest.raises(qgraph.QgraphSyntaxError):
        bad_body(qgraph.from_numpy(np.zeros(4)))
    x = qgraph.from_numpy(np.zeros(3))
    bump(x)
    assert x.to_numpy()[0] == 1.0


def test_two_streams(cuda):
    from cuda.core import Device

    dev = Device()
    dev.set_current()
    s1, s2 = dev.create_stream(), dev.create_stream()
    a, b = qgraph.from_numpy(np.zeros(1000)), qgraph.from_numpy(np.zeros(1000))
    for _ in range(20):
        bump(a, stream=s1)
        bump(b, stream=s2)
    s1.sync()
    s2.sync()
    np.testing.assert_array_equal(a.to_numpy(), 20.0)
    np.testing.assert_array_equal(b.to_numpy(), 20.0)
    bump(a, stream=int(s1.handle))
    np.testing.assert_array_equal(a.to_numpy(), 21.0)


@qgraph.kernel(cuda_graph=True)
def reversed_chain(x, y, z):
    for i in range(x.shape[0]):
        x[i] = x[i] * 2.0 + 1.0
    for i in range(x.shape[0]):
        y[i] = x[x.shape[0] - 1 - i]  # reads what other threads of the previous task wrote
    for i in range(x.shape[0]):
        z[i] = y[i] + y[(i + 1) % x.shape[0]]


@pytest.mark.parametrize("pdl", ["1", "0"])
def test_dependent_tasks_see_all_previous_writes(cuda, monkeypatch, pdl):
    monkeypatch.setenv("QGRAPH_PDL", pdl)
    qgraph.init("cuda")
    n = 300_000
    x0 = np.random.default_rng(5).random(n)
    x, y, z = qgraph.from_numpy(x0), qgraph.ndarray(qgraph.f64, (n,)), qgraph.ndarray(qgraph.f64, (n,))
    for _ in range(3):
        reversed_chain(x, y, z)
    ref = x0.copy()
    for _ in range(3):
        ref = ref * 2.0 + 1.0
        yr = ref[::-1].copy()
        zr = yr + np.roll(yr, -1)
    np.testing.assert_array_equal(z.to_numpy(), zr)
    monkeypatch.delenv("QGRAPH_PDL")
    qgraph.init("cuda")


def test_a_closed_graph_raises_instead_of_reaching_the_driver(cuda):
    from qgraph.graph_cache import GraphState

    x = qgraph.from_numpy(np.arange(8.0))
    bump(x)
    launcher = bump.launchers[qgraph.runtime.STATE.target.key]
    _, runner = launcher.specialisations()[0]
    graph = runner.graph
    assert graph.state is GraphState.BUILT
    qgraph.sync()
    graph.close()
    assert graph.state is GraphState.CLOSED
    other = qgraph.from_numpy(np.arange(8.0))  # new bytes: the replay must set up an instance
    with pytest.raises(qgraph.QgraphError, match="was closed"):
        graph.replay((other,), (other._abi,), launcher.device.stream_handle)
    qgraph.reset()  # the next call rebuilds and works
    bump(other)
    np.testing.assert_array_equal(other.to_numpy(), np.arange(8.0) + 1)


def test_reset_unloads_the_compiled_modules(cuda):
    device = qgraph.runtime.STATE.cuda
    qgraph.reset()
    before = len(device._modules)
    x = qgraph.from_numpy(np.arange(6.0))
    axpy2(x, x, qgraph.ndarray(qgraph.f64, (6,)), 2.0)
    bump(x)
    # a module per cubin of each specialisation: its plain tasks, and on Hopper their launch_dependents
    # twins (compiler.cuda_images links them apart)
    per_specialisation = 2 if tuple(device.info.compute_capability) >= (9, 0) else 1
    assert len(device._modules) == before + 2 * per_specialisation
    qgraph.reset()
    assert len(device._modules) == before
    bump(x)  # reloads (from the disk cache) and runs: the second bump
    np.testing.assert_array_equal(x.to_numpy(), np.arange(6.0) + 2)


@qgraph.kernel
def five_tasks(x, flag, n: int):
    for i in range(x.shape[0]):
        x[i] = 1.0
    for i in range(x.shape[0]):
        x[i] += 2.0
    for i in range(x.shape[0]):
        x[i] += 3.0
    for i in range(x.shape[0]):
        x[i] += 4.0
    flag[0] = 0


class _FakeControl:
    """A WhileLoop or IfBranch stand-in: adding it returns a marker node naming the region."""

    kernel_nodes = 0

    def __init__(self, target, slot, index, *rest) -> None:
        self.slot = slot

    @classmethod
    def of_region(cls, spec, region, number, count_part, outermost):
        """As WhileLoop.of_region: the loop of a repeat's count or a flag loop's flag."""
        return cls(spec.target, spec.flags[getattr(region, "count", None) or region.flag], number)

    def add_loop(self, graph, deps, block):
        return (f"body of {self.slot}", f"while {self.slot}", ("slot node", self.slot, block))

    def add_condition(self, body, inner, programmatic) -> None:
        pass

    def add_branch(self, graph, deps, block, has_then, has_else):
        return ("branch node", self.slot, block), "then", "else", [f"after {self.slot}"]


@pytest.mark.parametrize("device_loops", [True, False])
def test_the_add_walk_finds_each_regions_plan_entry_by_the_region(monkeypatch, device_loops):
    """GraphBuilder's two walks: plan indexes each region's node, add adds it at that index (no
    list kept in step between them), loop regions built as plain bodies when the host repeats them."""
    from qgraph.graphs import builder as graph_builder
    from qgraph.graphs.builder import GraphBuilder
    from qgraph.lang.front.regions import DeviceLoop, IfRegion, RepeatLoop, Sequence

    monkeypatch.setattr(graph_builder, "WhileLoop", _FakeControl)
    monkeypatch.setattr(graph_builder, "IfBranch", _FakeControl)
    t0, t1, t2, t3, t4 = five_tasks.tasks
    branch = IfRegion("flag", Sequence((t1,)), Sequence((t2,)), t1.lineno)
    repeat = RepeatLoop("n", Sequence((t3,)), t3.lineno)
    body = Sequence((t0, DeviceLoop("flag", Sequence((branch, repeat)), t0.lineno), t4))
    kernels = [type("TK", (), {"task": t})() for t in five_tasks.tasks]
    spec = type("Spec", (), {"target": None, "name": "five_tasks", "options": qgraph.lang.options.DEFAULT_OPTIONS,
                             "device_loops": device_loops, "stop_word": 0,
                             "flags": {"flag": "flag slot", "n": "n slot"}})()
    graph = GraphBuilder(spec, False)
    plan = graph.plan_tree(body, {tk.task.index: tk for tk in kernels})
    added = []
    monkeypatch.setattr(GraphBuilder, "_add_task",
                        lambda self, task, tk, k, deps, block, grid: added.append((task, k)) or k)
    blocks = [f"block {k}" for k in range(len(plan))]
    ends = graph.add_tree(body, "graph", [], blocks, [None] * len(plan))
    assert [graph.planned[t].index for t, _ in added] == [k for _, k in added]
    assert [t.index for t, _ in added] == [0, 1, 2, 3, 4]
    assert all(plan[k].task is t for t, k in added)
    loop_entries = [k for k, item in enumerate(plan) if isinstance(item, _FakeControl)]
    assert [graph.nodes[k] for k in loop_entries] == [(kind, plan[k].slot, f"block {k}") for k, kind in zip(
        loop_entries, (["slot node"] if device_loops else []) + ["branch node", "slot node"])]
    assert len(plan) == 5 + 2 + device_loops and ends == [graph.planned[t4].index]
