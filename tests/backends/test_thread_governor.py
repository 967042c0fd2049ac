"""The CPU's thread governor (backends.cpu_forms.ThreadGovernor): a parallel form runs on the calling
thread's numba threads or on one thread, whichever runs a pass faster now, and follows a change of
load; on a busy machine a parallel loop waits for descheduled threads at every join, which the
governor stops paying. The load is simulated by a runner whose pass costs depend on the thread count
it runs with, timed on a clock of its own, so these tests do not depend on what else runs on the machine."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import qgraph
from qgraph.backends import cpu_forms

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs numba's pool of 2+ threads")


class Clock:
    """The governor's clock, moved only by the simulated machine: timings that no other work on the
    real machine can disturb."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


CLOCK = Clock()


class Machine:
    """A runner whose call takes `cost[threads > 1]` seconds of the governor's clock, recording the
    thread counts it ran on."""

    def __init__(self, many: float, one: float) -> None:
        self.cost = {True: many, False: one}
        self.seen: list[int] = []

    def __call__(self, *args):
        threads = numba.get_num_threads()
        self.seen.append(threads)
        CLOCK.now += self.cost[threads > 1]


def _run(governor, seconds: float) -> None:
    end = CLOCK.now + seconds
    while CLOCK.now < end:
        governor()


@pytest.fixture(autouse=True)
def _two_threads():
    """Two numba threads for the calling thread (the suite's workers may run theirs on one each)."""
    before = numba.get_num_threads()
    numba.set_num_threads(2)
    yield
    numba.set_num_threads(before)


@pytest.fixture
def simulated(monkeypatch):
    """The simulated machine's clock for the governor, and trials every 2-20 ms of it."""
    monkeypatch.setattr(cpu_forms, "time", CLOCK)
    monkeypatch.setattr(cpu_forms, "PROBE_MIN_S", 0.002)
    monkeypatch.setattr(cpu_forms, "PROBE_MAX_S", 0.02)
    monkeypatch.setattr(cpu_forms, "cores_free_for", lambda threads: True)  # the machine is the fake one


def test_a_busy_machine_moves_the_calls_to_one_thread_and_a_free_one_back(simulated):
    threads = numba.get_num_threads()
    machine = Machine(many=2e-3, one=1e-4)  # joins waiting on descheduled threads
    governor = cpu_forms.ThreadGovernor(machine, loops=False)
    _run(governor, 0.3)
    assert governor.one
    recent = machine.seen[-200:]
    assert recent.count(1) > 0.9 * len(recent)  # the trials of all threads are few
    assert numba.get_num_threads() == threads  # the caller's count is restored after each call
    machine.cost = {True: 2e-5, False: 1e-4}  # the other processes ended: threads pay again
    _run(governor, 0.3)
    recent = machine.seen[-200:]
    assert recent.count(threads) > 0.8 * len(recent)  # but for trials of one thread


def test_an_idle_machine_keeps_its_threads_and_a_noisy_trial_does_not_move_it(simulated):
    machine = Machine(many=5e-5, one=2e-4)
    governor = cpu_forms.ThreadGovernor(machine, loops=False)
    _run(governor, 0.1)
    recent = machine.seen[-200:]
    assert recent.count(1) < 0.2 * len(recent)
    machine.cost = {True: 5e-5, False: 4.5e-5}  # one thread barely faster (within SWITCH_BELOW): no switch
    _run(governor, 0.2)
    share = machine.seen.count(1) / len(machine.seen)
    assert share < 0.2  # trials only


def test_a_caller_on_one_thread_is_left_alone(simulated):
    machine = Machine(many=1e-3, one=1e-5)
    governor = cpu_forms.ThreadGovernor(machine, loops=False)
    numba.set_num_threads(1)
    _run(governor, 0.02)
    assert set(machine.seen) == {1} and governor.cost == [0.0, 0.0]


