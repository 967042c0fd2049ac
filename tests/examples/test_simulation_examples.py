"""The simulation examples ported from Taichi demos (mpm88, nbody, stable_fluids) on the CPU backend:
each matches its NumPy port and passes physical sanity checks."""

from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from helpers.paths import EXAMPLES

from qgraph.examples import mpm88, nbody, stable_fluids


def _float32(*arrays):
    return all(a.dtype == np.float32 for a in arrays)


# mpm88


def test_mpm88_matches_numpy(cpu, all_numba_threads):
    r = mpm88.run(n=1024, steps=20)
    assert r.arch == "cpu" and r.n == 1024 and r.steps == 20 and r.variant == "scalar"
    assert r.max_rel_error < mpm88.TOLERANCE and r.max_abs_error < mpm88.TOLERANCE
    assert r.steps_per_second > 0
    assert mpm88.substep_scalar.stats.num_tasks == 4
    s = r.state
    assert _float32(s.x, s.v, s.C, s.J, s.grid_v, s.grid_m)
    assert s.x.shape == (1024, 2) and s.C.shape == (1024, 2, 2) and s.grid_v.shape == (128, 128, 2)
    x0 = mpm88.initial_state(1024).x
    assert (s.x[:, 1] < x0[:, 1]).all()  # falling


def test_mpm88_one_thread_is_bit_exact(cpu):
    """With one thread the atomic scatter adds in particle order, as the reference's np.add.at does,
    so the only difference tolerated by the multi-thread check is the order of the atomic adds."""
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        r = mpm88.run(n=512, steps=5)
    finally:
        numba.set_num_threads(threads)
    assert r.max_abs_error == 0.0


def test_mpm88_vector_variant_is_the_scalar_one(cpu, all_numba_threads):
    """Written with vec2/mat22 and two structs, the substep computes the same float operations in the
    same order: on one thread it gives the scalar kernel's bits; on all threads it passes the check."""
    r = mpm88.run(n=1024, steps=20, variant="vector")
    assert r.variant == "vector" and r.max_rel_error < mpm88.TOLERANCE
    assert mpm88.substep_vector.stats.num_tasks == 4
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        scalar = mpm88.run(n=512, steps=5, check=False).state
        vector = mpm88.run(n=512, steps=5, check=False, variant="vector").state
    finally:
        numba.set_num_threads(threads)
    for name in ("x", "v", "C", "J", "grid_v", "grid_m"):
        assert np.array_equal(getattr(scalar, name), getattr(vector, name)), name


def test_mpm88_physics(cpu):
    # 1200 substeps: the block lands (about 800) and splashes; no check (chaotic after the splash)
    n = 1024
    r = mpm88.run(n=n, steps=1200, check=False)
    assert r.max_abs_error is None and r.max_rel_error is None
    s = r.state
    assert np.isfinite(s.x).all() and np.isfinite(s.v).all()
    assert (s.x > mpm88.DX).all() and (s.x < 1.0 - mpm88.DX).all()  # inside the box (the walls are 3 cells)
    assert s.x[:, 1].min() < 0.05  # it reached the floor
    assert (s.J > 0.0).all() and s.J.min() < 0.99  # compressed by the impact, never inverted
    # the B-spline weights of a particle sum to 1: the grid holds exactly the particles' mass
    np.testing.assert_allclose(s.grid_m.astype(np.float64).sum(), n * mpm88.P_MASS, rtol=1e-5)
    assert (s.grid_m >= 0).all()


def test_mpm88_main(cpu, capsys):
    assert mpm88.main(["--n", "512", "--steps", "10"]) == 0
    out = capsys.readouterr().out
    assert "mpm88: 512 particles" in out and "substeps/s" in out and "OK" in out
    assert mpm88.main(["--n", "256", "--steps", "3", "--no-check"]) == 0
    assert "check" not in capsys.readouterr().out


# nbody


def test_nbody_matches_numpy(cpu):
    r = nbody.run(n=64, steps=20)
    assert r.arch == "cpu" and r.n == 64 and r.variant == "scalar"
    assert r.max_rel_error < nbody.TOLERANCE and r.max_abs_error < 1e-4
    assert r.steps_per_second > 0 and r.pairs_per_second > 0
    assert nbody.step_scalar.stats.num_tasks == 3
    assert _float32(r.pos, r.vel) and r.pos.shape == (64, 3)


def test_nbody_vector_variant_is_the_scalar_one(cpu):
    """vec3 and a struct, the same operations in the same order: the same bits on the CPU."""
    r = nbody.run(n=64, steps=20, variant="vector")
    assert r.variant == "vector" and r.max_rel_error < nbody.TOLERANCE
    assert nbody.step_vector.stats.num_tasks == 3
    scalar = nbody.run(n=48, steps=10, check=False)
    vector = nbody.run(n=48, steps=10, check=False, variant="vector")
    assert np.array_equal(scalar.pos, vector.pos) and np.array_equal(scalar.vel, vector.vel)


def test_nbody_conserves_energy_and_momentum(cpu):
    n = 64
    r = nbody.run(n=n, steps=100, dt=1e-3)
    assert r.max_rel_error < nbody.TOLERANCE
    assert r.energy_initial < 0  # bound
    assert r.energy_drift < 1e-5  # leapfrog: bounded energy error, here float32 rounding
    assert r.momentum < 1e-6  # starts at 0; pairwise forces cancel
    pos0, vel0, mass = nbody.initial_state(n)
    assert np.abs(r.pos - pos0).max() > 1e-3  # they moved
    assert nbody.total_energy(pos0, vel0, mass) == r.energy_initial


