"""kernel.inspect: the generated code of one specialisation, per task, without running it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import qgraph
from qgraph.backends import inspection


@qgraph.kernel
def scale_then_add(x, y, a: float):
    for i in range(x.shape[0]):
        x[i] = x[i] * a
    y[0] = y[0] + 7.0
    for i in range(y.shape[0]):
        y[i] += x[i]


def arrays(n: int = 37):
    rng = np.random.default_rng(3)
    x0, y0 = rng.random(n), rng.random(n)
    return x0, y0, qgraph.from_numpy(x0), qgraph.from_numpy(y0)


def test_inspect_reports_every_task_with_its_generated_code(arch):
    x0, y0, x, y = arrays()
    code = scale_then_add.inspect(x, y, 2.0)
    assert isinstance(code, qgraph.KernelCode) and code.arch == arch
    assert code.signature == scale_then_add.compile(x, y, 2.0)
    assert [(t.index, t.kind, t.lineno) for t in code.tasks] == \
        [(t.index, t.kind, t.lineno) for t in scale_then_add.tasks] == \
        [(0, "parallel", 16), (1, "serial", 18), (2, "parallel", 19)]
    assert "* a" in code.tasks[0].python and "y[0] = y[0] + 7.0" in code.tasks[1].python
    assert "+= x[" in code.tasks[2].python
    for task in code.tasks:
        assert f"def {task.name}(" in task.python
    if arch == "cuda":
        for task in code.tasks:
            assert f".entry {task.entry}(" in task.ptx and task.ptx.rstrip().endswith("}")
            assert task.ptx.rstrip() in code.ptx
            assert task.resources["registers"] > 0 and task.resources["max_threads_per_block"] >= 1
            assert (task.sass is None) == ("sass" in task.missing)
    else:
        assert {t.unit for t in code.tasks} == {0, 1, 2}
    report = str(code)
    assert report.startswith(f"kernel scale_then_add on {arch} for (float64[1d], float64[1d], float)")
    for task in code.tasks:
        assert f"=== task {task.index}: {task.kind}, line {task.lineno}" in report and task.python in report
    assert "def __call__(_qg_self, x, y, a, *, stream=None)" in code.host["binder"]
    assert "def launch(" in code.host["launch"] and "def _qg_bounds(x, y, a)" in code.host["loop bounds"]


def test_inspect_neither_runs_the_kernel_nor_changes_its_stats(arch):
    x0, y0, x, y = arrays()
    before = dataclasses.replace(scale_then_add.stats)
    scale_then_add.inspect(x, y, a=3.0)
    assert scale_then_add.stats == before
    np.testing.assert_array_equal(x.to_numpy(), x0)
    np.testing.assert_array_equal(y.to_numpy(), y0)
    scale_then_add(x, y, 3.0)  # the call after it compiles (or finds) and counts its signature as ever
    assert scale_then_add.stats.specialisations == before.specialisations + 1
    expected_y = y0.copy()
    expected_y[0] += 7.0
    np.testing.assert_allclose(x.to_numpy(), x0 * 3.0)
    np.testing.assert_allclose(y.to_numpy(), expected_y + x0 * 3.0)


def test_inspect_raises_what_a_call_raises(arch):
    x0, y0, x, y = arrays()
    for bad in [(x, y), (x, y, "two"), (x, 2.0, 2.0)]:
        with pytest.raises(Exception) as called:
            scale_then_add(*bad)
        with pytest.raises(type(called.value)) as inspected:
            scale_then_add.inspect(*bad)
        as_a_call = str(inspected.value).replace("scale_then_add.inspect()", "scale_then_add()")
        assert as_a_call == str(called.value)
    with pytest.raises(qgraph.QgraphSyntaxError, match="bounds cannot be evaluated"):
        scale_then_add.inspect(qgraph.from_numpy(np.zeros(())), y, 1.0)


def test_cpu_inspect_shows_the_llvm_and_assembly_of_each_unit(tmp_path, monkeypatch):
    """A fresh cache directory: this process emits the units (lang.llvm.parallel), so it holds their
    IR; after init() the same code comes from the compile cache, which keeps none: inspect says so."""
    monkeypatch.setenv("QGRAPH_CACHE_DIR", str(tmp_path))
    qgraph.init("cpu")
    try:
        _, _, x, y = arrays()
        code = scale_then_add.inspect(x, y, 2.0)
        qgraph.init("cpu")
        loaded = scale_then_add.inspect(x, y, 2.0)
    finally:
        monkeypatch.undo()
        qgraph.init("cpu")
    for task in code.tasks:
        assert task.missing == {} and "define " in task.llvm and task.name in task.llvm
        assert len(task.asm.splitlines()) > 10
    assert "llvm: " in str(code)
    for task in loaded.tasks:
        assert task.llvm is task.asm is None and "empty QGRAPH_CACHE_DIR" in task.missing["llvm"]
        assert task.python == code.tasks[task.index].python
    assert "--- llvm: none, " in str(loaded) and "empty QGRAPH_CACHE_DIR" in str(loaded)


def test_sass_is_split_per_function_from_the_disassemblers_listing(tmp_path, monkeypatch):
    """cuobjdump -sass lists every function of a cubin under `Function : <name>` (a stand-in tool
    here, printing that layout): each kernel gets its own section; without a tool, the reason."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert inspection.sass_listing(b"\x7fELF") == \
        ({}, "neither cuobjdump nor nvdisasm is on PATH (both come with the CUDA toolkit)")
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\nprintf '\\tcode for sm_90\\n\\t\\tFunction : _Z1aPf\\n        /*0000*/ LDC R1 ;\\n"
                    "\\t\\tFunction : _Z1bPf\\n        /*0000*/ EXIT ;\\n'\n")
    tool.chmod(0o755)
    found, why = inspection.sass_listing(b"\x7fELF")
    assert why == "" and sorted(found) == ["_Z1aPf", "_Z1bPf"]
    assert "LDC R1" in found["_Z1aPf"] and "EXIT" not in found["_Z1aPf"] and "EXIT" in found["_Z1bPf"]


