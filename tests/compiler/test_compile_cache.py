"""The on-disk code cache: atomic entries, corrupt entries recompiled, the off switch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from qgraph.compiler.code_cache import CodeCache, entry_key


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
    with pytest.warns(RuntimeWarning, match=f"the compile cache file {bin_path} failed its authentication check"):
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


def _run(tmp_path, env_extra):  # (numba's CPU files: QGRAPH_EMITTER=0 keeps the serial form numba's too)
    script = tmp_path / "cached_kernel.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, QGRAPH_EMITTER="0", **env_extra)
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


# ---------------------------------------------------------------- one kernel must never run another's code
# (numba names compiled symbols by module, qualname and a per-process counter: two kernels compiled by
# different processes once defined the same symbol, and a process loading both ran the first one's code)

_TWO_KERNELS = """
import qgraph as qg

@qg.kernel
def a(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1

@qg.kernel
def b(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * 10
"""

_RUN_NAMED = """
import sys
import numpy as np
import qgraph as qg
import two_kernels as m

qg.init(sys.argv[1])
for name in sys.argv[2:]:
    x = qg.from_numpy(np.ones(4))
    getattr(m, name)(x)
    print(name, x.to_numpy()[0])
"""


def _env(tmp_path, cache_dir) -> dict:
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, QGRAPH_CACHE_DIR=str(cache_dir), PYTHONPATH=path)
    env.pop("QGRAPH_ARCH", None)
    return env


def _python(tmp_path, cache_dir, script: str, *args: str) -> str:
    env = _env(tmp_path, cache_dir)
    out = subprocess.run([sys.executable, str(tmp_path / script), *args], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_warm_cache_runs_each_kernels_own_code(tmp_path, arch, order):
    (tmp_path / "two_kernels.py").write_text(_TWO_KERNELS)
    (tmp_path / "run_named.py").write_text(_RUN_NAMED)
    cache_dir = tmp_path / "cache"
    for name in order:  # each kernel compiled by a process of its own ...
        _python(tmp_path, cache_dir, "run_named.py", arch, name)
    both = _python(tmp_path, cache_dir, "run_named.py", arch, *order)  # ... then both loaded by a third
    assert both.split("\n")[:2] == [f"{n} {2.0 if n == 'a' else 10.0}" for n in order]


_TWENTY_KERNELS = """
import qgraph

def _make_helper(c):
    @qgraph.func
    def helper(v):  # the same name in every kernel
        return v * 1.5 + c
    return helper

def _make_kernel(c):
    helper = _make_helper(c)

    @qgraph.kernel
    def step(x, out, s: float):  # the same name, tasks and helper name in every kernel
        for i in range(x.shape[0]):
            out[i] = helper(x[i]) * s
        out[0] = out[0] + c
    return step

KERNELS = [_make_kernel(float(c)) for c in range(20)]
"""

_RUN_SUBSET = """
import sys
import numpy as np
import qgraph
import twenty_kernels as m

qgraph.init(sys.argv[1])
rng = np.random.default_rng(7)
x_host = rng.random(37)
bad = []
for k in map(int, sys.argv[2:]):
    x, out = qgraph.from_numpy(x_host), qgraph.ndarray(qgraph.f64, (37,))
    m.KERNELS[k](x, out, 2.0)
    expect = (x_host * 1.5 + k) * 2.0
    expect[0] += k
    if not np.allclose(out.to_numpy(), expect, rtol=1e-12):
        bad.append(k)
print("bad", bad)
"""


def test_twenty_same_named_kernels_compiled_by_four_processes(tmp_path, arch):
    import random

    (tmp_path / "twenty_kernels.py").write_text(_TWENTY_KERNELS)
    (tmp_path / "run_subset.py").write_text(_RUN_SUBSET)
    cache_dir = tmp_path / "cache"
    pick = random.Random(20261122)
    subsets = [pick.sample(range(20), 6) for _ in range(4)]
    env = _env(tmp_path, cache_dir)
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "run_subset.py"), arch, *map(str, s)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for s in subsets]
    for p in procs:
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr
        assert stdout.strip() == "bad []", stdout
    everything = list(range(20))
    pick.shuffle(everything)
    final = _python(tmp_path, cache_dir, "run_subset.py", arch, *map(str, everything))
    assert final.strip() == "bad []"


_SIGNATURE_WORKER = """
import sys
import numpy as np
import qgraph
qgraph.init("cpu")
import scale_module
dtypes = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}
for name in sys.argv[1].split(","):
    scale_module.scale(np.ones(8, dtypes[name]), 2)
programs = scale_module.scale.launchers["cpu"]._programs.values()
runners = [r for p in programs for r in (p.runner, p.serial_runner) if r is not None]  # both forms
print(sum(sum(r.stats.cache_hits.values()) for r in runners), sum(len(r.stats.cache_misses) for r in runners))
"""


def test_processes_compiling_different_signatures_keep_every_entry(tmp_path):
    """4 processes compile 4 signatures of one kernel into one empty cache at once; a fifth loads all 4
    (without the index lock, processes overwrote each other's index and one signature was lost)."""
    (tmp_path / "scale_module.py").write_text(
        "import qgraph\n\n\n@qgraph.kernel\ndef scale(x, a):\n    for i in range(x.shape[0]):\n"
        "        x[i] = x[i] * a + 1\n")
    (tmp_path / "worker.py").write_text(_SIGNATURE_WORKER)
    env = dict(os.environ, QGRAPH_CACHE_DIR=str(tmp_path / "cache"), QGRAPH_ARCH="cpu", QGRAPH_EMITTER="0",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    workers = [subprocess.Popen([sys.executable, str(tmp_path / "worker.py"), name], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for name in ("f32", "f64", "i32", "i64")]
    for w in workers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        assert out.split() == ["0", "1"]  # each compiled its own signature
    last = subprocess.run([sys.executable, str(tmp_path / "worker.py"), "f32,f64,i32,i64"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert last.returncode == 0, last.stderr
    assert last.stdout.split() == ["4", "0"]  # 4 loaded from the cache, none compiled



def _save_slowly(args):
    """One process saving an overload into a function's cache index, pausing between reading and
    writing it (where a concurrent process reads the same index)."""
    import time

    from numba.core.caching import IndexDataCacheFile

    from qgraph.compiler.numba_cache import locked_index_file_class

    cache_dir, key, locked = args
    original = IndexDataCacheFile._load_index

    def slow_load(self):
        found = original(self)
        time.sleep(0.5)
        return found

    IndexDataCacheFile._load_index = slow_load
    cls = locked_index_file_class() if locked else IndexDataCacheFile
    cls(cache_path=cache_dir, filename_base="kernel", source_stamp="stamp").save(key, b"compiled " + key.encode())


@pytest.mark.parametrize("locked", [False, True])
def test_the_cache_index_lock_keeps_concurrent_entries(tmp_path, locked):
    """Two processes save different overloads into one index at once: numba's own index keeps
    one (both pick the same data file), the locked index keeps both."""
    import multiprocessing

    from numba.core.caching import IndexDataCacheFile

    context = multiprocessing.get_context("fork")
    savers = [context.Process(target=_save_slowly, args=((str(tmp_path), key, locked),)) for key in ("sig-a", "sig-b")]
    for p in savers:
        p.start()
    for p in savers:
        p.join(60)
        assert p.exitcode == 0
    index = IndexDataCacheFile(cache_path=str(tmp_path), filename_base="kernel", source_stamp="stamp")
    found = {key: index.load(key) for key in ("sig-a", "sig-b")}
    if locked:
        assert found == {"sig-a": b"compiled sig-a", "sig-b": b"compiled sig-b"}
    else:  # what the lock prevents
        assert sum(v is not None for v in found.values()) == 1


# ---------------------------------------------------------------- a cache directory that cannot be one, or be written

def test_a_cache_directory_that_is_a_file_is_named_at_init(tmp_path, arch):
    import qgraph
    from qgraph.runtime import cache_directory

    a_file = tmp_path / "not-a-directory"
    a_file.write_text("")
    fix = "point QGRAPH_CACHE_DIR at a writable directory (it is created if missing) or set QGRAPH_CACHE=0"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("QGRAPH_CACHE_DIR", str(a_file))
        with pytest.raises(qgraph.QgraphError) as error:
            qgraph.init(arch)
        assert str(error.value) == (f"QGRAPH_CACHE_DIR={str(a_file)!r}: the compile cache directory {a_file} is a "
                                    f"file; {fix} to turn the cache off")
        env.setenv("QGRAPH_CACHE_DIR", str(a_file / "qgraph"))
        with pytest.raises(qgraph.QgraphError, match=f"{a_file / 'qgraph'} cannot be created: {a_file} is a file; "):
            qgraph.init(arch)
        env.setenv("QGRAPH_CACHE", "0")  # no cache, nothing to check
        qgraph.init(arch)
    assert qgraph.current_arch() == arch
    qgraph.init(arch)  # the session's cache again
    with pytest.raises(qgraph.QgraphError, match=r"^QGRAPH_CACHE_DIR is unset: the compile cache directory .* "
                                                 r"cannot be created: .*not-a-directory is a file; point"):
        cache_directory({"XDG_CACHE_HOME": str(a_file)})


@pytest.fixture
def unwritable_directory(tmp_path):
    """A directory this process cannot create files in: read-only permissions, or (for root, whom
    permissions do not stop) a path in sysfs, where nobody may create one."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        try:
            (folder / "probe").write_text("")
        except OSError:
            yield str(folder)
            return
        sysfs = f"/sys/qgraph-test-{tmp_path.name}"
        if not os.path.isdir("/sys") or os.path.exists(sysfs):
            pytest.skip("no directory this process cannot write (root, and no sysfs)")
        yield sysfs
    finally:
        folder.chmod(0o700)


def test_an_unwritable_cache_directory_is_named_once(unwritable_directory, arch):
    import warnings

    import numpy as np

    import qgraph

    with pytest.MonkeyPatch.context() as env:
        env.setenv("QGRAPH_CACHE_DIR", unwritable_directory)
        qgraph.init(arch)

        @qgraph.kernel
        def double(x):
            for i in range(x.shape[0]):
                x[i] = 2 * x[i]

        @qgraph.kernel
        def shift(x):
            for i in range(x.shape[0]):
                x[i] = x[i] + 3

        x = qgraph.from_numpy(np.arange(4.0))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            double(x)
            shift(x)
        np.testing.assert_array_equal(x.to_numpy(), 2 * np.arange(4.0) + 3)  # the calls went on
        said = [str(w.message) for w in caught if "compile cache" in str(w.message)]
        assert len(said) == 1 and said[0].startswith(f"qgraph: cannot write the compile cache in "
                                                     f"{unwritable_directory}{os.sep}"), said
        assert "compiled code is not kept for later processes: point QGRAPH_CACHE_DIR at a writable" in said[0]
    qgraph.init(arch)
