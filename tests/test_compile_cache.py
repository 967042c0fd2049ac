"""The on-disk code cache: atomic entries, corrupt entries recompiled, the off switch."""

from __future__ import annotations

import os
import subprocess
import sys

from qgraph.compile_cache import CodeCache, entry_key


def test_store_and_load(tmp_path):
    cache = CodeCache(str(tmp_path))
    key = entry_key("a", "b")
    assert cache.load(key) is None
    assert cache.store(key, {"entries": ["k"]}, b"\x00binary")
    manifest, binary = cache.load(key)
    assert manifest["entries"] == ["k"] and binary == b"\x00binary"


def test_corrupt_entries_read_as_missing(tmp_path):
    cache = CodeCache(str(tmp_path))
    key = entry_key("x")
    cache.store(key, {}, b"good")
    bin_path, manifest_path = cache._paths(key)
    with open(bin_path, "wb") as f:
        f.write(b"evil")
    assert cache.load(key) is None
    with open(manifest_path, "w") as f:
        f.write("{not json")
    assert cache.load(key) is None
    cache.store(key, {}, b"good")
    assert cache.load(key)[1] == b"good"


def test_disabled_cache(tmp_path):
    cache = CodeCache(None)
    assert not cache.enabled and not cache.store("k", {}, b"") and cache.load("k") is None


def test_no_temp_files_left_behind(tmp_path):
    cache = CodeCache(str(tmp_path))
    for i in range(5):
        cache.store(entry_key(str(i)), {}, b"data")
    leftovers = [f for _, _, files in os.walk(tmp_path) for f in files if f.startswith(".tmp-")]
    assert leftovers == []


_SCRIPT = """
import numpy as np, qgraph
qgraph.init("cpu")
@qgraph.kernel
def k(x):
    for i in range(x.shape[0]):
        x[i] = i * 2
x = np.zeros(5)
k(x)
print(int(x.sum()))
"""


def _run(tmp_path, env_extra):
    script = tmp_path / "cached_kernel.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)


def test_cpu_cache_is_written_reused_and_survives_corruption(tmp_path):
    cache_dir = tmp_path / "cache"
    first = _run(tmp_path, {"QGRAPH_CACHE_DIR": str(cache_dir)})
    assert first.returncode == 0 and first.stdout.strip() == "20", first.stderr
    files = [os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs]
    assert any(f.endswith(".nbi") for f in files)
    for f in files:  # damage every entry: the next run must recompile, not crash
        with open(f, "wb") as fh:
            fh.write(b"garbage")
    second = _run(tmp_path, {"QGRAPH_CACHE_DIR": str(cache_dir)})
    assert second.returncode == 0 and second.stdout.strip() == "20", second.stderr


def test_cache_off_writes_nothing(tmp_path):
    cache_dir = tmp_path / "off"
    out = _run(tmp_path, {"QGRAPH_CACHE_DIR": str(cache_dir), "QGRAPH_CACHE": "0"})
    assert out.returncode == 0 and out.stdout.strip() == "20", out.stderr
    assert not cache_dir.exists()
