"""The loop-gradient bench (issue 33): its drag rows' gradient, the JAX rows without JAX, and the
checkpoint plot (timings are not asserted)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from qgraph.bench import loop_gradients
from qgraph.bench.gradients import DT


def _drag_loss(x, v, k, steps: int) -> float:
    """sum(x after `steps` drag passes), in float64 NumPy."""
    for _ in range(steps):
        v = v - k * v * np.linalg.norm(v, axis=1, keepdims=True) * DT
        x = x + DT * v
    return float(x.sum())


def test_drag_rows_gradient_matches_finite_differences(arch):
    steps = 6
    rows, checkpoints, grads = loop_gradients.drag_rows(4, steps, 1)
    assert [p["every"] for p in checkpoints] == loop_gradients.spacings(steps) == [1, 2]
    for p in checkpoints:
        assert p["mb_kept"] > 0 and p["backward_ms"] > 0
        assert p["forward_backward_ms"] == pytest.approx(p["forward_ms"] + p["backward_ms"])
        assert rows[f"drag, every {p['every']}: backward"] == p["backward_ms"]
    assert "drag: backward at every sqrt(k) minus every 1, in forward passes" in rows
    x0, v0, k0 = (a.astype(np.float64) for a in loop_gradients.drag_state(4))
    h = 1e-6
    expected_v = np.zeros_like(v0)
    for index in np.ndindex(v0.shape):
        up, down = v0.copy(), v0.copy()
        up[index] += h
        down[index] -= h
        expected_v[index] = (_drag_loss(x0, up, k0[0], steps) - _drag_loss(x0, down, k0[0], steps)) / (2 * h)
    expected_k = (_drag_loss(x0, v0, k0[0] + h, steps) - _drag_loss(x0, v0, k0[0] - h, steps)) / (2 * h)
    np.testing.assert_allclose(grads["x"], np.ones_like(x0), rtol=1e-6)
    np.testing.assert_allclose(grads["v"], expected_v, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(grads["k"], [expected_k], rtol=1e-3)


def test_ballistic_rows_side_by_side(arch):
    """The repeat loop interchanged and as a loop of launches: both timed, both gradients close to
    the exact one and the same bits; --no-drag runs these rows only."""
    result = loop_gradients.run(8, 3, 4, 2, 1, drag=False)
    rows = result["rows"]
    for form in ("", ", not interchanged"):
        assert rows[f"ballistic, repeat loop{form}: forward (one graph)"] > 0
        assert rows[f"ballistic, repeat loop{form}: forward + backward (one graph)"] > 0
        assert rows[f"ballistic, repeat loop{form}: gradient's largest relative error"] < 1e-4
    assert rows["ballistic, repeat loop: both forms' gradients the same bits"] == "True"
    assert result["checkpoints"] == [] and not any(name.startswith("drag") for name in rows)


def test_jax_rows_say_why_when_jax_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)  # `import jax` raises ImportError
    rows, figures = loop_gradients.jax_drag_rows(4, 4, 1, {})
    assert rows == {loop_gradients.JAX_ROW: "skipped: JAX is not installed (pip install 'jax[cuda12]')"}
    assert figures == []


def _fake_run(tmp_path):
    checkpoints = [
        {
            "every": c,
            "backward_ms": 2.0 / c + 1,
            "forward_backward_ms": 3.0,
            "mb_kept": 100.0 / c,
            "jax_forward_backward_ms": 4.0,
            "jax_mb": None,
        }
        for c in (1, 10, 20, 100)
    ]
    result = {"device": "fake", "drag_n": 16384, "drag_steps": 400, "checkpoints": checkpoints}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(result))
    return path


def test_plot_from_json_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = _fake_run(tmp_path)
    loop_gradients.main(["--plot-from", str(path)])
    assert (tmp_path / "run.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("plot", [[], ["--plot", "out.png"]])
def test_plot_without_matplotlib_says_how_before_running(tmp_path, monkeypatch, capsys, plot):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        loop_gradients.main(["--plot-from", str(_fake_run(tmp_path)), *plot])
    assert stopped.value.code == 2
    assert "drawing the plot needs matplotlib: pip install matplotlib" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.png"))


def test_bad_paths_are_refused_before_running(tmp_path, capsys):
    with pytest.raises(SystemExit):
        loop_gradients.main(["--json", str(tmp_path / "missing" / "run.json")])
    assert "argument --json: give a file name in an existing directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        loop_gradients.main(["--plot-from", str(tmp_path / "missing.json")])
    assert "argument --plot-from: cannot read the figures of an earlier --json run" in capsys.readouterr().err


def test_table_prints_small_differences_in_exponent_form():
    result = {
        "device": "fake",
        "n": 8,
        "steps": 2,
        "drag_n": 4,
        "drag_steps": 16,
        "rows": {
            "drag, every 4: backward": 1.25,
            "drag: largest relative difference": 1.5e-7,
            loop_gradients.JAX_ROW: "skipped: JAX is not installed",
        },
    }
    lines = loop_gradients.table(result).splitlines()
    assert lines[2].split()[-1] == "1.250" and lines[3].split()[-1] == "1.5e-07"
    assert lines[4].endswith("skipped: JAX is not installed")
    assert loop_gradients.table({}) == ""
