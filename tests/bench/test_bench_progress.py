"""Progress bars: drawn on a terminal only, never with --quiet or in CI, and nothing when off."""

from __future__ import annotations

import io

from qgraph.bench.progress import StepBar, bars_wanted


class Terminal(io.StringIO):
    """A stream that says it is a terminal (tqdm sizes the bar from it: 100 columns)."""

    def isatty(self) -> bool:
        return True


def test_bars_are_wanted_on_a_terminal_only_when_not_quiet_and_not_ci():
    assert bars_wanted(stream=Terminal(), environ={})
    assert not bars_wanted(stream=io.StringIO(), environ={})  # a pipe or a file: no bar
    assert not bars_wanted(quiet=True, stream=Terminal(), environ={})
    assert not bars_wanted(stream=Terminal(), environ={"CI": "true"})
    assert bars_wanted(stream=Terminal(), environ={"CI": "false"})  # CI=false is not CI
    assert not bars_wanted(stream=object(), environ={})  # no isatty at all


def test_a_disabled_bar_writes_nothing():
    out = io.StringIO()
    with StepBar("demo", 2, enabled=False, stream=out) as bar:
        bar.step("compiling")
        bar.step("solving")
    assert out.getvalue() == ""


def test_an_enabled_bar_names_each_step_and_counts_the_finished_ones():
    out = Terminal()
    with StepBar("demo", 2, enabled=True, stream=out) as bar:
        bar.step("compiling")
        bar.step("solving")
    text = out.getvalue()
    assert "\r" in text and "demo" in text
    assert "0/2" in text and "compiling" in text and "1/2" in text and "solving" in text
    assert text.rstrip(" ").endswith("\r")  # erased when closed: the command's output follows it
