"""compiler/blas_probe: numba's array math (CPU and CUDA) loads without importing scipy.linalg,
and a user's own numba code in the same process behaves as before. Fresh processes: the
registries load once per process."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr
    return done.stdout.split()


def test_a_cpu_first_call_skips_the_blas_probe_and_leaves_numba_linear_algebra_working(tmp_path):
    """The CPU first call (cold, then warm from the cache) does not import scipy.linalg; afterwards
    a user's own numba np.dot and np.correlate give NumPy's values (BLAS found as before)."""
    code = f"""if True:
        import importlib.util, os, sys
        os.environ["QGRAPH_CACHE_DIR"] = {str(tmp_path)!r}
        import numpy as np
        import qgraph

        qgraph.init("cpu")
        from qgraph.bench.kernels import kernels_for

        kernel = kernels_for(2).graph  # x_k[i] = x_k[i] * a + c_k
        xs = [np.full(256, 2.0, np.float32) for _ in range(2)]
        kernel(*xs, 256, 3.0)
        assert all(np.allclose(x, 6.0 + c) for x, c in zip(xs, (1.0, 1.5))), xs
        print("loaded" if kernel.stats.cache_loads else "compiled")
        has_scipy = importlib.util.find_spec("scipy") is not None
        assert "scipy.linalg" not in sys.modules, "qgraph's first call imported scipy.linalg"
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
    assert _run(code)[0] == "loaded"  # numba loads its registries before reading the cached runner


def test_cuda_array_math_loads_without_scipy_and_leaves_scipy_importable():
    """The cold first CUDA compile skips numba-cuda's BLAS probe, and the hiding is undone: a later
    `import scipy.linalg` works as before."""
    pytest.importorskip("numba.cuda")
    _run("""if True:
        import importlib.util, sys
        from qgraph.compiler.blas_probe import import_cuda_array_math
        import numba.cuda
        import_cuda_array_math()
        math = sys.modules["numba.cuda.np.arraymath"]
        assert math._HAVE_BLAS is False, "probed BLAS"
        assert "scipy.linalg" not in sys.modules and sys.modules.get("scipy", 0) is not None
        if importlib.util.find_spec("scipy") is not None:
            import scipy.linalg
            assert scipy.linalg.cython_blas is not None
        print("ok")
    """)
