"""qgraph.report and kernel.history: the same rows from the CPU runner, the CUDA device loop and
the host fallback; results bit-identical with and without reports; the subset rule; errors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.cuda_offline import A, S, ptx_of

import qgraph
from qgraph.lang.front.reports import LATEST, POWERS, PUBLISH, ReportLayout
from qgraph.runtime.history import read_ring


@qgraph.kernel(graph_while="flag")
def relax_reporting(x, tmp, change, flag, tol: float):
    for i in range(1, x.shape[0] - 1):
        tmp[i] = 0.5 * (x[i - 1] + x[i + 1])
    for i in range(1, x.shape[0] - 1):
        qgraph.atomic_max(change, (), abs(tmp[i] - x[i]))
    for i in range(1, x.shape[0] - 1):
        x[i] = tmp[i]
    qgraph.report("change", change[()])
    qgraph.report("middle", x[x.shape[0] // 2])
    flag[0] = 1 if change[()] > tol else 0
    change[()] = 0.0


@qgraph.kernel(graph_while="flag")
def relax_silent(x, tmp, change, flag, tol: float):
    for i in range(1, x.shape[0] - 1):
        tmp[i] = 0.5 * (x[i - 1] + x[i + 1])
    for i in range(1, x.shape[0] - 1):
        qgraph.atomic_max(change, (), abs(tmp[i] - x[i]))
    for i in range(1, x.shape[0] - 1):
        x[i] = tmp[i]
    flag[0] = 1 if change[()] > tol else 0
    change[()] = 0.0


@qgraph.kernel
def count_up(x, k: int):
    for _ in qgraph.repeat(k):
        x[0] += 1.0
        qgraph.report("x", x[0])


def _relax_reference(x0: np.ndarray, tol: float) -> np.ndarray:
    x, rows = x0.copy(), []
    while True:
        tmp = 0.5 * (x[:-2] + x[2:])
        change = np.max(np.abs(tmp - x[1:-1]))
        x[1:-1] = tmp
        rows.append((change, x[len(x) // 2]))
        if change <= tol:
            return np.array(rows)


def _run(kernel, x0, tol):
    x, tmp = qgraph.from_numpy(x0), qgraph.ndarray(qgraph.f64, x0.shape)
    change, flag = qgraph.ndarray(qgraph.f64, ()), qgraph.from_numpy(np.ones(1, np.int32))
    kernel(x, tmp, change, flag, tol)
    return x.to_numpy()


def test_history_rows_match_numpy_on_every_loop_path(loop_arch):
    x0 = np.random.default_rng(3).random(33)
    x = _run(relax_reporting, x0, 1e-3)
    qgraph.sync()
    reference = _relax_reference(x0, 1e-3)
    passes = np.arange(1, len(reference) + 1)
    change, middle = relax_reporting.history["change"], relax_reporting.history["middle"]
    np.testing.assert_array_equal(change[:, 0], passes)
    np.testing.assert_allclose(change[:, 1], reference[:, 0], rtol=1e-12)
    np.testing.assert_allclose(middle[:, 1], reference[:, 1], rtol=1e-12)
    assert relax_reporting.stats.iterations == (len(reference),)
    assert sorted(relax_reporting.history) == ["change", "middle"]
    # the next call starts a fresh history; results identical to the kernel without reports
    x_silent = _run(relax_silent, x0, 1e-3)
    np.testing.assert_array_equal(x, x_silent)
    _run(relax_reporting, x0, 0.5)
    qgraph.sync()
    assert relax_reporting.history.count("change") == len(_relax_reference(x0, 0.5))


def test_a_full_ring_keeps_the_powers_of_two_and_the_latest_and_says_so(loop_arch):
    x, passes = qgraph.ndarray(qgraph.f64, (1,)), LATEST + 1000
    count_up(x, passes)
    qgraph.sync()
    assert count_up.history.count("x") == passes
    with pytest.warns(qgraph.HistoryWarning, match=r"holds \d+ of its 5096 reports"):
        rows = count_up.history["x"]
    kept = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512] + list(range(passes - LATEST, passes))
    np.testing.assert_array_equal(rows[:, 0], np.array(kept) + 1)  # passes count from 1
    np.testing.assert_array_equal(rows[:, 1], np.array(kept) + 1.0)


def test_a_live_read_keeps_only_entries_no_unpublished_report_can_overwrite():
    layout = ReportLayout(("r",), 1, latest=32)
    view = np.zeros(layout.size)
    base = layout.base(0)

    def write(w):  # as the device does: the entries, then (fenced) the count when it publishes
        view[base + 1 + 2 * POWERS + 2 * (w % 32) :][:2] = (w + 1, 10.0 * w)
        if w & (w - 1) == 0:
            view[base + 1 + 2 * w.bit_length() :][:2] = (w + 1, 10.0 * w)
        if w < PUBLISH or (w + 1) % PUBLISH == 0:
            view[base] = w + 1

    for w in range(40):
        write(w)
    count, rows = read_ring(view, layout, 0, exact=40)  # the call is over: its counters say 40
    assert count == 40 and list(rows[:, 0]) == [1, 2, 3, 5] + list(range(9, 41)) and rows[-1, 1] == 390.0
    count, rows = read_ring(view, layout, 0, exact=None)  # live: 32 published, up to 16 more may be written
    assert count == 32 and list(rows[:, 0]) == [1, 2, 3, 5, 9] + list(range(17, 33))


def test_history_plots_each_report_against_the_pass(cpu, tmp_path):
    _run(relax_reporting, np.random.default_rng(3).random(33), 1e-2)
    history = relax_reporting.history
    figure = history.plot(tmp_path / "history.png")
    (axes,) = figure.axes
    assert [line.get_label() for line in axes.lines] == ["change", "middle"]
    np.testing.assert_array_equal(axes.lines[0].get_xdata(), history["change"][:, 0])
    assert (tmp_path / "history.png").stat().st_size > 0
    assert np.array_equal(history.latest("change"), history["change"][-1])


def test_history_of_a_kernel_without_reports_is_empty(cpu):
    assert len(relax_silent.history) == 0
    with pytest.raises(KeyError, match="has no report named 'change'"):
        relax_silent.history["change"]


@pytest.mark.parametrize(
    "body,message",
    [
        ("    for i in range(x.shape[0]):\n        qgraph.report('r', x[i])", "not inside a parallel for loop"),
        ("    qgraph.report('r', x[0])", "belongs in the body of a device loop"),
        ("    for _ in qgraph.repeat(k):\n        qgraph.report(name, x[0])", "a name \\(a string literal\\)"),
        ("    for _ in qgraph.repeat(k):\n        x[0] = qgraph.report('r', x[0])", "statement of its own"),
    ],
)
def test_misplaced_reports_are_rejected_naming_the_line(body, message, tmp_path):
    path = tmp_path / "bad_report.py"
    path.write_text(f"import qgraph\nname = 'r'\n\ndef bad(x, k: int):\n{body}\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(qgraph.QgraphSyntaxError, match=message) as info:
        qgraph.kernel(namespace["bad"])
    assert info.value.lineno in (5, 6)


def test_a_report_compiles_to_a_system_fence_before_its_count(sm90):
    ptx = ptx_of(count_up, (A("f8", 1), S("i8"), A("f8", 1), A("f8", 1)))  # x, k, ring, counters
    text = "\n".join(ptx)
    assert "membar.sys" in text or "fence.sc.sys" in text or "fence.acq_rel.sys" in text
