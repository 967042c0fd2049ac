"""kernel.cancel() over every loop form a kernel can take x every context a call runs in, on each
target (issue 46): the call raises LoopCancelled naming the kernel, the loop's line and the pass,
promptly, and the next call of the same kernel works. Forms: a device WHILE loop (the CPU's serial
form on small arrays, its parallel form on large ones), a repeat over a serial task, a repeat
kept a loop (interchange=False), an interchanged repeat (one task running its passes per
element) and a temporally tiled stencil repeat (CUDA: a launch runs 3 passes over tiles).
Contexts: a plain call, a call in a @qgraph.graph step, a call recorded under a Tape (which runs
a recording copy of the kernel) and a cancel that arrives while the call compiles."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time

import numpy as np
import pytest
from helpers.loop_kernels import creep, smooth

import qgraph
from qgraph.backends import cpu as cpu_backend
from qgraph.backends import cuda as cuda_backend

BIG = 1 << 40  # passes no test waits for: only a cancel ends these loops (CPU)
# on a GPU a pass is so short that a failed cancel ends within seconds instead
CUDA_BIG = {"interchanged": 1 << 32, "while": 1 << 20, "repeat-serial": 1 << 20, "repeat": 1 << 20, "tiled": 1 << 20}


def _while_kernel():
    # a kernel of its own, compiled afresh by each test
    return qgraph.kernel(graph_while="flag", max_iterations=None)(creep.__wrapped__)


def _serial_repeat_kernel():
    @qgraph.kernel
    def tally(x, k: int):
        for _ in qgraph.repeat(k):
            x[0] = x[0] * 0.5 + 1.0

    return tally


def _parallel_repeat_kernel(interchange: bool):
    @qgraph.kernel(interchange=interchange)
    def relax(x, k: int):
        for _ in qgraph.repeat(k):
            for i in range(x.shape[0]):
                x[i] = x[i] * 0.5 + 1.0

    return relax


def _tiled_kernel():
    return qgraph.kernel(temporal_tiling=3)(smooth.__wrapped__)  # test_temporal_tiling's stencil, afresh


class Form:
    """A loop form: its kernel (made afresh, so a test compiles it) and the arguments of a short
    call (passes) and of one only a cancel ends."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size = name, size
        make = {"while": _while_kernel, "repeat-serial": _serial_repeat_kernel,
                "repeat": lambda: _parallel_repeat_kernel(False),
                "interchanged": lambda: _parallel_repeat_kernel(True), "tiled": _tiled_kernel}[name]
        self.kernel = make()
        self.x = qgraph.ndarray(qgraph.f64, (size,), requires_grad=True)
        self.b = qgraph.ndarray(qgraph.f64, (size,), requires_grad=True)
        if name == "while":
            self.count = qgraph.ndarray(qgraph.i64, (1,))
            self.flag = qgraph.from_numpy(np.ones(1, np.int32))
            self.stop = qgraph.ndarray(qgraph.i64, (1,))

    def args(self, passes: int) -> tuple:
        if self.name == "tiled":
            return (self.x, self.b, passes)
        if self.name != "while":
            return (self.x, passes)
        self.count.fill(0)
        self.flag.fill(1)
        self.stop.fill(passes)
        return (self.x, self.count, self.flag, self.stop)

    def passes_run(self) -> int:
        return int(self.count.to_numpy()[0]) if self.name == "while" else -1


def _call(context: str, form: Form, args: tuple) -> None:
    kernel = form.kernel
    if context == "step":
        run = qgraph.graph(lambda *a: kernel(*a))
        run(*args)
    elif context == "tape":
        with qgraph.Tape():
            kernel(*args)
    else:
        kernel(*args)
    qgraph.sync()


@contextlib.contextmanager
def _cancel_while_compiling(monkeypatch, kernel):
    """kernel.cancel() from inside the compile of the kernel's next specialisation."""
    originals = {m: m.interruptible_compile for m in (cpu_backend, cuda_backend)}

    @contextlib.contextmanager
    def compiling(name):
        kernel.cancel()
        with originals[cpu_backend](name):
            yield

    for module in originals:
        monkeypatch.setattr(module, "interruptible_compile", compiling)
    yield
    for module, original in originals.items():
        monkeypatch.setattr(module, "interruptible_compile", original)


