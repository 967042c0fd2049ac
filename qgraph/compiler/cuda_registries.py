"""numba-cuda's array-math registry, imported without its host BLAS probe.

numba-cuda's `np/arraymath.py` probes for BLAS at import (`import scipy.linalg.cython_blas`),
which costs 0.3-0.55 s of a cold first call where SciPy is installed (measured on the GPU host),
for host BLAS calls that no device code can make (and qgraph refuses NumPy's linear algebra in
kernels anyway: lang/flatten_calls). With SciPy hidden for that one import the probe says "no
BLAS"; SciPy imports normally afterwards."""

from __future__ import annotations

import sys

ARRAY_MATH = "numba.cuda.np.arraymath"


def import_array_math() -> None:
    """Import numba-cuda's array-math module (its typing registry loads it at the first compile)
    with SciPy's linalg hidden, unless SciPy's linalg is already imported (then the probe is free)."""
    if ARRAY_MATH in sys.modules or "scipy.linalg" in sys.modules:
        return
    hidden = "scipy" if "scipy" not in sys.modules else "scipy.linalg"
    sys.modules[hidden] = None  # an import of it, or below it, raises ImportError
    try:
        __import__(ARRAY_MATH)
    finally:
        if sys.modules.get(hidden, False) is None:
            del sys.modules[hidden]
