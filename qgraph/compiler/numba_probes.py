"""numba's import-time probes for optional packages, answered without importing those packages.

Importing numba (and numba-cuda) tries three optional packages that a qgraph compile never uses,
and a cold first compile pays for them (on the GPU host: PyYAML 26 ms, coverage 72 ms, SciPy
0.3-0.55 s with its linalg; on the CPU, numba loads the array-math registry before every cache
load too):
- `numba.core.config` (and numba-cuda's twin) imports PyYAML to read `.numba_config.yaml` from
  the working directory: refused only when no such file is there.
- `numba.misc.coverage_support` imports coverage to report the lines numba compiles: refused only
  when numba's JIT coverage (NUMBA_JIT_COVERAGE) is off. A process that already runs coverage has
  imported it, and then nothing is asked.
- `numba/__init__.py` imports SciPy to refuse a SciPy older than 1.0: refused when the installed
  SciPy's metadata says 1.0 or newer.
- the array-math registries probe for a host BLAS (`import scipy.linalg.cython_blas`): refused
  only inside qgraph's own import of them, which then sets the answer the probe would give.
A meta-path finder refuses each import to the probing numba frame alone, in that thread alone:
the same package imported by anyone else (another thread included) imports as usual.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

CPU_ARRAY_MATH = "numba.np.arraymath"
CUDA_ARRAY_MATH = "numba.cuda.np.arraymath"
NUMBA_CONFIG_FILE = ".numba_config.yaml"  # numba's name, read from the working directory

_IMPORTLIB_FRAMES = ("<frozen importlib", os.path.dirname(importlib.util.__file__))
_unprobed = threading.local()  # .active: this thread is inside `_import_unprobed`


def _yaml_unused() -> bool:
    return not os.path.isfile(NUMBA_CONFIG_FILE)


def _jit_coverage_off() -> bool:
    config = sys.modules.get("numba.core.config")
    return config is not None and not getattr(config, "JIT_COVERAGE", 1)


def _inside_unprobed_import() -> bool:
    return getattr(_unprobed, "active", False)


def _scipy_new_enough() -> bool:
    from .toolchain import installed_version

    major = installed_version("scipy", "scipy").partition(".")[0]
    return major.isdigit() and int(major) >= 1


# top-level package -> [({(probing module, its function)}, when that probe may be refused)]
_PROBES = {
    "yaml": [({("numba.core.config", "<module>"), ("numba.cuda.core.config", "<module>")}, _yaml_unused)],
    "coverage": [({("numba.misc.coverage_support", "<module>")}, _jit_coverage_off)],
    "scipy": [({(CPU_ARRAY_MATH, "_check_blas"), (CUDA_ARRAY_MATH, "_check_blas")}, _inside_unprobed_import),
              ({("numba", "_ensure_critical_deps")}, _scipy_new_enough)],
}


class ProbeGate:
    """Meta-path finder: raises ImportError for a package in `_PROBES` when one of the two
    nearest importing frames is the numba probe named there and its condition holds; otherwise
    lets the import go on (returns None)."""

    def find_spec(self, name: str, path=None, target=None):
        for probers, may_refuse in _PROBES.get(name.partition(".")[0], ()):
            if _probing_frame(probers) and may_refuse():
                raise ModuleNotFoundError(f"{name}: not needed by qgraph's numba (compiler/numba_probes)", name=name)
        return None


def _probing_frame(probers: set) -> bool:
    """Whether one of the two nearest frames outside importlib is one of `probers`."""
    frame, seen = sys._getframe(2), 0
    while frame is not None and seen < 2:
        if not frame.f_code.co_filename.startswith(_IMPORTLIB_FRAMES):
            if (frame.f_globals.get("__name__"), frame.f_code.co_name) in probers:
                return True
            seen += 1
        frame = frame.f_back
    return False


GATE = ProbeGate()


def install_gate() -> None:
    """Put the gate first on sys.meta_path (once), before anything imports numba."""
    if not any(finder is GATE for finder in sys.meta_path):
        sys.meta_path.insert(0, GATE)


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
    """Import `module` with its BLAS probe refused; whether it was (False when the module was
    imported already, or SciPy's linalg is, so that the probe was or is free)."""
    if module in sys.modules or "scipy.linalg" in sys.modules:
        return False
    _unprobed.active = True
    try:
        __import__(module)
    finally:
        _unprobed.active = False
    return True


def _scipy_linalg_installed() -> bool:
    """Without importing SciPy (find_spec of a submodule would: 37-50 ms)."""
    try:
        spec = importlib.util.find_spec("scipy")
    except (ImportError, ValueError):  # a broken SciPy
        return False
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    return any(os.path.isfile(os.path.join(place, "linalg", "__init__.py")) for place in locations)
