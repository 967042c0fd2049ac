"""The compute benchmark's kernels agree with their hand-written twins (timings are not asserted)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from qgraph.bench import compute_suite
from qgraph.bench.compute_sources import CUDA_SOURCE, KERNELS_SOURCE

WORKLOADS = ["stencil 2-D 5-point", "stencil 3-D 7-point", "N-body all pairs", "N-body all pairs (fast math)"]


def test_cpu_rows_agree_with_numba(cpu, tmp_path):
    rows = compute_suite.cpu_rows(quick=True, repeat=1, sizes=(34, 10, 64))
    assert [r["workload"] for r in rows] == WORKLOADS
    assert [r["size"] for r in rows] == ["34^2", "10^3", "N=64", "N=64"]
    for r in rows:
        figures = {f"{side}_ms{part}" for side in ("qgraph", "numba") for part in ("", "_min", "_median", "_max")}
        assert set(r) == {"workload", "size", "speed_vs_numba", "max_abs_error", "agree"} | figures
        assert r["qgraph_ms"] > 0 and r["numba_ms"] > 0 and r["speed_vs_numba"] > 0
        for side in ("qgraph", "numba"):  # the best round is the figure, with the spread of the rounds beside it
            assert r[f"{side}_ms"] == r[f"{side}_ms_min"] <= r[f"{side}_ms_median"] <= r[f"{side}_ms_max"]
        assert r["agree"] and r["max_abs_error"] <= (1e-5 if "fast" in r["workload"] else 1e-6), r
    assert compute_suite.mismatches([], rows) == []
    text = compute_suite.table([], rows)
    assert "speed vs hand-written numba" in text and "MISMATCH" not in text
    if _has("matplotlib"):
        compute_suite.plot([], rows, str(tmp_path / "compute.png"))
        assert (tmp_path / "compute.png").stat().st_size > 0


def test_a_disagreeing_row_is_flagged():
    row = {"workload": "saxpy", "size": "2^10", "qgraph_us": 1.0, "hand_us": 1.0, "speed_vs_hand": 1.0,
           "max_abs_error": 0.5}
    row["agree"] = compute_suite.agree(row)
    assert not row["agree"]
    assert compute_suite.mismatches([row], []) == ["saxpy 2^10"]
    assert "MISMATCH" in compute_suite.table([row], [])


def test_a_taichi_row_names_its_twin_and_steps():
    row = {"workload": "N-body 2-D, Taichi spelling (fast math)", "size": "N=3000", "qgraph_us": 150.0,
           "hand_us": 144.0, "speed_vs_hand": 0.96, "max_abs_error": 1e-7, "vs": "hand-tuned",
           "steps_per_second": 6667.0, "hand_steps_per_second": 6944.0}
    row["agree"] = compute_suite.agree(row)
    text = compute_suite.table([row], [])
    assert row["agree"] and "hand-tuned" in text and "(6,667 vs 6,944 steps/s)" in text and "CUDA C++  " not in text


def test_the_gpu_rows_of_taichis_nbody_agree(cuda):
    """The natural and the hand-tuned spelling give the same forces (timings not asserted)."""
    rows = compute_suite.gpu_rows(quick=True, budget=0.001, repeat=1, only=("taichi",))
    assert [r["workload"] for r in rows] == ["N-body 2-D, Taichi spelling", "N-body 2-D, Taichi spelling (fast math)"]
    assert all(r["agree"] for r in rows), rows


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize("options", [(), ("--use_fast_math",)])
def test_the_hand_written_cuda_compiles(cuda_compiler, options):
    from qgraph.driver.nvrtc import compile_cubin

    assert len(compile_cubin(CUDA_SOURCE, "compute.cu", (9, 0), options)) > 1000


def test_machine_code_counts_without_a_gpu(cuda_compiler):
    """What benchmarks/machine_code.py does offline: qgraph's PTX for sm_90 beside NVRTC's."""
    from qgraph.backends import inspection
    from qgraph.bench.kernels import module_from_source
    from qgraph.compiler import ptx_stats

    mod = module_from_source("qgraph_bench_compute", KERNELS_SOURCE)
    (ours,) = inspection.offline_ptx(mod.stencil2d, (np.zeros((8, 8), np.float32),) * 2, (9, 0))
    hand = ptx_stats.nvrtc_ptx(CUDA_SOURCE, (9, 0))
    counts = {who: ptx_stats.ptx_counts(ptx_stats.entry_body(text, entry))
              for who, text, entry in (("qgraph", ours, None), ("hand", hand, "stencil2d"))}
    for c in counts.values():
        assert c["ptx"] > 10 and c["f64"] == 0 and c["int div"] == 0
    assert "griddepcontrol.wait" in ours  # as the CUDA backend loads it on sm_90
    if shutil.which("ptxas"):
        asm = ptx_stats.assembled(hand, "sm_90", "stencil2d")
        assert asm["regs"] > 0 and asm["spill B"] == 0
