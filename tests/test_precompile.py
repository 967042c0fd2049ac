"""Ahead-of-time compilation (issue 17): qgraph.compile(kernel, *example_args) compiles and caches
a signature without running the kernel; a later call (in this process, or a fresh one reading the
compile cache) finds it compiled."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import qgraph


@qgraph.kernel
def axpy(x, y, a: float, *, times=1):
    for i in range(x.shape[0]):
        y[i] += a * x[i] * times


@qgraph.kernel
def broken(x):
    for i in range(x.shape[0]):
        x[i] = "a"


def test_compile_does_not_run_and_the_first_call_reuses_it(arch):
    x, y = qgraph.from_numpy(np.arange(4.0)), qgraph.from_numpy(np.ones(4))
    before = axpy.stats.specialisations
    assert qgraph.compile(axpy, x, y, 2.0) == ("float64[1d]", "float64[1d]", "float", "int")
    np.testing.assert_array_equal(y.to_numpy(), 1.0)  # not run
    assert axpy.stats.specialisations == before + 1
    assert axpy.compile(x, y, a=3.0, times=2) == ("float64[1d]", "float64[1d]", "float", "int")  # binds like a call
    axpy(x, y, 2.0)
    assert axpy.stats.specialisations == before + 1  # the call found it compiled
    np.testing.assert_array_equal(y.to_numpy(), 1.0 + 2.0 * np.arange(4.0))


def test_compile_reports_what_a_call_would(arch):
    ones = qgraph.from_numpy(np.ones(2))
    with pytest.raises(TypeError, match="argument 'a': expected a float scalar, got an array"):
        qgraph.compile(axpy, ones, ones, ones)
    with pytest.raises(TypeError, match=r"compile\(\) missing 2 required positional arguments: 'y' and 'a'"):
        axpy.compile(ones)
    with pytest.raises(qgraph.QgraphSyntaxError, match="cannot store the str 'a' into an element of a float64"):
        qgraph.compile(broken, ones)
    with pytest.raises(TypeError, match="qgraph.compile takes a @qgraph.kernel"):
        qgraph.compile(print, 1)


_WORKER = """
import sys
import numpy as np
import qgraph
qgraph.init(sys.argv[1])
import aot_module
x = qgraph.from_numpy(np.arange(5.0))
y = qgraph.from_numpy(np.zeros(5))
if sys.argv[2] == "compile":
    print(qgraph.compile(aot_module.scale, x, y, 3.0))
else:
    aot_module.scale(x, y, 3.0)
    print(y.to_numpy().tolist(), aot_module.scale.stats.specialisations, aot_module.scale.stats.cache_loads)
"""


def test_a_fresh_process_loads_a_precompiled_signature_from_the_cache(arch, tmp_path):
    (tmp_path / "aot_module.py").write_text("import qgraph\n\n\n@qgraph.kernel\ndef scale(x, y, a: float):\n"
                                            "    for i in range(x.shape[0]):\n        y[i] = a * x[i]\n")
    (tmp_path / "worker.py").write_text(_WORKER)
    env = dict(os.environ, QGRAPH_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))

    def worker(mode: str) -> str:
        done = subprocess.run([sys.executable, str(tmp_path / "worker.py"), arch, mode], env=env, text=True,
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert worker("compile") == "('float64[1d]', 'float64[1d]', 'float')"
    assert worker("call") == "[0.0, 3.0, 6.0, 9.0, 12.0] 1 1"  # one signature, loaded from the cache


@qgraph.kernel
def mixed(a, b, c, d, e):
    for i in range(a.shape[0]):
        a[i, 0] = b + c + d[i].x + e[i]


def test_example_arguments_from_signature_texts_give_that_signature(arch):
    from qgraph.cli.precompile import example_arguments

    texts = ["float32[2d]", "float", "int32", "float32x3[1d]", "float64[1d]"]
    assert qgraph.compile(mixed, *example_arguments(texts, arch)) == tuple(texts)
    if arch == "cpu":
        assert qgraph.compile(mixed, *example_arguments(texts[:4] + ["float64[1d,strided]"], arch))[4] == \
            "float64[1d,strided]"
    with pytest.raises(ValueError, match="'complex64' is not a dtype|kernels take bool, integer and float"):
        example_arguments(["complex64[1d]"], arch)
    with pytest.raises(ValueError, match="'floot32' is not a dtype"):
        example_arguments(["floot32[1d]"], arch)


_CALLER = """
import sys
import numpy as np
import qgraph
qgraph.init(sys.argv[1])
import aot_cli_module as m
x, y = qgraph.from_numpy(np.arange(3.0)), qgraph.from_numpy(np.zeros(3))
m.scale(x, y, 2.0)
print(y.to_numpy().tolist(), m.scale.stats.specialisations, m.scale.stats.cache_loads)
"""


def test_precompile_from_the_shell_then_a_fresh_process_loads_it(arch, tmp_path):
    (tmp_path / "aot_cli_module.py").write_text(
        "import qgraph\n\n\n@qgraph.kernel\ndef scale(x, y, a: float):\n    for i in range(x.shape[0]):\n"
        "        y[i] = a * x[i]\n\n\ndef warm():\n    raise RuntimeError('warm-up failed')\n")
    (tmp_path / "caller.py").write_text(_CALLER)
    env = dict(os.environ, QGRAPH_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))

    def shell(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *argv], env=env, text=True, capture_output=True, timeout=300,
                              cwd=tmp_path)

    done = shell("-m", "qgraph", "--arch", arch, "precompile", "aot_cli_module:scale", "float64[1d]", "float64[1d]",
                 "float")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("scale(float64[1d], float64[1d], float) on " + arch + ": compiled in ")
    again = shell("-m", "qgraph", "--arch", arch, "precompile", str(tmp_path / "aot_cli_module.py") + ":scale",
                  "float64[1d]", "float64[1d]", "float")
    assert "loaded from the compile cache" in again.stdout, again.stderr
    call = shell(str(tmp_path / "caller.py"), arch)
    assert call.returncode == 0, call.stderr
    assert call.stdout.strip() == "[0.0, 2.0, 4.0] 1 1"  # its first call loaded, compiled nothing

    missing = shell("-m", "qgraph", "--arch", arch, "precompile", "aot_cli_module:scale")
    assert missing.returncode == 2 and "give the type of each argument (x, y, a)" in missing.stderr
    bad_type = shell("-m", "qgraph", "--arch", arch, "precompile", "aot_cli_module:scale", "float64[1d]", "floot")
    assert bad_type.returncode == 2 and "'floot' is not a dtype" in bad_type.stderr
    failing = shell("-m", "qgraph", "--arch", arch, "precompile", "aot_cli_module:warm")
    assert failing.returncode != 0 and "warm-up failed" in failing.stderr
