"""qgraph.benchmark and the suite's table / JSON / plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

import qgraph
from qgraph.bench import suite


@qgraph.kernel(cuda_graph=True)
def two_tasks(x, y):
    for i in range(x.shape[0]):
        x[i] += 1.0
    for i in range(y.shape[0]):
        y[i] = x[i] * 2.0


def test_benchmark_result_on_every_arch(arch):
    x, y = qgraph.ndarray(qgraph.f64, (64,)), qgraph.ndarray(qgraph.f64, (64,))
    result = qgraph.benchmark(two_tasks, x, y, repeat=3, round_seconds=0.001)
    expected = {"cpu"} if arch == "cpu" else {"eager", "graph"}
    assert set(result.us_per_call) == expected
    assert all(v > 0 for v in result.us_per_call.values())
    text = str(result)
    assert "two_tasks" in text and "us/call" in text
    assert result.rounds == 3 and result.calls_per_round >= 1
    assert y.to_numpy()[0] == 2.0 * x.to_numpy()[0]  # the calls really ran


def test_benchmark_graph_is_faster_than_eager_on_gpu(cuda):
    x, y = qgraph.ndarray(qgraph.f64, (64,)), qgraph.ndarray(qgraph.f64, (64,))
    result = qgraph.benchmark(two_tasks, x, y, repeat=5)
    assert result.speedup() > 0  # a ratio, reported; the timing itself is the benchmark's job


def test_benchmark_rejects_bad_arguments(cpu):
    with pytest.raises(TypeError, match="takes a @qgraph.kernel"):
        qgraph.benchmark(lambda: None)
    with pytest.raises(ValueError, match="modes must be"):
        qgraph.benchmark(two_tasks, np.zeros(2), np.zeros(2), modes=("fast",))


def _report():
    rows = []
    for mode, us in (("floor", 7.0), ("graph", 7.5), ("eager", 30.0)):
        for t in (1, 8):
            rows.append(suite.Row("launch", mode, t, 256, us * t, 7.0 * t))
    for mode, us, raw in (("raw WHILE node", 12.0, 12.0), ("device loop", 12.5, 12.0),
                          ("raw host loop", 20.0, 20.0), ("host fallback", 21.0, 20.0)):
        rows.append(suite.Row("loop", mode, 8, 256, us, raw))
    headline = {"floor_launch_sync_us": 12.0, "graph_launch_sync_us": 13.0, "launch_sync_ratio": 13 / 12,
                "cuda_core_launch_us": 3.0, "eager_per_task_us": 3.5, "eager_per_task_ratio": 3.5 / 3,
                "graph_build_ms": 0.7, "graph_call_host_us": 3.0}
    return suite.Report("cuda", {"device": "Test GPU", "compute_capability": "9.0", "driver_version": "13.0"},
                        rows, headline)


def test_table_json_and_plot(tmp_path):
    report = _report()
    text = suite.table(report)
    assert "Test GPU" in text and "graph" in text and "(1.07)" in text
    assert "device loop is 1.68x faster than the host fallback" in text
    data = report.to_json()
    json.dumps(data)
    graph_row = next(r for r in data["rows"] if r["mode"] == "graph" and r["tasks"] == 1)
    assert graph_row["ratio"] == pytest.approx(7.5 / 7.0)
    pytest.importorskip("matplotlib")
    path = tmp_path / "plot.png"
    suite.plot(report, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_busy_machine_is_told_by_the_spread_of_the_rounds():
    from qgraph.tools.timing import BUSY_MEDIAN_OVER_MIN, busy_warning, is_busy, spread_of

    assert spread_of([3.0, 1.0, 2.0]) == (1.0, 2.0, 3.0)
    assert not is_busy(spread_of([4.5, 4.6, 4.4, 4.7, 4.5]))  # an idle machine: a few percent
    assert is_busy(spread_of([4.5, 7971.0, 7960.0, 4.6, 7990.0]))  # the demo's 7,971 us for a 4.5 us call
    assert not is_busy(spread_of([4.5, 4.6, 4.5, 4.4, 9.0]))  # one round hit: the median stands
    assert is_busy((1.0, BUSY_MEDIAN_OVER_MIN * 1.01, 2.0)) and not is_busy((1.0, BUSY_MEDIAN_OVER_MIN * 0.99, 9.0))
    assert "the machine was busy" in busy_warning(["graph (8 tasks)"])
    assert "and 2 more" in busy_warning([f"figure {k}" for k in range(8)])


def test_busy_figures_are_found_in_a_report_at_any_depth():
    from qgraph.tools.timing import busy_figures

    tight = {"us": 4.5, "us_min": 4.4, "us_max": 4.7}
    loaded = {"us": 7971.0, "us_min": 4.5, "us_max": 7990.0}
    data = {"cpu": [dict(workload="saxpy", **tight), dict(workload="stencil", **loaded)],
            "reductions": [{"op": "sum", "qgraph": loaded, "CUDA C++": tight}],
            "headline": {"graph_us": 4.5, "graph_us_min": 4.4, "graph_us_max": 60.0}}  # one slow round
    found = [label for section, rows in data.items() for label in busy_figures(rows, section)]
    assert found == ["cpu stencil us", "reductions sum qgraph us"]


def test_the_report_json_carries_spreads_and_names_busy_figures():
    report = suite.Report("cpu", {})
    report.structs = [{"mode": "struct", "us": 40.0, "us_min": 2.6, "us_max": 45.0, "ratio": 1.0}]
    data = report.to_json()
    assert data["busy"] == ["structs struct us"]
    assert "structs struct us: the median round took over" in suite.table(report)
    report.structs[0]["us"] = 2.7
    assert report.to_json()["busy"] == [] and "warning" not in suite.table(report)


def test_benchmark_result_warns_when_its_own_spread_says_the_figure_is_unreliable():
    from qgraph.tools.timing import Spread

    loaded = qgraph.BenchmarkResult("graph", "cpu", {"cpu": 7971.0}, calls_per_round=10, rounds=7,
                                    spread={"cpu": Spread(4.5, 7971.0, 8100.0)})
    assert loaded.busy == ["cpu"] and "warning: cpu: the median round took over" in str(loaded)
    quiet = qgraph.BenchmarkResult("graph", "cpu", {"cpu": 4.5}, calls_per_round=10, rounds=7,
                                   spread={"cpu": Spread(4.4, 4.5, 4.7)})
    assert quiet.busy == [] and "warning" not in str(quiet) and "rounds 4.40 to 4.70 us" in str(quiet)


def test_benchmark_results_carry_their_spread(arch):
    from qgraph.bench.kernels import kernels_for

    module = kernels_for(2)
    arrays = [qgraph.ndarray(qgraph.f32, (256,)) for _ in range(2)]
    result = qgraph.benchmark(module.graph, *arrays, 256, 1.0, repeat=3)
    for mode, (low, median, high) in result.spread.items():
        assert low <= median <= high and median == result.us_per_call[mode]
    assert "rounds" in str(result)
