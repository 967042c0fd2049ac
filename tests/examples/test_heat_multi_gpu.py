"""The row-decomposed heat solve over torch.distributed: gloo on the CPU, NCCL on 2 GPUs.

Every run is checked against a single-process NumPy solve of the whole grid (the sweeps are the
same arithmetic in the same order, so the fields agree to the last bit on the CPU)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers.arch import need_gpus
from helpers.paths import EXAMPLES

import qgraph
from qgraph.examples import heat_multi_gpu as heat

# (torch itself is imported by the first test: not by every pytest-xdist worker's collection, 3.5 s)
if importlib.util.find_spec("torch") is None:
    pytest.skip("PyTorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.torch  # pip install ".[torch]"; the README's third command runs these
EXAMPLE = EXAMPLES / "heat_multi_gpu.py"


@pytest.fixture(scope="module")
def sweeps_in_the_compile_cache():
    """The CPU sweeps compiled once here, into the compile cache the spawned ranks share (through
    QGRAPH_CACHE_DIR): each rank loads them instead of compiling them again (2 and 3 ranks at once,
    each compile about as long as the rank's solve). Before NUMBA_NUM_THREADS changes below: numba
    re-reads it at a compile and refuses a value other than its running threads'."""
    pytest.importorskip("torch.distributed")
    qgraph.init("cpu")
    u, change = qgraph.from_numpy(np.zeros((4, 5))), qgraph.ndarray(qgraph.f64, (1,))
    for sweep in (heat.sweep_edges, heat.sweep_interior):
        qgraph.compile(sweep, u, u, change, 1, 3)


@pytest.fixture(scope="module", autouse=True)
def one_numba_thread_per_rank(sweeps_in_the_compile_cache):
    """The ranks share the machine's cores: on the CPU, each runs its sweeps on one numba thread, as
    torchrun's OMP_NUM_THREADS=1 does below (two threads per rank on 2 cores doubled the ranks' time).
    Spawned ranks read the variable at their start; this process's threads are already set."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NUMBA_NUM_THREADS", "1")
        yield


def converge_then_stop_earlier(steps_before: int, **kwargs) -> tuple:
    """On each rank: a solve to the tolerance, then one of fixed steps that stops `steps_before` steps
    earlier, in one launch (the ranks started once)."""
    converged = heat.run(**kwargs)
    kwargs.update(steps=converged.steps - steps_before, tol=0.0, gather=False)
    return converged, heat.run(**kwargs)


def reference(rows: int, cols: int, steps: int) -> np.ndarray:
    return heat.numpy_reference(heat.initial_field(rows, cols), steps)


def test_bands_cover_the_rows_unevenly_and_refuse_thin_ones():
    parts = heat.bands(37, 3)
    assert [(b.start, b.stop) for b in parts] == [(0, 13), (13, 25), (25, 37)]
    assert [(b.lo, b.hi) for b in parts] == [(2, 14), (1, 13), (1, 12)]  # the global edges stay fixed
    assert heat.bands(10, 1)[0].lo == 2 and heat.bands(10, 1)[0].hi == 10
    with pytest.raises(ValueError, match="leaves rank 2 2 rows, fewer than 2 to update; use at least 12 rows"):
        heat.bands(8, 3)


def test_two_gloo_ranks_match_numpy_on_the_cpu():
    r = heat.launch(2, "cpu", rows=37, cols=23, steps=30)
    assert (r.world, r.arch, r.mode, r.steps) == (2, "cpu", "eager", 30)
    np.testing.assert_allclose(r.u, reference(37, 23, 30), rtol=0, atol=1e-13)
    assert r.max_change > 0 and not r.converged


def test_three_ranks_stop_at_the_tolerance_on_the_cpu():
    r, early = heat.launch(3, "cpu", converge_then_stop_earlier, steps_before=10, rows=30, cols=12, steps=400,
                           tol=2e-4, check_every=10)
    assert r.converged and r.max_change < 2e-4 and r.steps % 10 == 0 and r.steps < 400
    np.testing.assert_allclose(r.u, reference(30, 12, r.steps), rtol=0, atol=1e-13)
    assert early.steps == r.steps - 10
    assert early.u is None and early.max_change >= 2e-4  # the check before the last one had not converged


def test_a_failing_rank_is_reported_not_hung():
    with pytest.raises(RuntimeError, match="rank 1 2 rows, fewer than 2 to update"):
        heat.launch(2, "cpu", rows=5, cols=8, steps=2, timeout=120)


def test_command_line_under_torchrun_checks_against_numpy(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", str(EXAMPLE), "--arch", "cpu",
           "--size", "24", "--cols", "16", "--weak", "--steps", "15", "--check", "--json", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "heat 48x16 on 2 rank(s), cpu, eager: 15 steps" in done.stdout
    assert "max |u - numpy| = 0.000e+00" in done.stdout
    assert '"world": 2' in out.read_text()



@pytest.mark.cuda
def test_one_gpu_captured_step_matches_numpy():
    need_gpus(1)
    graph = heat.launch(1, "cuda", rows=130, cols=70, steps=40)
    eager = heat.launch(1, "cuda", rows=130, cols=70, steps=40, graph=False)
    assert (graph.mode, eager.mode) == ("graph", "eager")
    np.testing.assert_allclose(graph.u, reference(130, 70, 40), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(graph.u, eager.u)


@pytest.mark.cuda
def test_two_gpus_match_one_gpu():
    need_gpus(2)
    one = heat.launch(1, "cuda", rows=301, cols=257, steps=60)
    two = heat.launch(2, "cuda", rows=301, cols=257, steps=60)
    eager = heat.launch(2, "cuda", rows=301, cols=257, steps=60, graph=False)
    assert (two.world, two.mode, eager.mode) == (2, "graph", "eager")
    np.testing.assert_array_equal(two.u, one.u)
    np.testing.assert_array_equal(eager.u, one.u)
    np.testing.assert_allclose(two.u, reference(301, 257, 60), rtol=0, atol=1e-12)
    converged = heat.launch(2, "cuda", rows=64, cols=64, steps=5000, tol=1e-5, check_every=25)
    assert converged.converged and converged.steps < 5000
    np.testing.assert_allclose(converged.u, reference(64, 64, converged.steps), rtol=0, atol=1e-12)
