"""Names a kernel body may use besides Python and numba: ndrange, serial, random numbers and
the atomics.

Called from plain Python these run serially (handy for debugging); inside kernels codegen
replaces them with each backend's atomic instruction.
"""

from __future__ import annotations

import itertools


def ndrange(*bounds):
    """Iterate over a 1- to 3-D index space; each bound is an int or a (start, stop) pair.

    As the iterator of a top-level kernel loop, every index tuple is one parallel iteration.
    """
    ranges = [range(*b) if isinstance(b, tuple) else range(b) for b in bounds]
    if len(ranges) == 1:
        return iter(ranges[0])
    return itertools.product(*ranges)


def serial(iterable):
    """Run a loop in one thread: `for i in qgraph.serial(range(n)):` at the top level of a
    kernel is a serial task (a prefix sum, a recurrence), not a parallel loop."""
    return iterable


def _flag_value(flag) -> bool:
    import numpy as np

    return bool(np.asarray(flag).reshape(-1)[0])


def loop(flag, max_iterations=None, unroll=None):
    """`while qgraph.loop(flag):` at the top level of a kernel body: a device loop whose body
    repeats while the int32 array `flag` is non-zero, tested before each pass (as Python's
    while reads it). `max_iterations=` overrides the kernel's runaway guard for this loop;
    `unroll=` the kernel's copies of the body per device pass (docs/control-flow.md)."""
    return _flag_value(flag)


def cond(flag):
    """`if qgraph.cond(flag): ... else: ...` at the top level of a kernel body: a device branch
    on the int32 array `flag`, read once when the branch is reached."""
    return _flag_value(flag)


def repeat(count, unroll=None):
    """`for _ in qgraph.repeat(k):` at the top level of a kernel body: run the body `k` times on
    the device, `k` an integer parameter (a new value needs no rebuild); `unroll=` the kernel's
    copies of the body per device pass (docs/control-flow.md)."""
    return range(count)


CONTROL = {"loop": loop, "cond": cond, "repeat": repeat}


def report(name: str, value) -> None:
    """`qgraph.report("residual", change[0])` in a serial statement of a device loop body: append
    (pass number, value) to the loop's history, which the host reads while the loop runs
    (`kernel.history[name]`, docs/watching.md). Called from plain Python it does nothing."""


def report_fence() -> None:
    """Order a report's entry before its count (lang.front.reports): on CUDA a system-wide
    memory fence, so the host never sees a count ahead of its entry; nothing on the CPU."""


def clamp(x, lo, hi):
    """`x` limited to [lo, hi] (min(max(x, lo), hi)); per component for vectors."""
    return min(max(x, lo), hi)


def stop_gradient(x):
    """`x`, carrying no gradient: the adjoint treats it as a constant. For values that only steer
    (a convergence measure fed to atomic_max, a flag, a counter); per component for vectors."""
    return x


_HOST_RNG = None


def _host_rng():
    global _HOST_RNG
    if _HOST_RNG is None:
        import numpy as np

        _HOST_RNG = np.random.default_rng()
    return _HOST_RNG


def random(dtype=None):
    """A uniform random number in [0, 1). In a kernel: counter-based (Philox), the same for a
    seed on every backend, fresh on every call; `dtype` qgraph.f32/f64 (default: the
    kernel's default_float). Called from Python: NumPy's generator."""
    return _host_rng().random(dtype=dtype or "float64")


def randn(dtype=None):
    """A standard normal random number (see random())."""
    return _host_rng().standard_normal(dtype=dtype or "float64")


def randint(lo, hi):
    """A random integer in [lo, hi) (see random())."""
    return int(_host_rng().integers(lo, hi))


RANDOM = {f.__name__: f for f in (random, randn, randint)}


def atomic_add(arr, index, value):
    """Atomically add `value` to `arr[index]`; returns the old value."""
    old = arr[index]
    arr[index] = old + value
    return old


def atomic_sub(arr, index, value):
    """Atomically subtract `value` from `arr[index]`; returns the old value."""
    old = arr[index]
    arr[index] = old - value
    return old


def atomic_min(arr, index, value):
    """Atomically store min(arr[index], value); returns the old value."""
    old = arr[index]
    arr[index] = min(old, value)
    return old


def atomic_max(arr, index, value):
    """Atomically store max(arr[index], value); returns the old value."""
    old = arr[index]
    arr[index] = max(old, value)
    return old


ATOMICS = {f.__name__: f for f in (atomic_add, atomic_sub, atomic_min, atomic_max)}
