"""compiler/numba_probes: a first compile (CPU and CUDA) imports none of the optional packages
numba only probes for (SciPy, PyYAML, coverage), and what those probes serve still works: a user's
own numba linear algebra, a `.numba_config.yaml`, numba's JIT coverage, the packages themselves.
Fresh processes: numba and its registries load once per process."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

PROBED = ("scipy", "yaml", "coverage")


def _run(code: str, cwd=None, **env: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, **env})
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr
    return done.stdout.split()


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


FIRST_CPU_CALL = """
import os, sys
os.environ["QGRAPH_CACHE_DIR"] = {cache!r}
import numpy as np
import qgraph

qgraph.init("cpu")
from qgraph.bench.kernels import kernels_for

kernel = kernels_for(2).graph  # x_k[i] = x_k[i] * a + c_k
xs = [np.full(256, 2.0, np.float32) for _ in range(2)]
kernel(*xs, 256, 3.0)
assert all(np.allclose(x, 6.0 + c) for x, c in zip(xs, (1.0, 1.5))), xs
print("loaded" if kernel.stats.cache_loads else "compiled")
"""


def test_a_cpu_first_call_imports_no_probed_package_and_numba_linear_algebra_still_works(tmp_path):
    """Cold, then warm from the cache (numba loads its registries before it reads the cached
    runner): SciPy, PyYAML and coverage stay unimported; afterwards a user's own numba np.dot and
    np.correlate give NumPy's values (BLAS found, as numba's own probe would have)."""
    code = FIRST_CPU_CALL.format(cache=str(tmp_path)) + """
imported = [m for m in ("scipy", "yaml", "coverage") if m in sys.modules]
assert not imported, f"qgraph's first call imported {imported}"
import importlib.util
has_scipy = importlib.util.find_spec("scipy") is not None
assert sys.modules["numba.np.arraymath"]._HAVE_BLAS is has_scipy
if has_scipy:
    import numba

    @numba.njit
    def user_code(a, b):
        return np.dot(a, b), np.correlate(a, b)

    a, b = np.random.default_rng(1).random((2, 32))
    d, c = user_code(a, b)
    assert np.isclose(d, np.dot(a, b)) and np.allclose(c, np.correlate(a, b))
print("ok")
"""
    assert _run(code)[0] == "compiled"
    assert _run(code)[0] == "loaded"


def test_a_cuda_compile_imports_no_probed_package_and_they_import_afterwards():
    """numba-cuda's import and its registries (what a cold CUDA compile loads) leave SciPy, PyYAML
    and coverage unimported, its array math answers "no BLAS" (device code has none), and each
    package imports normally afterwards."""
    pytest.importorskip("numba.cuda")
    _run("""if True:
        import importlib.util, sys
        import qgraph
        import numba.cuda
        from qgraph.compiler.numba_adapter import cuda_namespace

        cuda_namespace()
        assert sys.modules["numba.cuda.np.arraymath"]._HAVE_BLAS is False, "probed BLAS"
        imported = [m for m in ("scipy", "yaml", "coverage") if m in sys.modules]
        assert not imported, f"numba-cuda's import imported {imported}"
        if importlib.util.find_spec("scipy") is not None:
            import scipy.linalg
            assert scipy.linalg.cython_blas is not None
        for name in ("yaml", "coverage"):
            if importlib.util.find_spec(name) is not None:
                __import__(name)
        print("ok")
    """)


def test_a_numba_config_file_in_the_working_directory_is_still_read(tmp_path):
    """With `.numba_config.yaml` beside the program, PyYAML is imported and numba applies it."""
    if not _installed("yaml"):
        pytest.skip("PyYAML is not installed")
    (tmp_path / ".numba_config.yaml").write_text("opt: '1'\n")
    code = FIRST_CPU_CALL.format(cache=str(tmp_path / "cache")) + """
import numba.core.config as config
assert "yaml" in sys.modules and int(config.OPT) == 1, int(config.OPT)
print("ok")
"""
    _run(code, cwd=tmp_path)


def test_numba_jit_coverage_still_imports_coverage(tmp_path):
    """NUMBA_JIT_COVERAGE=1 asks numba to report compiled lines to coverage: it is imported."""
    if not _installed("coverage"):
        pytest.skip("coverage is not installed")
    code = FIRST_CPU_CALL.format(cache=str(tmp_path)) + """
from numba.misc import coverage_support
assert "coverage" in sys.modules and coverage_support.coverage_available
print("ok")
"""
    _run(code, NUMBA_JIT_COVERAGE="1")


def test_the_gate_refuses_nothing_to_code_outside_numbas_probes():
    """A probed package imported by anyone else (here: this test, after installing the gate)
    imports as usual; only a numba probe's own frame is refused."""
    from qgraph.compiler.numba_probes import GATE, install_gate

    install_gate()
    assert sum(f is GATE for f in sys.meta_path) == 1
    install_gate()
    assert sum(f is GATE for f in sys.meta_path) == 1
    for name in PROBED:
        assert GATE.find_spec(name) is None
    namespace = {"__name__": "numba.core.config"}  # code that runs as numba's config module does
    with pytest.raises(ModuleNotFoundError, match="numba_probes"):
        exec(compile("import yaml.qgraph_test", "<numba.core.config>", "exec"), namespace)
