"""The stable-fluids pressure baseline (qgraph.bench.fluids_pressure) without a GPU: its CUDA C++
compiles with NVRTC, the sweeps alternate the buffers as the example does, and the unroll
benchmark that times it imports (timings are the GPU host's, never asserted)."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from qgraph.bench import fluids_pressure

ROOT = pathlib.Path(__file__).resolve().parent.parent


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
    assert hopper.count("griddepcontrol.wait") == 2 and hopper.count("griddepcontrol.launch_dependents") == 1
    assert "griddepcontrol" not in ampere
    assert ".f64" not in hopper  # float32 throughout, as the qgraph kernels on float32 arrays


def test_the_sweeps_alternate_the_buffers_as_the_example_does():
    assert fluids_pressure.sweep_buffers("p", "q", 4) == [("p", "q"), ("q", "p"), ("p", "q"), ("q", "p")]
    assert fluids_pressure.sweep_buffers("p", "q", 1) == [("p", "q")]


def test_the_unroll_benchmark_imports_with_its_baseline_rows():
    spec = importlib.util.spec_from_file_location("unroll_loops_bench", ROOT / "benchmarks" / "unroll_loops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.HAND_FLUIDS == "CUDA C++ unrolled graph"
    assert callable(module.fluid_rows) and callable(module._hand_sweeps)
