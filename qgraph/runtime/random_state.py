"""The state of in-kernel random numbers: the seed, and per target an array [seed, epoch].

Kernels that draw read the array (an implicit parameter, lang.front.globals_used) and advance
its epoch once per call or device-loop pass.
"""

from __future__ import annotations

import operator

import numpy as np

from .arrays import Ndarray
from .state import STATE


def rng_state(target=None) -> Ndarray:
    """The [seed, epoch] array of `target` (default: this thread's current one), made on first use.
    Every device starts from the seed."""
    if target is None:
        target = STATE.current()
    array = STATE.rng_arrays.get(target)
    if array is None:
        from .state import device

        if target is STATE.current():
            array = Ndarray(np.uint64, (2,))
        else:
            with device(target.device.info.ordinal):
                array = Ndarray(np.uint64, (2,))
        array.from_numpy(np.array([STATE.seed, 0], np.uint64))
        STATE.rng_arrays[target] = array
    return array


def seed(value: int) -> None:
    """Seed qgraph.random(), randn() and randint() in kernels: the same seed gives the same
    numbers on every backend and run; each later kernel call draws fresh ones."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"qgraph.seed() takes an int, got {value!r}") from None
    if not 0 <= value < 1 << 64:
        raise ValueError(f"qgraph.seed({value}): the seed must be in [0, 2**64)")
    STATE.seed = value
    for array in STATE.rng_arrays.values():
        array.from_numpy(np.array([value, 0], np.uint64))
