"""First calls in fresh processes (bench.fresh_process, bench.first_calls) and the tables of cold and warm ones
(bench.compile_time, bench.cpu): cold is really cold, warm really loads, both are labelled."""

from __future__ import annotations

import pytest

import qgraph
from qgraph.bench import compile_time, cpu, fresh_process
from qgraph.bench.kernels import kernels_for


@pytest.fixture
def cpu_arch_cache_filled(cpu):
    """This process's compile cache (QGRAPH_CACHE_DIR) holds the 2-task kernel."""
    arrays = [qgraph.ndarray(qgraph.f32, (256,)) for _ in range(2)]
    kernels_for(2).graph(*arrays, 256, 1.0)


def test_a_cold_process_compiles_and_the_warm_one_after_it_loads(cpu_arch_cache_filled):
    cold, warm = fresh_process.cold_and_warm(["kernel", "cpu", "2"], runs=1)
    # the caller's cache already holds this kernel: a cold process that used it would have loaded
    assert cold[0]["loaded_from_cache"] is False and warm[0]["loaded_from_cache"] is True
    assert cold[0]["seconds"] > 0 and warm[0]["seconds"] > 0
    assert 20 < cold[0]["peak_mb"] < 4000 and 20 < warm[0]["peak_mb"] < 4000


def test_compile_time_table_labels_cold_warm_and_memory():
    row = {
        "arch": "cpu",
        "kernel": "8 tasks",
        "tasks": 8,
        "runs": 3,
        "cold_s": 0.81,
        "cold_s_min": 0.8,
        "cold_s_max": 0.9,
        "warm_s": 0.28,
        "warm_s_min": 0.27,
        "warm_s_max": 0.3,
        "cold_peak_mb": 159.0,
        "warm_peak_mb": 142.0,
        "warm_loaded_from_cache": True,
    }
    text = compile_time.table([row])
    header, line = text.strip().splitlines()[1:]
    assert header.split() == ["arch", "kernel", "cold", "s", "warm", "s", "peak", "MB", "cold", "peak", "MB", "warm"]
    assert line.split() == ["cpu", "8", "tasks", "0.81", "0.28", "159", "142"]
    assert "cold: empty cache directories" in text and "median of 3" in text
    with_numba = dict(row, numba_cold_s=0.45, numba_warm_s=0.1, warm_loaded_from_cache=False)
    text = compile_time.table([with_numba])
    assert "numba cold s" in text and "numba warm s" in text and "0.45" in text
    assert "the warm process compiled" in text


def test_cpu_first_call_table_has_cold_and_warm_columns_for_qgraph_and_numba():
    row = {
        "workload": "saxpy",
        "runs": 1,
        "qgraph_cold_s": 0.46,
        "qgraph_warm_s": 0.15,
        "numba_cold_s": 0.31,
        "numba_warm_s": 0.1,
    }
    lines = cpu.first_call_table([row]).strip().splitlines()
    assert "fresh process" in lines[0] and "cold: empty cache directories" in lines[0]
    assert lines[1].split() == ["workload", "qgraph", "cold", "qgraph", "warm", "numba", "cold", "numba", "warm"]
    assert lines[2].split() == ["saxpy", "0.46", "0.15", "0.31", "0.10"]