def test_cuda_task_code_splits_the_ptx_per_entry_offline(tmp_path):
    """The CUDA half of inspect without a device: a specialisation compiled for sm_90 (NVVM,
    ptxas and nvlink when present) gives each task its own PTX entry."""
    from qgraph.backends.inspection import offline_key
    from qgraph.bench.cuda_compile import offline_link
    from qgraph.compiler import cuda_program, numba_adapter
    from qgraph.compiler.code_cache import CodeCache

    try:
        import numba.cuda  # noqa: F401
        from numba import cuda, types

        cuda.compile(lambda v: None, (types.float64[::1],), device=False, abi="numba", cc=(9, 0))
    except Exception as e:  # no NVVM / NVRTC here (numba-cuda itself, before any qgraph code)
        pytest.skip(f"numba-cuda cannot compile here: {type(e).__name__}: {str(e)[:120]}")
    key = offline_key((np.zeros(8), np.zeros(8), 2.0))
    with numba_adapter.assumed_compute_capability((9, 0)):
        program = cuda_program.build_program(scale_then_add.source, key, (9, 0),
                                             lambda ptx: offline_link(ptx, (9, 0)), CodeCache(str(tmp_path)),
                                             fresh=True)
    code = inspection.cuda_code(scale_then_add, key, program, None, {}, "no device")
    assert [t.index for t in code.tasks] == [0, 1, 2]
    entries = [t.entry for t in code.tasks]
    assert len(set(entries)) == 3
    for task in code.tasks:
        assert f".entry {task.entry}(" in task.ptx and task.ptx.rstrip().endswith("}")
        assert sum(f".entry {e}(" in task.ptx for e in entries) == 1
        assert "griddepcontrol.wait" in task.ptx  # sm_90: the variant without the trigger
        assert task.missing["resources"] == "no device"
        assert (task.sass is None) == ("sass" in task.missing)
    assert "x[" in code.tasks[0].python and "=== task 2: parallel, line 19" in str(code)
