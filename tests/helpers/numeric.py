"""NumPy round trips through kernels and the checks on the values they leave (test_precision.py,
test_func_precision.py, test_index_ranges.py, test_ndrange_blocks.py, test_math_functions.py)."""

from __future__ import annotations

import numpy as np

import qgraph


def call(kernel, *args):
    """Run `kernel` on device copies of the NumPy arrays among `args`, then copy them back."""
    dev = [qgraph.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
    kernel(*dev)
    for a, d in zip(args, dev):
        if isinstance(a, np.ndarray):
            a[...] = d.to_numpy()


def is_float32_valued(values: np.ndarray) -> bool:
    """Every value is a float32's (what a float32 computation written to float64 arrays leaves)."""
    return bool(np.all(values == values.astype(np.float32).astype(np.float64)))
