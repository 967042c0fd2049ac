"""qgraph.distributed.Group: collectives in and out of steps, and the multi-GPU solve to a global
tolerance in one device loop, against one rank and NumPy (gloo on the CPU, NCCL on 2 GPUs)."""

from __future__ import annotations

import ctypes
import importlib.util
import socket
import warnings

import numpy as np
import pytest
from helpers.arch import need_gpus

import qgraph
import qgraph.distributed
from qgraph.examples import ranks
from qgraph.examples import relax_multi_gpu as relax
from qgraph.examples.heat_multi_gpu import initial_field

if importlib.util.find_spec("torch") is None:
    pytest.skip("PyTorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.torch


@pytest.fixture(scope="module", autouse=True)
def one_numba_thread_per_rank():
    """The ranks share the machine's cores: each runs its loops on one numba thread. The kernels
    are compiled here first, into the compile cache the ranks share (numba refuses another thread
    count in this process once its threads run)."""
    qgraph.init("cpu")
    u, change, count = qgraph.from_numpy(np.zeros((4, 5))), qgraph.from_numpy(np.zeros(1)), qgraph.ndarray(
        qgraph.i64, (1,))
    qgraph.compile(relax.sweep, u, u, change, 1, 3)
    qgraph.compile(relax.decide, change, change, count, qgraph.ndarray(qgraph.i32, (1,)), 1e-3)
    qgraph.compile(scale, change, 2.0)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NUMBA_NUM_THREADS", "1")
        yield


@qgraph.kernel
def scale(x, factor: float):
    for i in range(x.shape[0]):
        x[i] = x[i] * factor


def collectives_on_each_rank(rows: int = 8, cols: int = 5) -> dict:
    """Run on every rank: eager collectives, then a step holding two of them, replayed."""
    g = qgraph.distributed.Group()
    r, w = g.rank, g.world
    x = qgraph.from_numpy(np.full(3, r + 1.0))
    g.all_reduce(x, "sum")
    assert np.array_equal(x.to_numpy(), np.full(3, w * (w + 1) / 2)), x.to_numpy()
    for dtype, op, expected in ((np.float32, "min", 1.0), (np.int32, "max", w), (np.int64, "prod", np.prod(
            np.arange(1, w + 1)))):
        y = qgraph.from_numpy(np.full(4, r + 1, dtype))
        g.all_reduce(y, op)
        assert np.array_equal(y.to_numpy(), np.full(4, expected, dtype)), (op, y.to_numpy())
    a = qgraph.from_numpy(np.full((rows, cols), float(r)))
    a_host = a.to_numpy()
    a_host[1], a_host[rows - 2] = 100.0 + r, 200.0 + r  # the edge rows the neighbours get
    a.from_numpy(a_host)
    g.exchange_rows(a)
    got = a.to_numpy()
    assert np.array_equal(got[0], np.full(cols, 200.0 + r - 1 if r > 0 else float(r)))
    assert np.array_equal(got[rows - 1], np.full(cols, 100.0 + r + 1 if r < w - 1 else float(r)))

    @qgraph.graph
    def step(x, factor: float):
        scale(x, factor)
        g.all_reduce(x, "max")

    x.from_numpy(np.full(3, r + 1.0))
    step(x, 2.0)  # 2 (r + 1), then the max over the ranks: 2w
    step(x, 3.0)  # a traced replay with a new number: 6w
    step(x, 3.0)  # the same arguments: 18w
    assert np.array_equal(x.to_numpy(), np.full(3, 18.0 * w)), x.to_numpy()
    return {"builds": step.stats.builds, "traced": step.stats.traced, "world": w}


@pytest.fixture
def one_rank_group():
    """A torch.distributed group of this process alone (gloo), destroyed after the test."""
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    qgraph.init("cpu")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield qgraph.distributed.Group()
    dist.destroy_process_group()


def test_a_group_needs_an_initialised_process_group():
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised here")
    with pytest.raises(RuntimeError, match=r"needs torch.distributed.init_process_group\(...\) first"):
        qgraph.distributed.Group()


def test_bad_arguments_name_the_argument_and_the_fix(one_rank_group):
    g = one_rank_group
    a = qgraph.from_numpy(np.zeros((8, 3)))
    with pytest.raises(ValueError, match="all_reduce: op='mean'; use one of 'sum', 'prod', 'max', 'min'"):
        g.all_reduce(a, "mean")
    with pytest.raises(TypeError, match="array: a qgraph array .* got ndarray"):
        g.all_reduce(np.zeros(3))
    with pytest.raises(ValueError, match="exchange_rows: width=0; give a positive int"):
        g.exchange_rows(a, 0)
    with pytest.raises(ValueError, match=r"shape \(8, 3\) has fewer than 12 rows .* width=3"):
        g.exchange_rows(a, 3)
    g.all_reduce(a, "max")  # after the errors, good calls work (one rank: nothing to exchange)
    g.exchange_rows(a)
    g.close()
    with pytest.raises(RuntimeError, match="was closed; make a new Group"):
        g.all_reduce(a)


def test_a_collective_in_a_kernel_points_to_the_step(one_rank_group):
    g = one_rank_group
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"g.all_reduce is a collective between the ranks of a "
                                                       r"qgraph.distributed.Group, not kernel code: call it in a "
                                                       r"@qgraph.graph step"):
        @qgraph.kernel(graph_while="flag")  # refused as it is decorated
        def relax_alone(x, flag):
            x[0] += 1.0
            g.all_reduce(x, "max")
            flag[0] = 0