def test_nbody_reference_energy_is_leapfrog_accurate():
    """The float64 reference's energy error shrinks as dt^2 (a second-order, symplectic integrator)."""
    pos0, vel0, mass = nbody.initial_state(32)
    e0 = nbody.total_energy(pos0, vel0, mass)
    drift = []
    for dt in (8e-3, 4e-3):
        pos, vel = nbody.numpy_reference(pos0, vel0, mass, int(round(0.4 / dt)), dt)
        drift.append(abs(nbody.total_energy(pos, vel, mass) - e0))
    assert 2.5 < drift[0] / drift[1] < 6


def test_nbody_main(cpu, capsys):
    assert nbody.main(["--n", "64", "--steps", "10"]) == 0
    out = capsys.readouterr().out
    assert "nbody: 64 bodies" in out and "steps/s" in out and "energy" in out and "OK" in out
    assert nbody.main(["--n", "64", "--steps", "2", "--no-check"]) == 0
    out = capsys.readouterr().out
    assert "momentum" in out and "energy" not in out and "check" not in out
    unchecked = nbody.run(n=16, steps=2, check=False)
    assert unchecked.energy_drift is None and unchecked.max_abs_error is None


# stable fluids


def test_fluids_match_numpy(cpu):
    r = stable_fluids.run(n=32, steps=10)
    assert r.arch == "cpu" and r.n == 32 and r.jacobi_iters == stable_fluids.JACOBI_ITERS
    assert r.max_rel_error < stable_fluids.TOLERANCE and r.max_abs_error < 1e-3
    assert r.steps_per_second > 0
    assert stable_fluids.advect_scalar.stats.num_tasks == 4
    assert stable_fluids.pressure_scalar.stats.num_tasks == 3
    assert stable_fluids.project_scalar.stats.num_tasks == 3
    s = r.state
    assert _float32(s.u, s.v, s.dye, s.p)
    assert s.u.shape == (33, 32) and s.v.shape == (32, 33) and s.dye.shape == (32, 32)


def test_fluids_vector_variant_is_the_scalar_one(cpu):
    """One struct for the fields, vec2 departure points, helpers taking a vec2: the same bits."""
    r = stable_fluids.run(n=32, steps=10, variant="vector")
    assert r.variant == "vector" and r.max_rel_error < stable_fluids.TOLERANCE
    assert stable_fluids.advect_vector.stats.num_tasks == 4 and stable_fluids.pressure_vector.stats.num_tasks == 3
    scalar = stable_fluids.run(n=24, steps=6, check=False).state
    vector = stable_fluids.run(n=24, steps=6, check=False, variant="vector").state
    for name in ("u", "v", "dye", "p"):
        assert np.array_equal(getattr(scalar, name), getattr(vector, name)), name


def test_fluids_projection_removes_divergence(cpu):
    r = stable_fluids.run(n=32, steps=10, check=False)
    assert r.divergence_after < 0.02 * r.divergence_before
    more = stable_fluids.run(n=32, steps=10, jacobi_iters=100, check=False)
    assert more.divergence_after < 0.5 * r.divergence_after  # more sweeps, a better projection
    s = r.state
    np.testing.assert_array_equal(s.u[[0, -1]], 0.0)  # closed walls
    np.testing.assert_array_equal(s.v[:, [0, -1]], 0.0)
    assert (s.dye >= 0.0).all() and (s.dye <= 1.0).all()  # bilinear sampling is a convex combination
    top = np.nonzero((s.dye > 0.1).any(axis=0))[0].max()
    assert top >= 6  # the plume rose to twice the jet's height (3 rows) in 10 steps
    assert s.v.max() > 0.5 * stable_fluids.INFLOW_SPEED


def test_fluids_rejects_odd_sweep_counts(cpu):
    with pytest.raises(ValueError, match="even"):
        stable_fluids.run(n=8, steps=1, jacobi_iters=3)


def test_fluids_main(cpu, capsys):
    assert stable_fluids.main(["--n", "32", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    assert "stable fluids 32x32" in out and "steps/s" in out and "divergence" in out and "OK" in out


# all three


def test_bench_rows_of_the_vector_variants(cpu):
    """`qgraph bench`'s vector-examples section, on the kernels the tests above compiled (test_cli's
    run of the whole bench times nbody alone)."""
    from qgraph.bench import examples_bench

    rows = examples_bench.run(quick=True, budget=0.001, repeat=2)
    assert [(r["example"], r["arch"]) for r in rows] == [("mpm88", "cpu"), ("nbody", "cpu"), ("stable_fluids", "cpu")]
    for r in rows:
        assert r["size"] == max(16, examples_bench.EXAMPLES[r["example"]][1] // examples_bench.QUICK_DIVISOR)
        for figure in ("scalar_us", "vector_us"):
            assert 0 < r[f"{figure}_min"] <= r[figure] <= r[f"{figure}_max"], (r["example"], figure)
        assert r["ratio"] == pytest.approx(r["vector_us"] / r["scalar_us"])
    assert "mpm88 (cpu, 2048 particles)" in examples_bench.table(rows)


@pytest.mark.parametrize("module", [mpm88, nbody, stable_fluids])
def test_an_unknown_variant_is_a_key_error(cpu, module):
    assert "scalar" in module.VARIANTS
    with pytest.raises(KeyError):
        module.run(steps=1, variant="no such variant", check=False)


@pytest.mark.parametrize("script, args", [("mpm88.py", ["--n", "256", "--steps", "5"]),
                                          ("nbody.py", ["--n", "32", "--steps", "5"]),
                                          ("stable_fluids.py", ["--n", "16", "--steps", "3"])])
def test_script_runs_as_a_subprocess(script, args):
    env = dict(os.environ, QGRAPH_ARCH="cpu")
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "on cpu" in proc.stdout and "steps/s" in proc.stdout and "OK" in proc.stdout
