"""init / reset / current_arch / sync and the environment variables."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import qgraph
from qgraph.runtime import Settings, cache_directory


@qgraph.kernel
def inc(x):
    for i in range(x.shape[0]):
        x[i] += 1


def test_init_cpu_and_current_arch():
    qgraph.init("cpu")
    assert qgraph.current_arch() == "cpu"
    assert qgraph.device_info() is None


def test_init_rejects_unknown_arch():
    with pytest.raises(ValueError, match="expected 'cuda', 'cpu' or None"):
        qgraph.init("tpu")


def test_qgraph_arch_environment(monkeypatch):
    monkeypatch.setenv("QGRAPH_ARCH", "cpu")
    qgraph.init()
    assert qgraph.current_arch() == "cpu"
    monkeypatch.setenv("QGRAPH_ARCH", "gpu")
    with pytest.raises(qgraph.QgraphError, match="QGRAPH_ARCH='gpu'"):
        qgraph.init()


def test_init_cuda_without_a_usable_gpu_says_why():
    from helpers.arch import cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("a GPU is present")
    with pytest.raises(qgraph.QgraphError, match="CUDA is not usable"):
        qgraph.init("cuda")
    assert qgraph.current_arch() in ("cpu", "cuda")


def test_reinit_and_reset_drop_compiled_kernels(arch):
    x = qgraph.ndarray(qgraph.i64, (4,))
    inc(x)
    assert inc.stats.specialisations == 1
    qgraph.reset()
    assert inc.stats.specialisations == 0
    inc(x)
    qgraph.init(arch)
    inc(x)
    np.testing.assert_array_equal(x.to_numpy(), 3)


def test_kernel_called_before_any_init_initialises(tmp_path):
    script = tmp_path / "first.py"
    script.write_text(
        "import numpy as np, qgraph\n"
        "@qgraph.kernel\n"
        "def k(x):\n"
        "    for i in range(x.shape[0]):\n"
        "        x[i] = 2\n"
        "x = np.zeros(3)\n"
        "k(x)\n"
        "print(qgraph.current_arch(), x.sum())\n")
    env = dict(os.environ, QGRAPH_ARCH="cpu")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["cpu", "6.0"]


def test_settings_from_environment():
    s = Settings.from_environ({"QGRAPH_GRAPHS": "0", "QGRAPH_GRAPH_WHILE": "host", "QGRAPH_GRAPH_CACHE_SIZE": "3",
                               "QGRAPH_CACHE_DIR": "/tmp/qg-x"})
    assert (s.graphs, s.graph_while_host, s.graph_cache_size, s.cache_dir) == (False, True, 3, "/tmp/qg-x")
    assert Settings.from_environ({}).graphs and not Settings.from_environ({}).graph_while_host
    with pytest.raises(qgraph.QgraphError, match="QGRAPH_GRAPH_WHILE='sometimes'"):
        Settings.from_environ({"QGRAPH_GRAPH_WHILE": "sometimes"})
    with pytest.raises(qgraph.QgraphError, match="QGRAPH_GRAPH_CACHE_SIZE"):
        Settings.from_environ({"QGRAPH_GRAPH_CACHE_SIZE": "0"})



@pytest.mark.parametrize("name, text, said", [
    ("QGRAPH_MAX_ITERATIONS", str(2**64 + 5), "at most 9223372036854775807"),
    ("QGRAPH_CPU_SERIAL_BELOW", "1e26", "expected a non-negative integer"),
    ("QGRAPH_CPU_SERIAL_BELOW", str(2**63), "at most 9223372036854775807"),
    ("QGRAPH_DUMP", __file__, "exists and is not a directory"),
])
def test_an_environment_value_that_cannot_work_fails_at_init_naming_it(monkeypatch, name, text, said):
    monkeypatch.setenv(name, text)
    with pytest.raises(qgraph.QgraphError, match=f"{name}=.*{said}"):
        qgraph.init("cpu")
    monkeypatch.delenv(name)
    qgraph.init("cpu")  # the next init with good values works

# every boolean switch: (variable, Settings field, its value when unset)
BOOLEAN_SWITCHES = [("QGRAPH_GRAPHS", "graphs", True), ("QGRAPH_PDL", "programmatic_edges", True),
                    ("QGRAPH_DETERMINISTIC", "deterministic", False), ("QGRAPH_FAST_MATH", "fast_math", False),
                    ("QGRAPH_CACHE", "cache_dir", True)]


@pytest.mark.parametrize("name, field, default", BOOLEAN_SWITCHES)
def test_boolean_switches_take_exactly_the_documented_spellings(name, field, default):
    def value(text):
        got = getattr(Settings.from_environ({name: text, "QGRAPH_CACHE_DIR": "/c"}), field)
        return got is not None if field == "cache_dir" else got

    for text in ("1", "true", "on", "yes", " ON ", "Yes"):
        assert value(text) is True, text
    for text in ("0", "false", "off", "no", " OFF", "No "):
        assert value(text) is False, text
    assert value("") is default
    for text in ("disabled", "none", "2", "-1", "y", "enable"):
        with pytest.raises(qgraph.QgraphError, match=rf"{name}='{text}': expected 1, true, on, yes \(on\) or "
                                                     r"0, false, off, no \(off\)"):
            Settings.from_environ({name: text})


def test_cache_directory_defaults_and_off_switch():
    assert cache_directory({"QGRAPH_CACHE": "0"}) is None
    assert cache_directory({"XDG_CACHE_HOME": "/c"}) == "/c/qgraph"
    assert cache_directory({"QGRAPH_CACHE_DIR": "/d"}) == "/d"


def test_sync_waits_for_the_calls_queued_before_it(arch):
    """Calls return before their work is done on CUDA; after sync() qgraph's stream has nothing
    left to run (asked without waiting) and the arrays hold every call's result."""
    x = qgraph.ndarray(qgraph.i64, (1 << 16,))
    for _ in range(20):
        inc(x)
    assert qgraph.sync() is None
    if arch == "cuda":
        from qgraph.driver.device import driver

        d = driver()
        assert d.cuStreamQuery(x.cuda_device.stream)[0] == d.CUresult.CUDA_SUCCESS
    np.testing.assert_array_equal(x.to_numpy(), 20)
    qgraph.sync()  # nothing queued: returns at once
    np.testing.assert_array_equal(x.to_numpy(), 20)


@qgraph.kernel(cuda_graph=True)
def _accumulate(x, out):
    for i in range(x.shape[0]):
        out[i] += x[i]


def test_arrays_dropped_right_after_a_call_stay_valid_for_it(arch):
    """qgraph arrays are freed in order on qgraph's stream (calls on it are not held); foreign
    arrays and calls on other streams are held until the device is done."""
    out = qgraph.from_numpy(np.zeros(4096))
    for k in range(200):  # each temporary is dropped at once; its memory is soon reused
        _accumulate(qgraph.from_numpy(np.full(4096, float(k))), out)
    np.testing.assert_array_equal(out.to_numpy(), sum(range(200)))
    if arch == "cuda":
        torch = pytest.importorskip("torch")
        out_t = torch.zeros(4096, dtype=torch.float64, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        for k in range(200):
            _accumulate(torch.full((4096,), float(k), dtype=torch.float64, device="cuda"), out_t, stream=stream)
        torch.cuda.synchronize()
        np.testing.assert_array_equal(out_t.cpu().numpy(), sum(range(200)))