# where a collective may be written by mistake: kernel body lines, "{call}" where it goes ("{helper}": a call
# of a @qgraph.func whose body holds it)
PLACEMENTS = {
    "serial task": ["x[0] = x[0] + 1.0", "{call}"],
    "parallel loop": ["for i in range(x.shape[0]):", "    {call}"],
    "nested region": ["for r in qgraph.serial(range(2)):", "    for i in range(x.shape[0]):",
                      "        x[i] += np.float32(0.5)", "    {call}"],
    "after an inner loop": ["for j in range(3):", "    x[0] += 1.0", "{call}"],
    "repeat loop": ["for _ in qgraph.repeat(n):", "    {call}"],
    "helper": ["x[0] = x[0] + {helper}"],
    "helper in a parallel loop": ["for i in range(x.shape[0]):", "    x[i] = {helper}"],
}
ARRAYS = {"plain": "x", "vector elements": "v", "0-d": "z", "struct field": "s.grid"}


@pytest.mark.parametrize("where", list(PLACEMENTS))
@pytest.mark.parametrize("op", ["all_reduce", "exchange_rows"])
@pytest.mark.parametrize("array", list(ARRAYS))
def test_a_collective_anywhere_in_a_kernel_is_refused_at_its_line(one_rank_group, tmp_path_factory, where, op,
                                                                  array):
    from helpers.generated import generated_module

    call = f"g.{op}({ARRAYS[array]})"
    lines = ["import numpy as np", "import qgraph", "", "g = None", "", "",
             "@qgraph.func", "def collective_in_a_helper(x, v, z, s):", f"    {call}", "    return 1.0", "", "",
             "def kernel_source(x, v, z, s, n: int, flag):"]
    helper = "collective_in_a_helper(x, v, z, s)"
    lines += ["    " + line.format(call=call, helper=helper) for line in PLACEMENTS[where]]
    lines += ["    v[0] = v[0] * np.float32(2.0)", "    flag[0] = 0", ""]
    written = 9 if "helper" in where else next(k + 1 for k, line in enumerate(lines) if call in line and k > 9)
    module = generated_module(tmp_path_factory, "misplaced", "\n".join(lines))
    module.g = one_rank_group
    with pytest.raises(qgraph.QgraphSyntaxError, match=rf"misplaced.py:{written}: g.{op} is a collective between "
                                                       r"the ranks of a qgraph.distributed.Group, not kernel code"):
        qgraph.kernel(graph_while="flag")(module.kernel_source)


