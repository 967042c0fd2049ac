"""Which compiled form runs a CPU signature (lang.cpu.serial_form): the serial form until a call
of it is timed on several numba threads, then the parallel form if a pass took long.

The serial form's own check sees only sizes: an all-pairs N-body step over 512 bodies ran 7.9x
slower serial than parallel on 16 threads (0.87 against 0.11 ms). The second call the serial form
runs itself is timed (the first warms it up): where a pass took HEAVY_PASS_S or longer, the
signature moves to its parallel form for good (compiled then); otherwise it keeps the serial form
until a call is too large for it (the launcher then moves the signature to its parallel form).
"""

from __future__ import annotations

import os
import time

from ..compiler.numba_adapter import thread_controls, thread_count
from ..lang.cpu.loops import RunnerStatus


class CpuSpecialization:
    """What was compiled for one CPU signature: its generated program (units, debug sites, each
    unit's tasks) and flattened source, fixed once checked; and its parallel form, compiled the
    first time it is needed where the program has a serial form too (lang.cpu.serial_form)."""

    __slots__ = ("key", "program", "flat", "parallel")

    def __init__(self, key: tuple, program, flat) -> None:
        self.key, self.program, self.flat = key, program, flat
        self.parallel = None


# a pass this long serially is worth a parallel loop's start and join (about 5-20 us on many threads)
HEAVY_PASS_S = 20e-6


class FirstRunTimer:
    """Stands in for a signature's serial form until one call of it is timed; then `keep` puts the
    form chosen in its place (`decided` holds it for a launcher that registers the timer later)."""

    __slots__ = ("serial", "loops", "parallel", "keep", "decided", "warm")

    def __init__(self, serial, loops: bool, parallel, keep) -> None:
        """`parallel(values)`: the signature's parallel form, compiled the first time."""
        self.serial, self.loops, self.parallel, self.keep, self.decided = serial, loops, parallel, keep, None
        self.warm = False

    def __call__(self, *args):
        if thread_count() <= 1:  # nothing to gain from threads: the serial form for good
            self._decide(self.serial)
            return self.serial(*args)
        if not self.warm:  # a compiled function's first run pays for more than its work (8 elements: over 20 us)
            self.warm = True
            return self.serial(*args)
        start = time.perf_counter()
        status = self.serial(*args)
        elapsed = time.perf_counter() - start
        code = status[0] if self.loops else status
        if code == RunnerStatus.NEEDS_PARALLEL:  # handed over before any task (the launcher moves the signature)
            return status
        passes = max(1, status[2]) if self.loops else 1
        self._decide(self.parallel(args[:-1]) if elapsed / passes >= HEAVY_PASS_S else self.serial)
        return status

    def _decide(self, runner) -> None:
        if self.decided is None:
            self.decided = runner
            self.keep(self, runner)


# how soon the other thread count is tried again: after a switch, then doubling while the current one wins
PROBE_MIN_S, PROBE_MAX_S = 0.01, 0.5
PROBE_CALLS = 4  # a trial of the other count: its first call wakes the threads (not counted), the rest timed
LOSING = 4.0  # a timed trial call this many times the current count's pass ends the trial at once
SWITCH_BELOW = 0.85  # the other count takes over when its trial's pass costs less than this share of the current's
WEIGHT = 0.25  # of a new timing in the current count's running mean
LONG_CALL_S = 1e-3  # a call after one this long first looks at the load (a device loop's call may run for minutes)
_THREADS: list = []  # (get, set) of the calling thread's numba threads, once numba's pool runs


