"""python -m qgraph demo / bench / info (CPU in CI; the GPU rows run on the GPU host)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import qgraph
from qgraph import cli


def test_demo_runs_and_checks_its_result(cpu, capsys):
    assert cli.main(["--arch", "cpu", "demo", "--n", "24", "--tol", "1e-3"]) == 0
    out = capsys.readouterr().out
    assert "2D heat diffusion" in out and "steps/s" in out and "converged" in out
    assert "result check: PASSED" in out
    assert "us/call" in out


def test_bench_on_cpu_writes_json_and_says_gpu_rows_need_a_gpu(cpu, tmp_path, capsys, monkeypatch):
    from qgraph.bench import suite

    real_run = suite.run
    monkeypatch.setattr(suite, "run", lambda quick, arch: real_run(quick=True, arch="cpu", cpu_sizes=(20_000,)))
    path = tmp_path / "bench.json"
    assert cli.main(["--arch", "cpu", "bench", "--quick", "--json", str(path), "--plot", str(tmp_path / "p.png")]) == 0
    out = capsys.readouterr()
    assert "GPU rows need a CUDA GPU" in out.out
    data = json.loads(path.read_text())
    assert data["arch"] == "cpu" and data["cpu"] and data["environment"]["versions"]["numba"]
    assert {"workload", "size", "qgraph_us", "numba_us", "ratio"} <= set(data["cpu"][0])
    row = data["cpu"][0]  # the spread of the rounds, and first calls split into cold and warm
    assert row["qgraph_us"] <= row["qgraph_us_max"] and row["numba_us"] <= row["numba_us_max"]
    assert row["qgraph_cold_s"] > 0 and row["qgraph_warm_s"] > 0 and row["numba_cold_s"] > 0
    assert "qgraph cold" in out.out and "qgraph warm" in out.out and "numba cold" in out.out


def test_info(cpu, capsys):
    assert cli.main(["--arch", "cpu", "info"]) == 0
    out = capsys.readouterr().out
    assert "arch: cpu" in out and "cache:" in out


def test_errors_are_one_line_with_exit_code_2(capsys):
    """Without a usable GPU, `--arch cuda` is one line on stderr (exit 2); --verbose re-raises."""
    from conftest import cuda_unavailable_reason

    from qgraph.cli import main

    if cuda_unavailable_reason() is None:
        pytest.skip("CUDA is usable here: no error to report")
    assert main(["--arch", "cuda", "demo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("qgraph: error: CUDA is not usable:") and "--verbose" in err[0]
    with pytest.raises(qgraph.QgraphError):
        main(["--arch", "cuda", "--verbose", "info"])
    qgraph.init("cpu")


def test_info_says_whether_cuda_is_usable_and_why_not(capsys):
    from conftest import cuda_unavailable_reason

    from qgraph.cli import main

    assert main(["--arch", "cpu", "info"]) == 0
    out = capsys.readouterr().out
    if cuda_unavailable_reason() is None:
        assert out.startswith("cuda: usable: ") and "compute capability" in out
    else:
        assert out.startswith("cuda: not usable: ") and "to fix: " in out
    assert "arch: cpu" in out


def test_module_entry_point():
    env = dict(os.environ, QGRAPH_ARCH="cpu")
    out = subprocess.run([sys.executable, "-m", "qgraph", "--help"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0 and "demo" in out.stdout and "bench" in out.stdout


def test_bench_on_gpu_quick_rows(cuda):
    from qgraph.bench import suite

    rows = suite.gpu_launch_rows(2, 256, budget=0.005, repeat=2)
    modes = {r.mode for r in rows}
    assert {"floor", "graph", "graph, 2 sets swapped", "eager", "numba dispatcher"} <= modes
    assert all(r.us > 0 and r.ratio > 0 for r in rows)
    loop = suite.gpu_loop_rows(1, 50, budget=0.005, repeat=2)
    assert {r.mode for r in loop} == {"raw WHILE node", "device loop", "device loop, no guard", "raw host loop",
                                      "host fallback"}
    from qgraph.bench import nested_loops

    nested = nested_loops.rows(budget=0.005, repeat=2)
    assert [r["mode"] for r in nested] == ["raw nested WHILE", "qgraph nested loops"]
    assert all(r["us"] > 0 for r in nested) and nested_loops.two_level.stats.iterations == (20, 50)
    qgraph.init("cuda")
