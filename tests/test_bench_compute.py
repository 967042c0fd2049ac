"""The compute benchmark's kernels agree with their hand-written twins (timings are not asserted)."""

from __future__ import annotations

import pytest

from qgraph.bench import compute_suite
from qgraph.bench.compute_sources import CUDA_SOURCE


def test_cpu_rows_agree_with_numba(cpu):
    rows = compute_suite.cpu_rows(quick=True, repeat=1)
    assert [r["workload"] for r in rows] == ["stencil 2-D 5-point", "stencil 3-D 7-point", "N-body all pairs",
                                             "N-body all pairs (fast math)"]
    for r in rows:
        assert r["qgraph_ms"] > 0 and r["numba_ms"] > 0
        assert r["max_abs_error"] <= (1e-5 if "fast" in r["workload"] else 1e-6), r
    assert "speed vs hand-written numba" in compute_suite.table([], rows)


@pytest.mark.parametrize("options", [(), ("--use_fast_math",)])
def test_the_hand_written_cuda_compiles(options):
    from qgraph.driver.nvrtc import compile_cubin, version

    try:
        version()
    except Exception as e:  # no cuda-bindings or no NVRTC library on this machine
        pytest.skip(f"NVRTC unavailable: {type(e).__name__}: {e}")
    assert len(compile_cubin(CUDA_SOURCE, "compute.cu", (9, 0), options)) > 1000
