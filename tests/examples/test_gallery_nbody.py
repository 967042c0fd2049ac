"""The port of Taichi's gallery N-body: NumPy's float64 frames on both backends (CUDA sums each body's
forces on lanes, in another order), a frame as one traced step, and its command line."""

from __future__ import annotations

import numpy as np
import pytest

from qgraph.examples import gallery_nbody as gn


@pytest.mark.parametrize("n", [64, 700])
def test_frames_match_numpy(arch, n):
    r = gn.run(n=n, frames=3)
    assert r.arch == arch and r.pos.shape == (n, 2) and r.pos.dtype == np.float32
    assert r.max_rel_error < gn.TOLERANCE


def test_a_frame_is_one_step_of_twenty_calls(arch):
    gn.run(n=32, frames=2, check=False)
    stats = gn.frame.stats
    assert stats.kernel_calls == 2 * gn.SUBSTEPS and stats.traced and stats.fallback_reason is None


def test_command_line(cpu, capsys):
    assert gn.main(["--n", "40", "--frames", "2"]) == 0
    out = capsys.readouterr().out
    assert "40 bodies on cpu" in out and "OK" in out