class ThreadGovernor:
    """Runs a signature's parallel form on the calling thread's numba threads, or on one thread, whichever
    runs a pass faster now. Where other processes keep the cores busy, a parallel loop waits at its join
    for a thread the OS descheduled (a time slice, milliseconds): a 256x256 Jacobi sweep ran 125 passes/s
    on 2 threads beside 2 busy processes, 55,000 on one. The other count gets a trial of PROBE_CALLS calls
    every PROBE_MIN_S to PROBE_MAX_S (longer while the current one keeps winning), so a change of load is
    followed within half a second, a noisy timing costs a trial, and a losing trial ends after two calls.
    A call's passes all run on its count, so a call that may be long (a device loop's, or one after a long
    call) runs on one thread if the cores are busy as it starts. The count is the calling thread's (numba's
    set_num_threads is per thread), set for a call and restored."""

    __slots__ = ("runner", "loops", "serial_of", "serial", "cost", "one", "probe_at", "gap", "trial", "total",
                 "timed", "long", "warm")

    def __init__(self, runner, loops: bool, serial_of=None) -> None:
        """`serial_of(args)`: the signature's serial form, compiled for the runner's `args` (None without
        one), which one thread runs where it takes the call (faster than the parallel form on one thread)."""
        self.runner, self.loops, self.serial_of = runner, loops, serial_of
        self.serial = None  # the serial form, once the one-thread count first runs; False: it cannot serve
        self.cost = [0.0, 0.0]  # seconds per pass: [all threads, one thread]; the current's a running mean
        self.one = False  # the current choice: one thread
        self.probe_at = 0.0  # perf_counter time after which the other count gets a trial
        self.gap = PROBE_MIN_S
        self.trial = 0  # calls left in the other count's trial (0: none running)
        self.total, self.timed = 0.0, 0  # the trial's timed seconds per pass, and how many
        self.long = True  # the last call took LONG_CALL_S or more (the first is taken as long)
        self.warm = False  # a first call ran (not timed: it wakes the threads and runs new code, 7x a later call)
        if not _THREADS:
            _THREADS.extend(thread_controls())

    def __call__(self, *args):
        get, set_threads = _THREADS
        threads = get()
        if threads <= 1:  # the user's one thread: nothing to choose
            return self.runner(*args)
        start = time.perf_counter()
        if not self.trial and start >= self.probe_at and self.cost[self.one]:  # the current count timed first
            if self.one and not cores_free_for(threads):  # busy cores: a trial would only wait on them
                self.gap = min(2 * self.gap, PROBE_MAX_S)
                self.probe_at = start + self.gap
            else:
                self.trial, self.total, self.timed = PROBE_CALLS, 0.0, 0
        one = self.one != (self.trial > 0)
        if not one and (self.long or self.loops) and not self.trial and not cores_free_for(threads):
            # a call that may be long, on a busy machine (its passes cannot change the count): one thread,
            # from now on, with the trials of all threads waiting for free cores
            one = self.one = True
            self.gap, self.probe_at = PROBE_MIN_S, start + PROBE_MIN_S
        if one:
            set_threads(1)
            try:
                status = self._one_thread(args)
            finally:
                set_threads(threads)
        else:
            status = self.runner(*args)
        per_pass = time.perf_counter() - start
        self.long = per_pass >= LONG_CALL_S
        if self.loops:
            per_pass /= max(1, status[2])
        if self.trial:
            self._tried(one, per_pass)
        elif not self.warm:
            self.warm = True
        else:  # one timing moves the mean by at most WEIGHT * LOSING of it: a preempted call is not a trend
            old = self.cost[one]
            self.cost[one] = old + WEIGHT * (min(per_pass, LOSING * old) - old) if old else per_pass
        return status

    def _one_thread(self, args: tuple):
        """A call on one thread: the serial form where it takes it, else the parallel form."""
        serial = self.serial
        if serial is None:
            serial = self.serial = (self.serial_of(args) if self.serial_of else None) or False
        if serial:
            status = serial(*args)
            code = status[0] if self.loops else status
            if code != RunnerStatus.NEEDS_PARALLEL:
                return status
            self.serial = False  # too large for it (nothing ran): the parallel form from now on
        return self.runner(*args)

    def _tried(self, one: bool, per_pass: float) -> None:
        """A trial call of the other count; at the trial's end, keep the current count or switch."""
        self.trial -= 1
        current = self.cost[self.one]
        if self.trial < PROBE_CALLS - 1:  # not the first, which woke the threads
            self.total += per_pass
            self.timed += 1
            if per_pass > LOSING * current:
                self.trial = 0
        if self.trial:
            return
        self.cost[one] = self.total / self.timed if self.timed else float("inf")
        if self.cost[one] < SWITCH_BELOW * current:
            self.one, self.gap = one, PROBE_MIN_S
        else:
            self.gap = min(2 * self.gap, PROBE_MAX_S)
        self.probe_at = time.perf_counter() + self.gap


_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_LOAD = [-1.0, 0]  # when /proc/loadavg was last read (perf_counter), and its runnable threads then
LOAD_FRESH_S = 1e-3  # a reading this recent is reused: at most a thousand reads a second
OWN_FRESH_S = 10e-3  # this process's own runnable threads, counted (60 us) at most this often
_OWN = [-1.0, 1]  # when they were last counted, and how many


def cores_free_for(threads: int) -> bool:
    """Whether the cores this process may use have room for `threads` threads beside what else runs now
    (Linux: /proc/loadavg's count of runnable threads); True where it cannot be read. numba's workers
    spin for 5-8 ms after a parallel loop, runnable but ready for the next: where the count says busy,
    this process's own runnable threads are counted (/proc/self/task) and taken out. Counted as other
    processes', they made back-to-back calls on an idle 2-core machine look busy and run on one thread
    (saxpy over 10^6 elements at 2.3x numba's time)."""
    now = time.perf_counter()
    if now - _LOAD[0] > LOAD_FRESH_S:
        try:
            with open("/proc/loadavg", "rb") as f:
                _LOAD[1] = int(f.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            _LOAD[1] = 1
        _LOAD[0] = now
    room = _CORES - min(threads, _CORES)
    if _LOAD[1] - 1 <= room:  # free even with every other runnable thread another process's
        return True
    if now - _OWN[0] > OWN_FRESH_S:
        _OWN[0], _OWN[1] = now, _own_runnable()
    return _LOAD[1] - _OWN[1] <= room


def _own_runnable() -> int:
    """This process's threads that are runnable now (this one among them), from /proc/self/task."""
    count = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # a thread that ended meanwhile
        end = stat.rfind(b")")  # the state follows the command name, which may hold spaces
        count += stat[end + 2:end + 3] == b"R"
    return max(count, 1)


def cpu_load() -> tuple[int, int | None]:
    """(cores this process may use, runnable threads besides the caller now, None where unknown), for
    `qgraph info` and the demo to say when other processes hold the cores."""
    _LOAD[0] = -1.0  # a fresh reading
    cores_free_for(1)
    return _CORES, (_LOAD[1] - 1 if os.path.exists("/proc/loadavg") else None)
