"""Errors raised for a user's mistake end at the user's code (issue 49, item 5): qgraph's own
frames are removed from the traceback (as JAX filters its own), a compile error's chained numba
error is not printed a second time, and an error about a kernel line ends at that line; with
QGRAPH_TRACEBACK=full the traceback and the chain are as raised. qgraph/tracebacks.py."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import numpy as np
import pytest

import qgraph
from qgraph import tracebacks
from qgraph.runtime.settings import Settings

PACKAGE = str(Path(qgraph.__file__).parent) + os.sep
SOURCE = Path(__file__).read_text().splitlines()


def _line_of(text: str) -> int:
    """The line of this file ending in `text` (once)."""
    found = [k + 1 for k, line in enumerate(SOURCE) if line.endswith(text)]
    assert len(found) == 1, (text, found)
    return found[0]


def _frames(error: BaseException) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(error.__traceback__))


def _internal(frames) -> list[str]:
    return [f"{f.filename}:{f.lineno}" for f in frames if f.filename.startswith((PACKAGE, "<qgraph"))]


@pytest.fixture(autouse=True)
def _short_tracebacks(monkeypatch):
    monkeypatch.delenv("QGRAPH_TRACEBACK", raising=False)


@qgraph.kernel
def scale_into(x, y, a: float):  # not `scaled`: tests/lang/test_generated.py dumps that one's binders
    for i in range(x.shape[0]):
        y[i] = a * x[i]


@qgraph.kernel
def adds_text(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] + "a"  # the kernel line of the compile error


@qgraph.kernel
def differences(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i + 1] - x[i]  # reads one past the end when y is as long as x


@qgraph.kernel
def sum_squares(x, loss):
    for i in range(x.shape[0]):
        loss[0] += x[i] * x[i]


@qgraph.graph
def step(x, y):
    scale_into(x, y, "two")  # the step's bad call


def test_a_wrong_argument_ends_at_the_call(arch):
    x, y = qgraph.ndarray(qgraph.f64, (4,)), qgraph.ndarray(qgraph.f64, (4,))
    with pytest.raises(TypeError, match="argument 'a': expected a float scalar, got str") as info:
        scale_into(x, y, "two")
    frames = _frames(info.value)
    assert not _internal(frames), frames
    assert frames[-1].filename == __file__ and frames[-1].line == 'scale_into(x, y, "two")'


def test_a_compile_error_ends_at_the_call_then_the_kernel_line(arch):
    x, y = qgraph.ndarray(qgraph.f64, (4,)), qgraph.ndarray(qgraph.f64, (4,))
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"cannot compile (task \d+ of )?kernel adds_text") as info:
        adds_text(x, y)
    error = info.value
    frames = _frames(error)
    assert not _internal(frames), frames
    assert [(f.filename, f.name) for f in frames[-2:]] == [(__file__, "test_a_compile_error_ends_at_the_call_then_"
                                                                     "the_kernel_line"), (__file__, "adds_text")]
    assert frames[-2].line == "adds_text(x, y)"
    assert frames[-1].lineno == _line_of("# the kernel line of the compile error")
    assert error.__cause__ is None and error.__suppress_context__  # numba's error: not printed again
    assert error.__context__ is not None  # but still there for a program that looks
    printed = "".join(traceback.format_exception(error))
    assert printed.count('y[i] = x[i] + "a"') >= 2  # the frame's line and the message's
    assert "The above exception was the direct cause" not in printed
    assert "^^^" not in printed.split("QgraphSyntaxError")[0]  # no carets under the kernel line


def test_a_decoration_error_ends_at_the_kernel_line():
    with pytest.raises(qgraph.QgraphSyntaxError, match="try/except is not supported in a kernel") as info:
        @qgraph.kernel
        def guarded(x):
            for i in range(x.shape[0]):
                try:  # the unsupported line
                    x[i] = 1.0
                except ValueError:
                    pass

    frames = _frames(info.value)
    assert not _internal(frames), frames
    assert (frames[-1].name, frames[-1].lineno) == ("guarded", _line_of("try:  # the unsupported line"))


def test_an_array_shorter_than_its_loop_ends_at_the_kernel_line(arch):
    with pytest.raises(IndexError, match="reads index up to 8 on axis 0") as info:
        differences(qgraph.from_numpy(np.ones(8)), qgraph.ndarray(qgraph.f64, (8,)))
    frames = _frames(info.value)
    assert not _internal(frames), frames
    kernel_line = _line_of("# reads one past the end when y is as long as x")
    assert (frames[-1].name, frames[-1].lineno) == ("differences", kernel_line)


def test_an_error_in_a_step_ends_at_the_steps_line(arch):
    x, y = qgraph.ndarray(qgraph.f64, (4,)), qgraph.ndarray(qgraph.f64, (4,))
    with pytest.raises(TypeError, match="argument 'a'") as info:
        step(x, y)
    frames = _frames(info.value)
    assert not _internal(frames), frames
    assert [f.lineno for f in frames[-2:]] == [frames[-2].lineno, _line_of("# the step's bad call")]
    assert frames[-2].line == "step(x, y)"


def test_the_full_traceback_and_chain_come_back_under_the_switch(arch, monkeypatch):
    monkeypatch.setenv("QGRAPH_TRACEBACK", "full")
    x, y = qgraph.ndarray(qgraph.f64, (4,)), qgraph.ndarray(qgraph.f64, (4,))
    with pytest.raises(TypeError, match="argument 'a'") as info:
        scale_into(x, y, "two")
    frames = _frames(info.value)
    assert any(f.filename.startswith("<qgraph: launch of kernel scale_into") for f in frames), frames
    assert frames[-1].filename.startswith(PACKAGE)  # where qgraph raised it
    with pytest.raises(qgraph.QgraphSyntaxError) as info:
        adds_text(x, y)
    assert info.value.__cause__ is not None  # numba's error, chained as raised
    assert len(_internal(_frames(info.value))) >= 3  # the binder, the launch, the compile that raised
    assert not hasattr(info.value, "_qgraph_short")


def test_the_switch_takes_short_or_full():
    Settings.from_environ({"QGRAPH_TRACEBACK": " Full "})
    Settings.from_environ({"QGRAPH_TRACEBACK": "short"})
    with pytest.raises(qgraph.QgraphError, match=r"QGRAPH_TRACEBACK='verbose': expected 'short' .* or 'full'"):
        Settings.from_environ({"QGRAPH_TRACEBACK": "verbose"})
    assert tracebacks.traceback_mode({"QGRAPH_TRACEBACK": "verbose"}) == "full"  # nothing lost meanwhile
    assert tracebacks.traceback_mode({}) == "short"


def test_a_failure_that_is_no_raise_of_qgraphs_keeps_every_frame():
    """A failing operation inside qgraph (a bug, not an error said on purpose) keeps its frames: the
    report needs them."""
    namespace: dict = {}
    exec(compile("def broken(a):\n    return a + 1\n", PACKAGE + "broken_module.py", "exec"), namespace)
    entry = tracebacks.entry_point(namespace["broken"])
    with pytest.raises(TypeError) as info:
        entry(None)
    frames = _frames(info.value)
    assert (frames[-1].filename, frames[-1].name) == (PACKAGE + "broken_module.py", "broken")
    assert frames[-2].name == "test_a_failure_that_is_no_raise_of_qgraphs_keeps_every_frame"  # no wrapper's frame


def test_tape_backward_given_an_array_it_never_saw_names_the_fix(arch):
    x = qgraph.from_numpy(np.ones(3), requires_grad=True)
    loss = qgraph.ndarray(qgraph.f64, (1,))
    with qgraph.Tape() as tape:
        sum_squares(x, loss)
    for wrong in (np.ones(1), loss.to_numpy()):  # a gradient, PyTorch-style; a copy of the loss
        with pytest.raises(TypeError, match=r"no recorded call passed .* tape\.backward\(loss\) sets its gradient "
                                            r"to ones, and tape\.backward\(grads=\{loss: seed\}\) to another seed "
                                            r"\(the recorded calls wrote 'loss' of kernel sum_squares\)") as info:
            tape.backward(wrong)
        frames = _frames(info.value)
        assert not _internal(frames), frames
        assert frames[-1].line == "tape.backward(wrong)"
    tape.backward(loss)
    np.testing.assert_allclose(x.grad.to_numpy(), 2.0)
