"""CUDA task kernels through qgraph's emitter and NVVM (compiler.cuda_emitted), without numba-cuda:
the gallery programs' tasks are all covered, in numba-cuda's parameter layout; offline, their PTX
has numba-cuda's entries and sizes; on a GPU, results equal numba-cuda's, and what the emitter
does not cover (fast math) still compiles, through numba-cuda."""

from __future__ import annotations

import re

import numpy as np
import pytest

import qgraph
from qgraph.backends.inspection import offline_key
from qgraph.compiler import cuda_emitted, cuda_program, ptx_text
from qgraph.examples import mpm88, poisson, stable_fluids
from qgraph.lang.lower.lowering import lower_funcs

IR_VERSION = (2, 0, 3, 2)  # NVVM's, as metadata: the emitter needs no libnvvm


def _gallery():
    f, z, i = np.zeros((16, 16), np.float32), np.zeros(1, np.float32), np.zeros(1, np.int32)
    s = mpm88.initial_state(64)
    n = 8
    u, v, c = np.zeros((n + 1, n), np.float32), np.zeros((n, n + 1), np.float32), np.zeros((n, n), np.float32)
    return [(poisson.jacobi_poisson, (f, f.copy(), f.copy(), z, i, i.copy(), 1.0, 1e-5, 10)),
            (mpm88.substep_scalar, (s.x, s.v, s.C, s.J, s.grid_v, s.grid_m)),
            (stable_fluids.advect_scalar, (u, v, c, u.copy(), v.copy(), c.copy(), c.copy(), i, 0.1, 1.0)),
            (stable_fluids.pressure_scalar, (c, c.copy(), c.copy(), i, i.copy(), 30)),
            (stable_fluids.project_scalar, (u, v, c, u.copy(), v.copy(), c.copy(), c.copy()))]


def _codes(kernel, args):
    codes = cuda_program.task_codes(kernel.source, offline_key(args))
    return codes, lower_funcs(codes.symbols)


@pytest.mark.parametrize("case", range(5), ids=["poisson", "mpm88", "advect", "pressure", "project"])
def test_every_task_of_the_gallery_programs_is_emitted_in_numbas_parameter_layout(case):
    kernel, args = _gallery()[case]
    codes, funcs = _codes(kernel, args)
    emitted = cuda_emitted.emitted_kernels(codes.flat.src, codes.codes, codes.orders, codes.types, funcs,
                                           codes.flat.kinds, IR_VERSION)
    assert len(emitted) == len(codes.codes) and len({k.name for k in emitted}) == len(emitted)
    for kernel, code, order, types in zip(emitted, codes.codes, codes.orders, codes.types):
        assert kernel.param_sizes == [8] * len(code.bound_params) + [s for k in order for s in types[k].param_sizes]
        assert f'@"{kernel.name}"' in kernel.ir and '!"kernel"' in kernel.ir and "nvvmir.version" in kernel.ir
        assert "fneg" not in kernel.ir  # NVVM reads LLVM 7's dialect


def _entries(ptx_list):
    return {name: sizes for _, ptx in ptx_list for name, sizes in ptx_text.ptx_entries(ptx).items()}


@pytest.mark.parametrize("case", range(5), ids=["poisson", "mpm88", "advect", "pressure", "project"])
def test_the_emitted_ptx_has_numba_cudas_entries_and_code_of_its_size(case, sm90, monkeypatch):
    kernel, args = _gallery()[case]
    codes, funcs = _codes(kernel, args)
    common = (codes.flat.src, codes.codes, codes.orders, codes.types, funcs, (9, 0), codes.flat.kinds)
    emitted = cuda_emitted.emitted_ptx(*common, False, False)
    numba = cuda_program.compile_ptx(*common)
    assert emitted[2] == numba[2]  # parameter block sizes
    e_entries, n_entries = _entries(emitted[0]), _entries(numba[0])
    for mine, theirs in zip(emitted[1], numba[1]):
        assert e_entries[mine] == n_entries[theirs]
        count = [len(re.findall(r"^\s+[a-z@]", body, re.M)) for body in
                 (ptx_text_body(emitted[0], mine), ptx_text_body(numba[0], theirs))]
        assert count[0] <= 1.1 * count[1] + 2, (mine, count)  # never much more code than numba-cuda's


def ptx_text_body(ptx_list, entry: str) -> str:
    from qgraph.compiler.ptx_stats import entry_body

    return next(entry_body(ptx, entry) for _, ptx in ptx_list if entry in ptx_text.ptx_entries(ptx))


def _run_poisson_and_fluids() -> list[np.ndarray]:
    solver = poisson.Solver(poisson.source(48))
    solver(1e-4, 60)
    fluid = stable_fluids.bench_state(24)
    step = stable_fluids.bench_step("scalar", fluid)
    for _ in range(3):
        step()
    return [solver.u.to_numpy(), fluid.u.to_numpy(), fluid.v.to_numpy(), fluid.dye.to_numpy()]


def test_emitted_kernels_compute_what_numba_cudas_compute(cuda, monkeypatch, tmp_path):
    monkeypatch.setenv("QGRAPH_CACHE_DIR", str(tmp_path / "emitted"))
    qgraph.init("cuda")
    cuda_emitted.LAST_FALLBACK.clear()
    mine = _run_poisson_and_fluids()
    assert cuda_emitted.LAST_FALLBACK == []  # every specialisation emitted
    monkeypatch.setenv("QGRAPH_EMITTER", "0")
    monkeypatch.setenv("QGRAPH_CACHE_DIR", str(tmp_path / "numba"))
    qgraph.init("cuda")
    theirs = _run_poisson_and_fluids()
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_what_the_emitter_does_not_cover_compiles_through_numba_cuda(cuda):
    @qgraph.kernel(fast_math=True)
    def scale(x, a: float):
        for i in range(x.shape[0]):
            x[i] = x[i] * a

    cuda_emitted.LAST_FALLBACK.clear()
    x = qgraph.from_numpy(np.arange(8, dtype=np.float32))
    scale(x, 2.0)
    np.testing.assert_array_equal(x.to_numpy(), np.arange(8, dtype=np.float32) * 2)
    assert cuda_emitted.LAST_FALLBACK and "fast math" in cuda_emitted.LAST_FALLBACK[0]
