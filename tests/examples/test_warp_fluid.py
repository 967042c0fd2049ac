"""The port of Warp's example_fluid: the NumPy twin's fields on both backends, a frame as one
traced step (no body run, one graph launch), and its command line."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph
from qgraph.examples import warp_fluid


def test_port_matches_numpy(arch):
    r = warp_fluid.run(frames=4, width=48, height=24, iterations=20)
    assert r.arch == arch and r.rho.shape == (48, 24) and r.rho.dtype == np.float32
    # the same float32 operations in the same order: the CPU agrees to the bit, CUDA within its FMAs
    assert r.max_rel_error < (1e-6 if arch == "cpu" else warp_fluid.TOLERANCE)
    assert 0.0 < r.rho.max() <= 1.0  # the emitter's density, faded and advected


def test_a_frame_replays_without_its_body(arch):
    f, t, dt = warp_fluid.FluidArrays.zeros(40, 20), 0.0, 1.0 / 120
    t = f.frame(t, dt, 8)
    stats = warp_fluid.frame.stats  # live counters: read the numbers before
    builds, replays, traces = stats.builds, stats.replays, stats.traces
    for _ in range(5):
        t = f.frame(t, dt, 8)
    after = warp_fluid.frame.stats
    assert t == pytest.approx(12 * dt)  # the returned time, evaluated from the trace
    assert after.traced and after.fallback_reason is None
    assert after.traces == traces  # a new time did not run the body again
    if arch == "cuda":
        assert after.builds == builds and after.replays == replays + 5
    # the emitter's direction followed the time: the same arrays stepped by the NumPy twin agree
    s = {"u0": np.zeros((40, 20, 2), np.float32), "rho0": np.zeros((40, 20), np.float32),
         "div": np.zeros((40, 20), np.float32), "p0": None}
    t = 0.0
    for _ in range(12):
        warp_fluid.numpy_substep(s, t, dt, 8)
        t += dt
    np.testing.assert_allclose(f.u0.to_numpy(), s["u0"], rtol=1e-4, atol=1e-3)


def test_command_line(cpu, capsys):
    assert warp_fluid.main(["--frames", "2", "--width", "16", "--height", "8", "--iterations", "4"]) == 0
    out = capsys.readouterr().out
    assert "16x8 on cpu" in out and "OK" in out
    with pytest.raises(SystemExit):
        warp_fluid.main(["--iterations", "3"])
    assert "must be even" in capsys.readouterr().err
    assert qgraph.current_arch() == "cpu"
