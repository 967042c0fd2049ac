"""The stable-fluids pressure baseline (qgraph.bench.fluids_pressure) without a GPU: its CUDA C++
compiles with NVRTC, the sweeps alternate the buffers as the example does, and the unroll
benchmark that times it imports (timings are the GPU host's, never asserted)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers.paths import ROOT

import qgraph
from qgraph.bench import fluids_pressure
from qgraph.compiler import ptx_text


def _require_nvrtc() -> None:
    """Skip only where the NVRTC library itself is missing (found before anything compiles)."""
    from cuda.pathfinder import DynamicLibNotFoundError, load_nvidia_dynamic_lib

    try:
        load_nvidia_dynamic_lib("nvrtc")
    except DynamicLibNotFoundError as e:
        pytest.skip(f"NVRTC is not installed here: {e}")


def test_nvrtc_compiles_the_sweeps_with_programmatic_waits_on_hopper_only():
    from qgraph.driver.nvrtc import compile_cubin, compile_ptx

    _require_nvrtc()
    source = fluids_pressure.CUDA_SOURCE
    for cc in [(8, 0), (9, 0)]:
        assert len(compile_cubin(source, "fluids.cu", cc)) > 1000
    hopper, ampere = compile_ptx(source, "fluids.cu", (9, 0)), compile_ptx(source, "fluids.cu", (8, 0))
    for entry in fluids_pressure.ENTRIES:
        assert f".entry {entry}(" in hopper and f".entry {entry}(" in ampere
    assert hopper.count("griddepcontrol.wait") == 5 and hopper.count("griddepcontrol.launch_dependents") == 2
    for entry, first, then in [("pressure_sweep_early", "launch_dependents", "wait"),
                               ("pressure_sweep_late", "wait", "launch_dependents")]:
        text = ptx_text.entry_text(hopper, entry)
        assert text.index(f"griddepcontrol.{first}") < text.index(f"griddepcontrol.{then}")
    assert "griddepcontrol" not in ampere
    assert ".f64" not in hopper  # float32 throughout, as the qgraph kernels on float32 arrays


def test_the_diagnostic_sweeps_differ_from_the_baseline_only_as_named():
    """`aliased`: plain loads (no ld.global.nc); `qgraph_params`: those with qgraph's parameter block
    for (p, p_new, div) of 2-D float32 arrays (5 bounds and 3 numba array structs, 256 bytes)."""
    from qgraph.compiler.ptx_text import entry_text, ptx_entries
    from qgraph.driver.nvrtc import compile_ptx

    _require_nvrtc()
    ptx = compile_ptx(fluids_pressure.CUDA_SOURCE, "fluids.cu", (9, 0))
    sizes = {entry: sum(params) for entry, params in ptx_entries(ptx).items()}
    v = fluids_pressure.VARIANTS
    assert sizes[v["baseline"]] == sizes[v["aliased"]] == 32 and sizes[v["qgraph_params"]] == 256
    loads = {name: entry_text(ptx, entry) for name, entry in v.items()}
    assert loads["baseline"].count("ld.global.nc.f32") == 5
    assert "ld.global.nc" not in loads["aliased"] and loads["aliased"].count("ld.global.f32") == 5
    assert "ld.global.nc" not in loads["qgraph_params"] and loads["qgraph_params"].count("ld.global.f32") == 5


def test_the_sweeps_alternate_the_buffers_as_the_example_does():
    assert fluids_pressure.sweep_buffers("p", "q", 4) == [("p", "q"), ("q", "p"), ("p", "q"), ("q", "p")]
    assert fluids_pressure.sweep_buffers("p", "q", 1) == [("p", "q")]


def _numpy_sweeps(div: np.ndarray, sweeps: int) -> np.ndarray:
    """The sweeps in NumPy, float32 in the example's order of operations (so the same bits)."""
    p = np.zeros_like(div)
    nx, ny = div.shape
    i, j = np.meshgrid(np.arange(nx), np.arange(ny), indexing="ij")
    for _ in range(sweeps):
        total = p[np.maximum(i - 1, 0), j] + p[np.minimum(i + 1, nx - 1), j] + p[i, np.maximum(j - 1, 0)]
        p = np.float32(0.25) * (total + p[i, np.minimum(j + 1, ny - 1)] - div)
    return p


def test_the_hand_written_graph_gives_qgraphs_bits(arch):
    """The example's pressure solve gives NumPy's bits on every arch; on CUDA every variant of the
    baseline gives them too, on a grid that is no multiple of its 32 x 8 block."""
    from qgraph.examples.stable_fluids_kernels import pressure_scalar

    shape, sweeps = (40, 20), 6
    div_host = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    div = qgraph.from_numpy(div_host)
    p, p_new = qgraph.ndarray(qgraph.f32, shape), qgraph.ndarray(qgraph.f32, shape)
    pressure_scalar(p, p_new, div, qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,)), sweeps)
    ours, reference = p.to_numpy(), _numpy_sweeps(div_host, sweeps)
    assert np.array_equal(ours, reference)
    if arch != "cuda":
        return
    device = qgraph.runtime.STATE.cuda
    for option in ({}, {"programmatic": False}, {"early": True}, {"variant": "aliased"},
                   {"variant": "qgraph_params"}):
        hand = fluids_pressure.UnrolledSweeps(device, qgraph.ndarray(qgraph.f32, shape),
                                              qgraph.ndarray(qgraph.f32, shape), div, sweeps, **option)
        hand.launch()
        assert np.array_equal(hand.result.to_numpy(), ours), option


def test_the_baseline_names_mismatched_arrays(cuda):
    a, b = qgraph.ndarray(qgraph.f32, (8, 4)), qgraph.ndarray(qgraph.f32, (4, 8))
    with pytest.raises(ValueError, match="p, p_new and div must be 2-D arrays of one shape"):
        fluids_pressure.UnrolledSweeps(qgraph.runtime.STATE.cuda, a, b, a, 2)
    with pytest.raises(ValueError, match="variant must be one of baseline, early, aliased, qgraph_params"):
        fluids_pressure.UnrolledSweeps(qgraph.runtime.STATE.cuda, a, a, a, 2, variant="fast")


def test_the_unroll_benchmark_imports_with_its_baseline_rows():
    spec = importlib.util.spec_from_file_location("unroll_loops_bench", ROOT / "benchmarks" / "unroll_loops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.HAND_FLUIDS == "CUDA C++ unrolled graph"
    assert callable(module.fluid_rows) and callable(module._hand_sweeps)
