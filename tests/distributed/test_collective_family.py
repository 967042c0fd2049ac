"""Collectives where they meet the other step features: a generated family of steps (traced, untraced,
nested, graph_while, beside a host_call) x reductions x call patterns (the first call, a new number, the
same arguments, another array), every rank's arrays checked against NumPy after every call, on 2 gloo
ranks and on 2 GPUs."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest
from helpers.arch import need_gpus

import qgraph
import qgraph.distributed
from qgraph.examples import ranks

if importlib.util.find_spec("torch") is None:
    pytest.skip("PyTorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.torch

KINDS = ("traced", "untraced", "nested", "graph_while", "host_call")
OPS = ("sum", "max", "min")
CALLS = ((2.0, 1.0, "x"), (3.0, 1.0, "x"), (3.0, 1.0, "x"), (2.0, 0.5, "y"))  # (f, c, array): new number, same, other
PASSES = 3  # of a graph_while step per call
REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


@qgraph.kernel
def scale(x, f: float):
    for i in range(x.shape[0]):
        x[i] = x[i] * f


@qgraph.kernel
def shift(x, c: float):
    for i in range(x.shape[0]):
        x[i] = x[i] + c


@qgraph.kernel
def count_down(left, flag):
    left[0] -= 1
    flag[0] = 1 if left[0] > 0 else 0


def start(rank: int, name: str) -> np.ndarray:
    return np.arange(6, dtype=np.float64) + 10.0 * rank + (0.25 if name == "y" else 0.0)


def expected(kind: str, op: str, world: int) -> list[list[np.ndarray]]:
    """NumPy: after each call, every rank's array (x or y, as the call used)."""
    arrays = {name: [start(r, name) for r in range(world)] for name in ("x", "y")}
    out = []
    for f, c, name in CALLS:
        for _ in range(PASSES if kind == "graph_while" else 1):
            reduced = REDUCE[op](np.stack([a * f for a in arrays[name]]), axis=0)
            arrays[name] = [reduced + c for _ in range(world)]
        out.append([a.copy() for a in arrays[name]])
    return out


def make_step(kind: str, op: str, group, seen: list):
    def body(x, f, c):
        scale(x, f)
        group.all_reduce(x, op)
        shift(x, c)

    if kind == "traced":
        return qgraph.graph(body)
    if kind == "untraced":
        return qgraph.graph(trace=False)(body)
    if kind == "nested":
        inner = qgraph.graph(body)

        @qgraph.graph
        def outer(x, f: float, c: float):
            inner(x, f, c)

        return outer
    if kind == "graph_while":
        @qgraph.graph(graph_while="flag")
        def looped(x, f: float, c: float, left, flag):
            body(x, f, c)
            count_down(left, flag)

        return looped

    @qgraph.graph
    def with_host_call(x, f: float, c: float):
        scale(x, f)
        group.all_reduce(x, op)
        qgraph.host_call(seen.append, op)
        shift(x, c)

    return with_host_call


def family_on_each_rank() -> dict:
    """Run on every rank: each step of the family called as CALLS says; (kind, op) -> its arrays after each call."""
    group = qgraph.distributed.Group()
    got, host_calls = {}, {}
    for kind, op in itertools.product(KINDS, OPS):
        seen: list = []
        step = make_step(kind, op, group, seen)
        arrays = {name: qgraph.from_numpy(start(group.rank, name)) for name in ("x", "y")}
        left, flag = qgraph.from_numpy(np.zeros(1, np.int32)), qgraph.ndarray(qgraph.i32, (1,))
        after = []
        for f, c, name in CALLS:
            if kind == "graph_while":
                left.from_numpy(np.full(1, PASSES, np.int32))
                step(arrays[name], f, c, left, flag)
            else:
                step(arrays[name], f, c)
            after.append(arrays[name].to_numpy())
        qgraph.sync()
        got[(kind, op)] = after
        host_calls[(kind, op)] = len(seen)
    import torch.distributed as dist

    everyone = [None] * group.world
    dist.all_gather_object(everyone, got)
    return {"world": group.world, "ranks": everyone, "host_calls": host_calls}


def check(out: dict) -> None:
    world = out["world"]
    for kind, op in itertools.product(KINDS, OPS):
        want = expected(kind, op, world)
        for call, per_rank in enumerate(want):
            for rank in range(world):
                got = out["ranks"][rank][(kind, op)][call]
                np.testing.assert_array_equal(got, per_rank[rank], err_msg=f"{kind} {op} call {call} rank {rank}")
    assert all(out["host_calls"][("host_call", op)] == len(CALLS) for op in OPS)


@pytest.fixture(scope="module", autouse=True)
def one_numba_thread_per_rank():
    """The kernels compiled here first (the ranks load them from the shared compile cache), then one
    numba thread per rank."""
    qgraph.init("cpu")
    x, i32 = qgraph.from_numpy(np.zeros(6)), qgraph.ndarray(qgraph.i32, (1,))
    qgraph.compile(scale, x, 2.0)
    qgraph.compile(shift, x, 1.0)
    qgraph.compile(count_down, i32, i32)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NUMBA_NUM_THREADS", "1")
        yield


def test_the_family_on_two_gloo_ranks():
    check(ranks.launch(2, "cpu", family_on_each_rank, 300))


@pytest.mark.cuda
def test_the_family_on_two_gpus():
    need_gpus(2)
    check(ranks.launch(2, "cuda", family_on_each_rank, 300))
