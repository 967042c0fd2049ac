"""The runnable examples (examples/, installed as qgraph.examples) on the CPU backend."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from importlib import import_module

import numpy as np
import pytest
from helpers.paths import EXAMPLES

from qgraph.examples import ballistic_control, heat_diffusion, heat_source, jacobi, particles


def test_heat_converges_and_matches_numpy(cpu):
    r = heat_diffusion.run(n=16, tol=1e-4)
    assert r.arch == "cpu" and r.n == 16
    assert r.converged and r.max_change < 1e-4
    assert 50 < r.steps < 2000
    assert r.reference_error is not None and r.reference_error < 1e-9
    assert r.seconds > 0 and r.steps_per_second > 0
    assert heat_diffusion.diffuse.stats.num_tasks == 4
    u = r.u
    assert u.shape == (16, 16)
    np.testing.assert_array_equal(u[0], 1.0)  # the hot edge is untouched
    np.testing.assert_array_equal(u[-1], 0.0)
    assert (u[1:-1, 1:-1] > 0).all() and (u <= 1.0).all()
    assert (np.diff(u[:, 8]) <= 0).all()  # temperature falls away from the hot edge


def test_heat_stops_at_max_steps(cpu):
    r = heat_diffusion.run(n=24, tol=1e-12, max_steps=37)
    assert r.steps == 37 and not r.converged
    assert r.reference_error < 1e-9
    unchecked = heat_diffusion.run(n=24, tol=1e-12, max_steps=37, check=False)
    assert unchecked.reference_error is None
    np.testing.assert_array_equal(unchecked.u, r.u)


def test_heat_main(cpu, capsys):
    assert heat_diffusion.main(["--n", "12", "--tol", "1e-3"]) == 0
    out = capsys.readouterr().out
    assert "converged" in out and "steps/s" in out and "check vs NumPy" in out and "OK" in out
    assert heat_diffusion.main(["--n", "12", "--max-steps", "5", "--no-check"]) == 0
    out = capsys.readouterr().out
    assert "NOT converged" in out and "check" not in out


def test_heat_script_runs_as_a_subprocess():
    env = dict(os.environ, QGRAPH_ARCH="cpu")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "heat_diffusion.py"), "--n", "16"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "on cpu" in proc.stdout and "steps/s" in proc.stdout and "OK" in proc.stdout


def test_particles_match_numpy(cpu):
    r = particles.run(n=64, steps=50, dt=1e-3)
    assert r.arch == "cpu" and r.n == 64 and r.steps == 50 and not r.pairwise
    assert r.max_error is not None and r.max_error < 1e-9
    assert r.position_error <= r.max_error and r.velocity_error <= r.max_error
    assert r.steps_per_second > 0
    assert particles.step.stats.num_tasks == 3
    assert r.pos.shape == (64, 2) and (np.abs(r.pos) <= particles.BOX).all()
    pos0, vel0 = particles.initial_state(64)
    assert np.abs(r.pos - pos0).max() > 1e-3  # they moved


@pytest.mark.parametrize("pairwise", [False, True])
def test_particles_as_three_kernels_in_one_step_graph(arch, pairwise):
    fused = particles.run(n=48, steps=30, dt=1e-3, pairwise=pairwise)
    r = particles.run(n=48, steps=30, dt=1e-3, pairwise=pairwise, variant="kernels")
    assert r.max_error < 1e-9
    np.testing.assert_allclose(r.pos, fused.pos, rtol=0, atol=1e-12)  # the same step, written as 3 kernels
    if arch == "cuda":  # one graph per step signature: the warm-up's and the run's share it
        stats = particles.step_kernels.stats
        assert stats.kernel_calls == 3 and stats.waits == ((), (0,), (1,))
        assert stats.builds <= 2 * (1 + pairwise)


def test_particles_walls_reflect(cpu):
    # 400 steps of gravity and the spring push particles into the lower wall (rest point y = -g/k < -BOX)
    r = particles.run(n=32, steps=400, dt=2e-3)
    assert r.max_error < 1e-9
    assert (np.abs(r.pos) <= particles.BOX).all()
    assert r.pos[:, 1].min() < -0.8 * particles.BOX


def test_particles_pairwise_repulsion(cpu):
    r = particles.run(n=48, steps=40, pairwise=True)
    assert r.pairwise and r.max_error < 1e-9
    free = particles.run(n=48, steps=40, pairwise=False, check=False)
    assert free.max_error is None
    assert np.abs(r.vel - free.vel).max() > 1e-6  # the pairwise loop did something


def test_particles_main(cpu, capsys):
    assert particles.main(["--n", "20", "--steps", "10"]) == 0
    out = capsys.readouterr().out
    assert "particles: 20" in out and "steps/s" in out and "OK" in out
    assert particles.main(["--n", "20", "--steps", "10", "--pairwise", "--no-check"]) == 0
    assert "pairwise" in capsys.readouterr().out


def test_jacobi_converges_to_the_solution(cpu):
    r = jacobi.run(n=40, tol=1e-10)
    assert r.arch == "cpu" and r.n == 40
    assert r.converged and r.residual < 1e-10
    assert 20 < r.iterations < 1000  # contraction rate about 1/1.2 per sweep
    assert r.error < 1e-8 and r.true_residual < 1e-7
    a, b = jacobi.make_system(40)
    np.testing.assert_allclose(r.x, np.linalg.solve(a, b), atol=1e-8)
    assert jacobi.jacobi.stats.num_tasks == 4


def test_jacobi_stops_at_max_iters(cpu):
    r = jacobi.run(n=30, tol=1e-12, max_iters=3)
    assert r.iterations == 3 and not r.converged and r.error > 1e-6


def test_jacobi_main(cpu, capsys):
    assert jacobi.main(["--n", "24"]) == 0
    out = capsys.readouterr().out
    assert "converged after" in out and "iterations/s" in out and "np.linalg.solve" in out
    assert jacobi.main(["--n", "24", "--max-iters", "2"]) == 1
    assert "NOT converged" in capsys.readouterr().out


def test_ballistic_control_learns_the_velocities(cpu):
    r = ballistic_control.run(n=32, steps=30, iterations=12)
    assert r.arch == "cpu" and len(r.losses) == 12
    assert all(b < 0.5 * a for a, b in zip(r.losses, r.losses[1:]))  # a convex quadratic: steady descent
    assert r.final_loss < 1e-4 * r.losses[0]
    assert r.snapshots == 0  # the update is linear: the tape copies nothing
    assert r.extra_bytes == 2 * 32 * 12 + 8  # temporary gradients of x, v (vec3 float32) and the loss


def test_heat_source_is_recovered_through_a_device_loop(cpu):
    r = heat_source.run(n=32, steps=100, iterations=30)
    assert r.losses[-1] < r.losses[0] / 20, r.losses
    assert all(b < a * 1.05 for a, b in zip(r.losses, r.losses[1:])), r.losses  # no divergence
    assert r.checkpoint_bytes > 0  # the cooling term's gradient keeps checkpoints


def test_ballistic_control_main_prints_the_loss_and_plots(cpu, capsys, tmp_path, monkeypatch):
    path = tmp_path / "loss.png"
    assert ballistic_control.main(["--n", "16", "--steps", "20", "--iterations", "15", "--plot", str(path)]) == 0
    out = capsys.readouterr().out
    assert "ballistic control: 16 particles on cpu" in out and out.count("  iteration ") == 15 and "OK" in out
    if importlib.util.find_spec("matplotlib") is None:
        assert "no plot: matplotlib is not installed" in out and not path.exists()
    else:
        assert f"loss plot written to {path}" in out and path.stat().st_size > 0
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    assert ballistic_control.main(["--n", "16", "--steps", "20", "--iterations", "1"]) == 1
    out = capsys.readouterr().out
    assert "NOT converged" in out and "plot" not in out
    assert not any(workdir.iterdir())  # no --plot: nothing written where it ran


HELPERS = {"mpm88_kernels": "mpm88", "stable_fluids_kernels": "stable_fluids", "stable_fluids_vector": "stable_fluids",
           "ranks": "heat_multi_gpu", "command_line": "heat_diffusion"}  # modules the examples import -> a user


def test_modules_the_examples_import_say_so_when_run():
    import pkgutil

    import qgraph.examples

    found = {m.name for m in pkgutil.iter_modules(qgraph.examples.__path__)}
    runnable = found - set(HELPERS)
    assert set(HELPERS) <= found and all(hasattr(import_module(f"qgraph.examples.{m}"), "main") for m in runnable)
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    for name, user in HELPERS.items():
        proc = subprocess.run([sys.executable, "-m", f"qgraph.examples.{name}", "--help"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"qgraph.examples.{name}: ") and "imported by" in proc.stdout
        assert f"python -m qgraph.examples.{user}`" in proc.stdout
    proc = subprocess.run([sys.executable, str(EXAMPLES / "ranks.py")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and not proc.stdout and "not run: run `python -m qgraph.examples.heat_multi_gpu`" in \
        proc.stderr


@pytest.mark.parametrize("example, argv, error", [
    ("heat_diffusion", ["--n", "2"], "argument --n: must be at least 3 (the grid needs an interior), got 2"),
    ("heat_diffusion", ["--max-steps", "0"], "argument --max-steps: must be at least 1, got 0"),
    ("jacobi", ["--n", "1"], "argument --n: must be at least 2 (a 1 x 1 system has no off-diagonal), got 1"),
    ("particles", ["--n", "0"], "argument --n: must be at least 1, got 0"),
    ("ballistic_control", ["--iterations", "0"], "argument --iterations: must be at least 1, got 0"),
    ("heat_source", ["--n", "2"], "argument --n: must be at least 3 (the rod needs an interior point), got 2"),
    ("mpm88", ["--steps", "-3"], "argument --steps: must be at least 1, got -3"),
    ("nbody", ["--n", "1"], "argument --n: must be at least 2 (one body has no energy to check), got 1"),
    ("nbody", ["--n", "ten"], "argument --n: expected an integer, got 'ten'"),
    ("stable_fluids", ["--n", "0"], "argument --n: must be at least 1, got 0"),
    ("stable_fluids", ["--jacobi", "3"], "argument --jacobi: must be even (the sweeps run in pairs), got 3"),
    ("heat_multi_gpu", ["--arch", "cpu", "--size", "2"], "argument --size: a 2-row grid over 1 ranks leaves rank 0 2 "
                                                         "rows, fewer than 2 to update; use at least 4 rows"),
    ("heat_multi_gpu", ["--arch", "cpu", "--cols", "2"], "argument --cols: must be at least 3"),
    ("heat_multi_gpu", ["--arch", "cpu", "--nproc", "0"], "argument --nproc: must be at least 1, got 0"),
])
def test_a_bad_size_is_one_line_naming_the_option(example, argv, error, capsys):
    with pytest.raises(SystemExit) as exited:
        import_module(f"qgraph.examples.{example}").main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f": error: {error}" in err.strip().splitlines()[-1]


def test_poisson_solves_to_tolerance_as_numpy_does(arch):
    from qgraph.examples import poisson

    r = poisson.run(n=24, tol=1e-4, max_iters=4000)
    want, sweeps = poisson.numpy_solve(poisson.source(24), 1e-4, 4000)
    assert r.change < 1e-4 and abs(r.sweeps - sweeps) <= 2
    np.testing.assert_allclose(r.u, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert poisson.jacobi_poisson.stats.num_tasks == 4


def test_poisson_main_reports_a_solve_that_did_not_converge(cpu, capsys):
    from qgraph.examples import poisson

    assert poisson.main(["--n", "16", "--tol", "1e-3"]) == 0
    assert poisson.main(["--n", "16", "--tol", "1e-9", "--max-iters", "4", "--no-check"]) == 1
    assert "NOT converged" in capsys.readouterr().out