@qgraph.kernel
def jacobi(u, v):
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        v[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


def test_a_governed_kernel_gives_the_same_values_on_either_count(monkeypatch):
    """A 2-D sweep over 128x128 (the parallel form, with a serial form for one thread): forced from one
    count to the other between calls, every call's values are NumPy's."""
    qgraph.init("cpu")
    rng = np.random.default_rng(0)
    u0 = rng.random((128, 128))
    u, v = u0.copy(), u0.copy()
    want_u, want_v = u0.copy(), u0.copy()
    monkeypatch.setattr(cpu_forms, "PROBE_MIN_S", 0.0)
    monkeypatch.setattr(cpu_forms, "PROBE_MAX_S", 0.0)  # a trial every call: both counts run in turn
    for _ in range(40):
        jacobi(u, v)
        want_v[1:-1, 1:-1] = 0.25 * (want_u[:-2, 1:-1] + want_u[2:, 1:-1] + want_u[1:-1, :-2] + want_u[1:-1, 2:])
        u, v, want_u, want_v = v, u, want_v, want_u
    np.testing.assert_allclose(u, want_u, rtol=1e-15)


def test_a_call_that_may_be_long_starts_on_one_thread_when_the_cores_are_busy(simulated, monkeypatch):
    """A device loop's call cannot change its count mid-call: it looks at the load as it starts, and
    while other processes hold the cores no trial of all threads runs."""
    monkeypatch.setattr(cpu_forms, "cores_free_for", lambda threads: False)
    machine = Machine(many=2e-3, one=1e-4)
    governor = cpu_forms.ThreadGovernor(machine, loops=False)
    governor()  # a first call is taken as long
    assert machine.seen == [1] and governor.one
    _run(governor, 0.1)
    assert set(machine.seen) == {1}
    monkeypatch.setattr(cpu_forms, "cores_free_for", lambda threads: True)
    machine.cost = {True: 2e-5, False: 1e-4}  # the cores are free again: the threads come back
    _run(governor, 0.2)
    recent = machine.seen[-200:]
    assert recent.count(1) < 0.2 * len(recent)


@qgraph.kernel
def float_sum(x, total):
    for i in range(x.shape[0]):
        total[0] += x[i]


def test_a_deterministic_sum_keeps_its_bits_when_a_busy_machine_would_move_it_to_one_thread(monkeypatch):
    """numba's partials fold per thread: the serial form's sum of 300,000 floats has other bits than
    the parallel form's. A deterministic kernel keeps its thread count (no governor), busy cores or not;
    a default one moves to one thread there and still sums what NumPy does."""
    qgraph.init("cpu")
    x = np.random.default_rng(1).random(300_000) - 0.5

    def total(kernel) -> float:
        out = np.zeros(1)
        kernel(x, out)
        return out[0]

    deterministic = float_sum.variant(deterministic=True)
    idle = total(deterministic)
    monkeypatch.setattr(cpu_forms, "cores_free_for", lambda threads: False)  # every core busy from now on
    assert [total(deterministic) for _ in range(3)] == [idle] * 3  # bit for bit
    governed = float_sum.variant()  # its first call, taken as long, runs on one thread
    np.testing.assert_allclose(total(governed), x.sum(), rtol=1e-10, atol=1e-10)


class WarmingMachine(Machine):
    """A Machine whose first call costs `first` seconds (threads woken, new code run)."""

    def __init__(self, many: float, one: float, first: float) -> None:
        super().__init__(many, one)
        self.first = first

    def __call__(self, *args):
        if not self.seen:
            CLOCK.now += self.first - self.cost[numba.get_num_threads() > 1]
        super().__call__(*args)


def test_a_slow_first_call_does_not_send_a_free_machine_to_one_thread(simulated):
    """The first call wakes numba's threads and runs the code for the first time (7x a later call):
    timed, it made one thread look 3x faster, and a free machine ran its next calls on one thread."""
    machine = WarmingMachine(many=1e-4, one=2.5e-4, first=8e-4)
    governor = cpu_forms.ThreadGovernor(machine, loops=False)
    for _ in range(20):
        governor()
    assert not governor.one
    assert machine.seen[1:].count(1) <= cpu_forms.PROBE_CALLS  # one trial of one thread at most


@pytest.mark.parametrize("runnable, own, free", [(2, 2, True), (3, 2, False), (3, 1, False), (2, 1, False)])
def test_this_process_spinning_workers_are_not_another_process_load(monkeypatch, runnable, own, free):
    """numba's workers stay runnable for milliseconds after a parallel loop: on 2 cores, this thread and a
    spinning worker (2 runnable, both ours) leave room for 2 threads; a third runnable thread, or a second
    that is not ours, is another process's."""
    monkeypatch.setattr(cpu_forms, "_CORES", 2)
    monkeypatch.setattr(cpu_forms, "_own_runnable", lambda: own)
    monkeypatch.setattr(cpu_forms, "_LOAD", [cpu_forms.time.perf_counter() + 60, runnable])  # a fresh reading
    monkeypatch.setattr(cpu_forms, "_OWN", [-1.0, 1])
    assert cpu_forms.cores_free_for(2) is free
