"""numba's array-math registries (CPU and CUDA) imported without their host BLAS probe.

numba's `np/arraymath.py` and numba-cuda's twin probe for BLAS at import (`import
scipy.linalg.cython_blas`): 0.08 s on the development machine, 0.3-0.55 s on the GPU host where
SciPy is installed, paid by a cold first compile and, on the CPU, by every warm cache load too
(numba loads its registries before it reads a cached function). qgraph kernels make no BLAS call
(NumPy's linear algebra is refused in kernels: lang/flatten_calls), so scipy.linalg is hidden for
that one import; SciPy imports normally afterwards.
"""

from __future__ import annotations

import importlib.util
import sys

CPU_ARRAY_MATH = "numba.np.arraymath"
CUDA_ARRAY_MATH = "numba.cuda.np.arraymath"


def import_cpu_array_math() -> None:
    """numba's CPU array math, unprobed. Its probe's answer (`_HAVE_BLAS`) also picks how a user's
    own numba code computes np.correlate/np.convolve of floats (through np.dot, or a loop), so it
    is set to what the probe would find: SciPy's linalg installed (np.dot imports it when such
    code compiles)."""
    if _import_unprobed(CPU_ARRAY_MATH):
        sys.modules[CPU_ARRAY_MATH]._HAVE_BLAS = _scipy_linalg_installed()


def import_cuda_array_math() -> None:
    """numba-cuda's array math, unprobed: device code cannot call a host BLAS, so its answer
    stays "no BLAS" (np.correlate/np.convolve then use a loop, the only way that works on a GPU)."""
    _import_unprobed(CUDA_ARRAY_MATH)


def _import_unprobed(module: str) -> bool:
    """Import `module` with scipy.linalg hidden; whether the probe was skipped (False when the
    module was imported already, or SciPy's linalg is, so that the probe was or is free)."""
    if module in sys.modules or "scipy.linalg" in sys.modules:
        return False
    hidden = "scipy" if "scipy" not in sys.modules else "scipy.linalg"
    sys.modules[hidden] = None  # an import of it, or below it, raises ImportError
    try:
        __import__(module)
    finally:
        if sys.modules.get(hidden, False) is None:
            del sys.modules[hidden]
    return True


def _scipy_linalg_installed() -> bool:
    try:
        return importlib.util.find_spec("scipy.linalg") is not None
    except (ImportError, ValueError):  # no scipy at all, or a broken one
        return False
