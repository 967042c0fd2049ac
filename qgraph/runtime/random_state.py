"""The state of in-kernel random numbers: the seed, and per target an array [seed, epoch].

Kernels that draw read the array (an implicit parameter, lang.globals_used) and advance
its epoch once per call or device-loop pass.
"""

from __future__ import annotations

import operator

import numpy as np

from .arrays import Ndarray
from .state import STATE


def rng_state() -> Ndarray:
    """The [seed, epoch] array of the current target, made on first use."""
    rng = STATE._rng
    if rng is None or rng[0] is not STATE.target:
        array = Ndarray(np.uint64, (2,))
        array.from_numpy(np.array([STATE.seed, 0], np.uint64))
        rng = STATE._rng = (STATE.target, array)
    return rng[1]


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
    if STATE._rng is not None and STATE._rng[0] is STATE.target:
        STATE._rng[1].from_numpy(np.array([value, 0], np.uint64))
    else:
        STATE._rng = None
