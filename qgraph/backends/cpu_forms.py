"""Which compiled form runs a CPU signature (lang.cpu.serial_form): the serial form until a call
of it is timed on several numba threads, then the parallel form if a pass took long.

The serial form's own check sees only sizes: an all-pairs N-body step over 512 bodies ran 7.9x
slower serial than parallel on 16 threads (0.87 against 0.11 ms). The second call the serial form
runs itself is timed (the first warms it up): where a pass took HEAVY_PASS_S or longer, the
signature moves to its parallel form for good (compiled then); otherwise it keeps the serial form
until a call is too large for it (the launcher then moves the signature to its parallel form).
"""

from __future__ import annotations

import time

from ..compiler.numba_adapter import thread_count
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