FORMS = [("while", 8), ("while", 1 << 18), ("repeat-serial", 8), ("repeat", 64), ("interchanged", 64),
         ("tiled", 4096)]


@pytest.mark.parametrize("context", ["plain", "step", "tape", "compiling"])
@pytest.mark.parametrize("name,size", FORMS, ids=[f"{n}-{s}" for n, s in FORMS])
def test_cancel_stops_every_loop_form_in_every_context(loop_arch, monkeypatch, name, size, context):
    if context == "step" and loop_arch == "cuda-host":
        pytest.skip("a @qgraph.graph step needs the device WHILE loop")
    form = Form(name, size)
    big = CUDA_BIG[name] if loop_arch.startswith("cuda") else BIG
    call = "tape" if context == "tape" else "plain"
    if context == "compiling":
        with _cancel_while_compiling(monkeypatch, form.kernel), pytest.raises(qgraph.LoopCancelled) as info:
            _call(call, form, form.args(big))
        stopped = time.perf_counter()
    else:
        _call(context, form, form.args(3))  # compiled, its graph built
        form.kernel.compile(*form.args(big))  # and the CPU's parallel form, which a call this long runs
        timer = threading.Timer(0.2, form.kernel.cancel)
        asked = []
        timer.function = lambda: (asked.append(time.perf_counter()), form.kernel.cancel())
        timer.start()
        with pytest.raises(qgraph.LoopCancelled) as info:
            _call(context, form, form.args(big))
        stopped = time.perf_counter()
        timer.join()
        assert stopped - asked[0] < 1.0, f"the loop stopped {stopped - asked[0]:.2f} s after the cancel"
    message = str(info.value)
    kernel_name = form.kernel.__name__
    loop = "interchanged repeat" if name == "interchanged" else "device"
    assert re.search(rf"kernel {kernel_name}\w*: the {loop} loop at line \d+ was cancelled after pass [\d,]+",
                     message), message
    passes = int(re.search(r"after pass ([\d,]+)", message).group(1).replace(",", ""))
    assert passes < big
    if context == "plain" and name == "while":
        assert form.passes_run() == passes  # the arrays hold the last whole pass
    _call(context, form, form.args(3))  # the next call runs to its end
    if name == "while":
        assert form.passes_run() == 3
    if context != "step":  # (a step's calls run in its graph: its own stats report them)
        # an interchanged repeat is one task, no device loop (lang.front.interchange), on every target
        assert form.kernel.stats.iterations[:1] == (() if name == "interchanged" else (3,))


WATCHED = [("while", 8), ("repeat-serial", 8), ("repeat", 64), ("interchanged", 64), ("while", 1 << 18)]


@pytest.mark.parametrize("name,size", WATCHED, ids=[f"{n}-{s}" for n, s in WATCHED])
def test_a_watcher_thread_keeps_its_pace_during_every_loop_form(loop_arch, name, size):
    """A thread that ticks every millisecond (a progress poll, a GUI, a data loader) keeps about that
    pace while a loop runs, the CPU runner holding the GIL, and its last tick cancels the loop: its
    median wait stays under 5 ms (it was 6.3 ms, at worst 14, when the runner let it in only every
    1.25 default switch intervals), and the user's switch interval is theirs again after the call."""
    form = Form(name, size)
    big = CUDA_BIG[name] if loop_arch.startswith("cuda") else BIG
    _call("plain", form, form.args(3))
    form.kernel.compile(*form.args(big))
    ticks = []

    def watch():
        start = time.perf_counter()
        while time.perf_counter() - start < 0.4:
            time.sleep(0.001)
            ticks.append(time.perf_counter())
        form.kernel.cancel()

    before = sys.getswitchinterval()
    watcher = threading.Thread(target=watch)
    watcher.start()
    with pytest.raises(qgraph.LoopCancelled):
        _call("plain", form, form.args(big))
    watcher.join()
    gaps = np.diff(ticks)
    assert np.median(gaps) < 0.005, f"median {np.median(gaps) * 1e3:.1f} ms, max {gaps.max() * 1e3:.1f} ms"
    assert sys.getswitchinterval() == before