def test_one_rank_solve_is_the_numpy_solve(one_rank_group):
    r = relax.solve(40, 33, tol=2e-3)
    expected, passes = relax.numpy_solve(initial_field(40, 33), 2e-3)
    assert (r.world, r.passes) == (1, passes)
    np.testing.assert_array_equal(r.u, expected)


def test_collectives_on_two_gloo_ranks():
    out = ranks.launch(2, "cpu", collectives_on_each_rank, 300)
    assert out == {"builds": 0, "traced": True, "world": 2}


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_take_the_same_passes_as_one_process_on_the_cpu(world):
    r = relax.launch(world, "cpu", rows=45, cols=30, tol=1e-3)
    expected, passes = relax.numpy_solve(initial_field(45, 30), 1e-3)
    assert (r.world, r.passes, r.arch) == (world, passes, "cpu")
    np.testing.assert_array_equal(r.u, expected)
    assert 0 < r.change <= 1e-3


_PROXY_HAND_OFF = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: None)


def solve_as_between_hosts(**kwargs) -> tuple:
    """Run on every rank: relax.solve with each all-reduce followed by a host function on its stream, as
    NCCL's collectives between hosts are (their captured graph hands the proxy thread its work in a host
    node): the step's loop moves to the host, with a FallbackWarning."""
    from qgraph.driver import nccl

    real = nccl.Communicator.all_reduce
    # the driver's own entry point: cuda.bindings' cuLaunchHostFunc wraps the function in a trampoline
    # that frees itself after one call, which a graph's host node would call again
    launch_host_func = ctypes.CDLL("libcuda.so.1").cuLaunchHostFunc

    def with_host_node(self, address, count, dtype, op, stream):
        real(self, address, count, dtype, op, stream)
        assert launch_host_func(ctypes.c_void_p(stream), _PROXY_HAND_OFF, None) == 0

    nccl.Communicator.all_reduce = with_host_node
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = relax.solve(**kwargs)
    finally:
        nccl.Communicator.all_reduce = real
    return r, [str(w.message) for w in caught if w.category is qgraph.FallbackWarning]



@pytest.mark.cuda
def test_one_gpu_device_loop_matches_numpy():
    need_gpus(1)
    r = relax.launch(1, "cuda", rows=130, cols=70, tol=1e-3)
    expected, passes = relax.numpy_solve(initial_field(130, 70), 1e-3)
    assert (r.passes, r.launches) == (passes, 1)
    np.testing.assert_allclose(r.u, expected, rtol=0, atol=1e-12)


@pytest.mark.cuda
def test_two_gpus_collectives_in_and_out_of_steps():
    need_gpus(2)
    out = ranks.launch(2, "cuda", collectives_on_each_rank, 300)
    assert out == {"builds": 1, "traced": True, "world": 2}


@pytest.mark.cuda
def test_two_gpus_loop_on_the_device_to_the_one_gpu_answer():
    need_gpus(2)
    one = relax.launch(1, "cuda", rows=301, cols=257, tol=5e-4)
    two = relax.launch(2, "cuda", rows=301, cols=257, tol=5e-4)
    expected, passes = relax.numpy_solve(initial_field(301, 257), 5e-4)
    assert (one.passes, two.passes, two.world) == (passes, passes, 2)
    assert two.launches == 1  # every pass, exchanges and all-reduce included, in one graph launch
    np.testing.assert_array_equal(two.u, one.u)
    np.testing.assert_allclose(two.u, expected, rtol=0, atol=1e-12)


@pytest.mark.cuda
def test_a_collective_needing_a_host_node_moves_the_loop_to_the_host():
    need_gpus(2)
    r, said = ranks.launch(2, "cuda", solve_as_between_hosts, 300, rows=64, cols=48, tol=1e-3)
    expected, passes = relax.numpy_solve(initial_field(64, 48), 1e-3)
    assert r.passes == passes and r.launches == passes  # one launch of the step's graph per pass
    np.testing.assert_allclose(r.u, expected, rtol=0, atol=1e-12)
    assert len(said) == 1 and said[0].startswith("step relax: graph_while runs as a host loop, the flag read after "
                                                 "every pass, because all_reduce('max') put CU_GRAPH_NODE_TYPE_HOST")
