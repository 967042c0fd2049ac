"""The graph_while fallback policy (pure: runs in CI) and the fallback warning (CUDA)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import qgraph
from qgraph.conditional import while_strategy


@pytest.mark.parametrize("cc,driver,graphs,force,expected", [
    ((9, 0), 13000, True, False, "device"),
    ((10, 0), 12040, True, False, "device"),
    ((9, 0), 12030, True, False, "host"),  # driver too old for conditional nodes
    ((8, 9), 13000, True, False, "host"),  # pre-Hopper
    ((7, 5), 12000, True, False, "host"),
    ((9, 0), 13000, True, True, "host"),  # QGRAPH_GRAPH_WHILE=host
    ((9, 0), 13000, False, False, "host"),  # graphs off
])
def test_while_strategy(cc, driver, graphs, force, expected):
    mode, reason = while_strategy(cc, driver, graphs=graphs, force_host=force)
    assert mode == expected
    assert (reason is None) == (expected == "device")


def test_fallback_reasons_name_the_cause():
    assert "8.9" in while_strategy((8, 9), 13000, graphs=True, force_host=False)[1]
    assert "12.3" in while_strategy((9, 0), 12030, graphs=True, force_host=False)[1]
    assert "QGRAPH_GRAPH_WHILE=host" in while_strategy((9, 0), 13000, graphs=True, force_host=True)[1]
    assert "QGRAPH_GRAPHS=0" in while_strategy((9, 0), 13000, graphs=False, force_host=False)[1]


@qgraph.kernel(graph_while="flag")
def tick(counter, flag):
    counter[0] -= 1
    flag[0] = 1 if counter[0] > 0 else 0


def test_fallback_warning_fires_once_per_kernel_and_names_the_reason(cuda, monkeypatch):
    monkeypatch.setenv("QGRAPH_GRAPH_WHILE", "host")
    qgraph.init("cuda")
    tick._fallback_warned = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            counter = qgraph.from_numpy(np.array([3], np.int32))
            tick(counter, qgraph.ndarray(qgraph.i32, (1,)))
            assert counter.to_numpy()[0] == 0
    fallback = [w for w in caught if issubclass(w.category, qgraph.FallbackWarning)]
    assert len(fallback) == 1
    assert "QGRAPH_GRAPH_WHILE=host" in str(fallback[0].message)
    assert tick.stats.host_loop
    monkeypatch.delenv("QGRAPH_GRAPH_WHILE")
    qgraph.init("cuda")


def test_device_loop_is_one_graph_launch_per_call(cuda):
    qgraph.init("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error", qgraph.FallbackWarning)
        counter = qgraph.from_numpy(np.array([50], np.int32))
        tick(counter, qgraph.ndarray(qgraph.i32, (1,)))
    assert counter.to_numpy()[0] == 0
    assert tick.stats.replays == 1
    assert not tick.stats.host_loop
    assert tick.stats.graph_nodes == 1 + 2  # the task, the slot writer and the condition kernel


def test_graphs_off_runs_an_eager_host_loop(cuda, monkeypatch):
    monkeypatch.setenv("QGRAPH_GRAPHS", "0")
    qgraph.init("cuda")
    tick._fallback_warned = False
    with pytest.warns(qgraph.FallbackWarning, match="graphs are off"):
        counter = qgraph.from_numpy(np.array([4], np.int32))
        tick(counter, qgraph.ndarray(qgraph.i32, (1,)))
    assert counter.to_numpy()[0] == 0
    assert tick.stats.host_loop and not tick.stats.used_graph
    monkeypatch.delenv("QGRAPH_GRAPHS")
    qgraph.init("cuda")
