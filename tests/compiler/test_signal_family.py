"""Signals over every loop form (issue 46): Ctrl-C (SIGINT from outside) and a SIGALRM handler that
raises its own exception stop a running call of each form on each target promptly; Ctrl-C as a
KeyboardInterrupt naming the kernel, the handler's exception unchanged; and the next call works.
Forms: a device WHILE loop, a repeat over a serial task, an interchanged repeat (one task running
its passes per element), a parallel loop whose iterations loop long (with and without a
reduction), a serial task's long loop.
Each case runs in a child process, so a signal that gets lost fails the test instead of hanging it."""

from __future__ import annotations

import re

import pytest
from helpers.arch import use_arch
from helpers.signalled_child import run_signalled

_CHILD = """
import signal, sys, time
import numpy as np
import qgraph
from helpers.loop_kernels import creep

signal.signal(signal.SIGINT, signal.default_int_handler)  # a test runner may start us with SIGINT ignored
arch, form, how = sys.argv[1:4]
qgraph.init(arch)
BIG = 1 << 40 if arch == "cpu" else 1 << 30


@qgraph.kernel
def tally(x, k: int):
    for _ in qgraph.repeat(k):
        x[0] = x[0] * 0.5 + 1.0


@qgraph.kernel
def relax(x, k: int):
    for _ in qgraph.repeat(k):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5 + 1.0


@qgraph.kernel
def heavy(x, m: int):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(m):
            s = s * 0.5 + 1.0
        x[i] = s


@qgraph.kernel
def reduction(x, total, m: int):
    for i in range(x.shape[0]):
        s = 0.0
        for j in range(m):
            s = s * 0.5 + 1.0
        total[0] += s


@qgraph.kernel
def serial(x, m: int):
    for j in qgraph.serial(range(m)):
        x[0] = x[0] * 0.5 + 1.0


x = qgraph.ndarray(qgraph.f64, (1 << 20 if form in ("heavy", "reduction") else 64,))
count, flag = qgraph.ndarray(qgraph.i64, (1,)), qgraph.from_numpy(np.ones(1, np.int32))
total = qgraph.ndarray(qgraph.f64, (1,))
stop_at, three = qgraph.from_numpy(np.array([BIG])), qgraph.from_numpy(np.array([3]))
kernel, long_args, short_args = {  # (a heavy iteration loops 65,536 times: the whole call about a minute)
    "while": (creep, (x, count, flag, stop_at), (x, count, flag, three)),
    "repeat-serial": (tally, (x, BIG), (x, 3)),
    "interchanged": (relax, (x, BIG), (x, 3)),
    "heavy": (heavy, (x, 1 << 16), (x, 3)),
    "reduction": (reduction, (x, total, 1 << 16), (x, total, 3)),
    "serial-task": (serial, (x, BIG), (x, 3)),
}[form]
qgraph.compile(kernel, *long_args)  # the signal comes while it runs, not while it compiles


class Timeout(Exception):
    pass


fired = []


def alarm(signum, frame):
    fired.append(time.perf_counter())
    raise Timeout("the user's own")


signal.signal(signal.SIGALRM, alarm)
print("ready", flush=True)
if how == "alarm":
    signal.setitimer(signal.ITIMER_REAL, 0.5)
try:
    kernel(*long_args)
    qgraph.sync()
    print("no stop", flush=True)
except BaseException as e:
    late = time.perf_counter() - fired[0] if fired else -1.0
    print(f"stopped: {type(e).__name__}: {e} | late {late:.3f}", flush=True)
qgraph.sync()
count.fill(0)
flag.fill(1)
kernel(*short_args)
qgraph.sync()
print("next call works", flush=True)
"""

FORMS = ["while", "repeat-serial", "interchanged", "heavy", "reduction", "serial-task"]


@pytest.mark.parametrize("how", ["sigint", "alarm"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("arch", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_a_signal_stops_every_loop_form(tmp_path, arch, form, how):
    use_arch(arch)  # (skips without a GPU)
    if arch == "cuda" and form == "serial-task":
        pytest.skip("a CUDA serial task is one thread of one kernel: it stops when it ends (docs/watching.md)")
    if arch == "cuda" and form in ("heavy", "reduction"):
        pytest.skip("a CUDA parallel kernel is not interrupted inside its iterations (docs/watching.md)")
    out, _ = run_signalled(_CHILD, tmp_path, (arch, form, how), sigint_after=0.5 if how == "sigint" else None)
    assert "no stop" not in out, out
    if how == "sigint":
        assert re.search(r"stopped: KeyboardInterrupt: kernel \w+ was interrupted|stopped: KeyboardInterrupt: "
                         r"kernel \w+: the (device|interchanged repeat) loop at line \d+ was cancelled", out), out
    else:  # the handler's exception, unchanged, soon after it ran
        found = re.search(r"stopped: Timeout: the user's own \| late ([\d.]+)", out)
        assert found, out
        assert float(found.group(1)) < 1.0, out
    assert "next call works" in out, out
