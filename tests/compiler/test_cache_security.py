"""The compile cache runs no one else's code (issue 46): a private directory (0700, files 0600,
whatever the umask; one another user owns or can write is refused, as ssh refuses a world-writable
key), and every entry authenticated with a per-user key before anything in it is parsed: a planted
pickle is never unpickled, two kernels' swapped files do not make one run the other's code, a
tampered CUDA manifest or cubin is a miss. Each end-to-end case runs fresh processes (a process
loads from the disk cache only what it has not compiled itself) on a cache directory of its own."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import re
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import qgraph
from qgraph.compiler import cache_keys
from qgraph.compiler.code_cache import FORMAT, CodeCache, entry_key

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes and user ids are POSIX's")

_KERNELS = """
import qgraph

@qgraph.kernel
def add_one(x):
    for i in range(x.shape[0]):
        x[i] = x[i] + 1

@qgraph.kernel
def times_ten(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * 10
"""

_RUN = """
import json, sys, warnings
import numpy as np
import qgraph
import sec_kernels as m

qgraph.init(sys.argv[1])
out = {"values": {}, "loads": {}}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in sys.argv[2:]:
        x = qgraph.from_numpy(np.full(4, 2.0))
        getattr(m, name)(x)
        out["values"][name] = x.to_numpy().tolist()
        out["loads"][name] = getattr(m, name).stats.cache_loads
out["warnings"] = [str(w.message) for w in caught]
print(json.dumps(out))
"""

RIGHT = {"add_one": [3.0] * 4, "times_ten": [20.0] * 4}


def _run(tmp_path: Path, cache: Path, arch: str, *names: str, umask: int | None = None, emitter: str = "0") -> dict:
    """A fresh process calling the kernels `names` once each on 2.0s: their values, cache loads, warnings.
    `emitter` is QGRAPH_EMITTER: "0" (the default here) so the CPU's serial forms are numba's pickles,
    "1" so they are emitted object code (cpu-llvm/ entries, sealed as CUDA's are)."""
    (tmp_path / "sec_kernels.py").write_text(_KERNELS)
    (tmp_path / "sec_run.py").write_text(_RUN)
    env = dict(os.environ, QGRAPH_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    env.pop("QGRAPH_ARCH", None)
    env.pop("QGRAPH_CACHE", None)
    env["QGRAPH_EMITTER"] = emitter
    done = subprocess.run([sys.executable, str(tmp_path / "sec_run.py"), arch, *names], capture_output=True,
                          text=True, env=env, timeout=600, cwd=tmp_path,
                          preexec_fn=None if umask is None else (lambda: os.umask(umask)))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cache_files(cache: Path, suffix: str, kernel: str = "") -> list[Path]:
    return sorted(p for p in cache.rglob(f"*{suffix}") if kernel in p.name)


def _rejections(result: dict) -> list[str]:
    return [w for w in result["warnings"] if "failed its authentication check" in w]


# ---------------------------------------------------------------- a planted pickle is never unpickled


class _Planted:
    """Unpickling it creates the marker file: what a planted cache file would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def _planted_bytes(marker: Path, form: str, index: bool) -> bytes:
    evil = pickle.dumps(_Planted(marker))
    if form == "numba":  # numba's own layout: an index is the version's pickle, then the entries' pickle
        import numba

        return (pickle.dumps(numba.__version__) + evil) if index else evil
    if form == "evil-first":  # the version itself planted
        return evil
    return cache_keys.MAGIC + os.urandom(cache_keys.TAG_BYTES) + evil  # qgraph's layout, a guessed tag


@pytest.mark.parametrize("form", ["numba", "evil-first", "sealed-layout"])
def test_a_planted_pickle_is_never_run_and_the_kernel_still_gives_right_results(tmp_path, form):
    cache, marker = tmp_path / "cache", tmp_path / "PLANTED-CODE-RAN"
    first = _run(tmp_path, cache, "cpu", "add_one")
    assert first["values"] == {"add_one": RIGHT["add_one"]} and first["loads"] == {"add_one": 0}
    planted = _cache_files(cache, ".nbi") + _cache_files(cache, ".nbc")
    assert planted, "the first run cached nothing"
    for path in planted:
        path.write_bytes(_planted_bytes(marker, form, path.suffix == ".nbi"))
    second = _run(tmp_path, cache, "cpu", "add_one")
    assert not marker.exists(), "a planted cache file was unpickled"
    assert second["values"] == {"add_one": RIGHT["add_one"]} and second["loads"] == {"add_one": 0}  # compiled
    said = _rejections(second)
    assert said and any(str(p) in w for p in planted for w in said), said  # the file is named
    assert len(said) == len(set(said))  # once per file
    assert all(p.read_bytes().startswith(cache_keys.MAGIC) for p in _cache_files(cache, ".nbi"))  # overwritten
    third = _run(tmp_path, cache, "cpu", "add_one")  # the recompiled entry is trusted again
    assert third["values"] == {"add_one": RIGHT["add_one"]} and third["loads"] == {"add_one": 1}
    assert third["warnings"] == [] and not marker.exists()


def test_the_tag_is_checked_before_anything_is_unpickled(tmp_path, monkeypatch):
    """In-process: a sealed-layout index with a wrong tag reaches no pickle.loads / pickle.load."""
    from qgraph.compiler.numba_cache import sealed_index_file_class

    key = cache_keys.cache_key(str(tmp_path))
    index = sealed_index_file_class()(cache_path=str(tmp_path / "cpu"), filename_base="k", source_stamp="s", key=key)
    cache_keys.make_private_dirs(str(tmp_path / "cpu"))
    index.save(("sig",), {"compiled": 1})
    assert index.load(("sig",)) == {"compiled": 1}
    index_path = Path(index._index_path)
    sealed = bytearray(index_path.read_bytes())
    sealed[-1] ^= 1  # one bit of the payload
    index_path.write_bytes(bytes(sealed))
    calls = []
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: calls.append(a))
    with pytest.warns(RuntimeWarning, match="failed its authentication check"):
        assert index.load(("sig",)) is None
    assert calls == []


# ---------------------------------------------------------------- swapped files run no other kernel's code


def _role(path: Path) -> str:
    """A cache file's name without its kernel's name and fingerprints: what pairs two kernels' files."""
    return re.sub(r"[0-9a-f]{16,}", "H", path.name.replace("add_one", "K").replace("times_ten", "K"))


def _swap(a: Path, b: Path) -> None:
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)


@pytest.mark.parametrize("which", [(".nbc",), (".nbc", ".nbi")])
def test_two_kernels_swapped_cpu_files_each_still_run_their_own_code(tmp_path, which):
    cache = tmp_path / "cache"
    for name in RIGHT:  # the same signature (one float64 array)
        assert _run(tmp_path, cache, "cpu", name)["values"] == {name: RIGHT[name]}
    swapped = []
    for suffix in which:
        ones = {_role(p): p for p in _cache_files(cache, suffix, "add_one")}
        tens = {_role(p): p for p in _cache_files(cache, suffix, "times_ten")}
        assert ones and ones.keys() == tens.keys(), (ones, tens)
        for role in ones:
            _swap(ones[role], tens[role])
            swapped += [ones[role], tens[role]]
    both = _run(tmp_path, cache, "cpu", "add_one", "times_ten")
    assert both["values"] == RIGHT
    assert both["loads"] == {"add_one": 0, "times_ten": 0}  # neither loaded the other's code: recompiled
    assert _rejections(both)
    again = _run(tmp_path, cache, "cpu", "add_one", "times_ten")
    assert again["values"] == RIGHT and again["loads"] == {"add_one": 1, "times_ten": 1} and again["warnings"] == []


def _emitted_entries(cache: Path) -> dict:
    """{kernel: manifest} of the emitted serial forms in `cache` (compiler.llvm_cpu)."""
    entries = {}
    for manifest in _cache_files(cache / "cpu-llvm", ".json"):
        function = json.loads(manifest.read_text()).get("function", "")
        entries.update({kernel: manifest for kernel in RIGHT if f"_{kernel}_" in function})
    return entries


def test_two_kernels_swapped_emitted_cpu_entries_each_still_run_their_own_code(tmp_path):
    cache = tmp_path / "cache"
    for name in RIGHT:
        first = _run(tmp_path, cache, "cpu", name, emitter="1")
        assert first["values"] == {name: RIGHT[name]} and first["loads"] == {name: 0}
    entries = _emitted_entries(cache)
    assert entries.keys() == set(RIGHT), entries
    one, ten = entries["add_one"], entries["times_ten"]
    _swap(one.with_suffix(".bin"), ten.with_suffix(".bin"))  # the object code alone
    result = _run(tmp_path, cache, "cpu", "add_one", "times_ten", emitter="1")
    assert result["values"] == RIGHT and result["loads"] == {"add_one": 0, "times_ten": 0}
    _swap(one, ten)  # whole entries: each manifest with its own object code, in the other's place
    _swap(one.with_suffix(".bin"), ten.with_suffix(".bin"))
    result = _run(tmp_path, cache, "cpu", "add_one", "times_ten", emitter="1")
    assert result["values"] == RIGHT and result["loads"] == {"add_one": 0, "times_ten": 0}
    assert _rejections(result)
    again = _run(tmp_path, cache, "cpu", "add_one", "times_ten", emitter="1")  # recompiled entries are trusted
    assert again["values"] == RIGHT and again["loads"] == {"add_one": 1, "times_ten": 1} and again["warnings"] == []


def test_an_edited_emitted_cpu_entry_is_never_loaded(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path, cache, "cpu", "add_one", emitter="1")
    code = _emitted_entries(cache)["add_one"].with_suffix(".bin")
    edited = bytearray(code.read_bytes())
    edited[len(edited) // 2] ^= 0xFF  # one flipped byte of machine code
    code.write_bytes(bytes(edited))
    result = _run(tmp_path, cache, "cpu", "add_one", emitter="1")
    assert result["values"] == {"add_one": RIGHT["add_one"]} and result["loads"] == {"add_one": 0}
    assert any(str(code) in w for w in _rejections(result)), result["warnings"]


def test_two_kernels_swapped_cuda_entries_each_still_run_their_own_code(tmp_path, cuda):
    cache = tmp_path / "cache"
    for name in RIGHT:
        assert _run(tmp_path, cache, "cuda", name)["values"] == {name: RIGHT[name]}
    entries = {}
    for manifest in _cache_files(cache / "cuda", ".json"):
        kernel = json.loads(manifest.read_text()).get("kernel")
        if kernel in RIGHT:
            entries[kernel] = manifest
    assert entries.keys() == set(RIGHT)
    one, ten = entries["add_one"], entries["times_ten"]
    _swap(one.with_suffix(".bin"), ten.with_suffix(".bin"))  # the cubins alone
    result = _run(tmp_path, cache, "cuda", "add_one", "times_ten")
    assert result["values"] == RIGHT and result["loads"] == {"add_one": 0, "times_ten": 0}
    _swap(one, ten)  # now whole entries: each manifest with its own cubin, in the other's place
    _swap(one.with_suffix(".bin"), ten.with_suffix(".bin"))
    result = _run(tmp_path, cache, "cuda", "add_one", "times_ten")
    assert result["values"] == RIGHT and result["loads"] == {"add_one": 0, "times_ten": 0}
    assert _rejections(result)


# ---------------------------------------------------------------- private whatever the umask


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


@posix_only
@pytest.mark.parametrize("emitter", ["0", "1"])
def test_under_umask_000_the_cache_is_0700_and_its_files_0600(tmp_path, emitter):
    cache = tmp_path / "made" / "by-qgraph" / "cache"  # parents qgraph makes too
    result = _run(tmp_path, cache, "cpu", "add_one", umask=0, emitter=emitter)
    assert result["values"] == {"add_one": RIGHT["add_one"]}
    modes = _modes(cache)
    assert any(name.endswith(".nbc" if emitter == "0" else ".bin") for name in modes) and ".key" in modes
    wrong = {name: f"{mode:04o}" for name, mode in modes.items()
             if mode != (0o700 if (cache / name).is_dir() else 0o600)}
    assert wrong == {}
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o700


@posix_only
def test_the_cuda_cache_writes_0700_directories_and_0600_files_under_umask_000(tmp_path):
    old = os.umask(0)
    try:
        assert CodeCache(str(tmp_path / "cache")).store(entry_key("k"), {"kernel": "k"}, b"cubin")
    finally:
        os.umask(old)
    modes = _modes(tmp_path / "cache")
    assert len(modes) == 6  # the cache, .key, cuda/, cuda/<xx>/, the cubin and its manifest
    assert {n: m for n, m in modes.items() if m != (0o700 if (tmp_path / "cache" / n).is_dir() else 0o600)} == {}


# ---------------------------------------------------------------- another user's or a shared directory: refused


def _init_fails_then_a_good_directory_works(arch: str, bad: Path, good: Path, *expected: str) -> str:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("QGRAPH_CACHE_DIR", str(bad))
        with pytest.raises(qgraph.QgraphError) as refused:
            qgraph.init(arch)
        for text in expected:
            assert text in str(refused.value), str(refused.value)
        env.setenv("QGRAPH_CACHE_DIR", str(good))
        qgraph.init(arch)

        @qgraph.kernel
        def plus_two(x):
            for i in range(x.shape[0]):
                x[i] = x[i] + 2

        x = qgraph.from_numpy(np.zeros(3))
        plus_two(x)
        np.testing.assert_array_equal(x.to_numpy(), [2.0, 2.0, 2.0])
        assert (good / cache_keys.KEY_NAME).exists()
    qgraph.init(arch)  # the session's cache again
    return str(refused.value)


@posix_only
@pytest.mark.parametrize("mode,who", [(0o777, "its group and other users"), (0o770, "its group"),
                                      (0o703, "other users")])
def test_a_directory_others_can_write_is_refused_with_the_fix(tmp_path, arch, mode, who):
    bad = tmp_path / "shared"
    bad.mkdir()
    bad.chmod(mode)
    said = _init_fails_then_a_good_directory_works(
        arch, bad, tmp_path / "private", f"QGRAPH_CACHE_DIR={str(bad)!r}: the compile cache directory {bad} is "
        f"writable by {who} (mode {mode:04o})", f"run `chmod 700 {bad}`", "point QGRAPH_CACHE_DIR at a private "
        "directory", "QGRAPH_CACHE=0")
    assert "plant compiled code" in said
    bad.chmod(0o700)  # the fix said works
    with pytest.MonkeyPatch.context() as env:
        env.setenv("QGRAPH_CACHE_DIR", str(bad))
        qgraph.init(arch)
    qgraph.init(arch)


@posix_only
def test_a_directory_of_another_user_is_refused(tmp_path, arch, monkeypatch):
    bad = tmp_path / "theirs"
    bad.mkdir(mode=0o700)
    real = cache_keys.owner_of
    monkeypatch.setattr(cache_keys, "owner_of", lambda status: 4242 if stat.S_ISDIR(status.st_mode)
                        and status.st_ino == bad.stat().st_ino else real(status))
    _init_fails_then_a_good_directory_works(
        arch, bad, tmp_path / "mine", f"the compile cache directory {bad} is owned by user id 4242, not by this user "
        f"(id {os.geteuid()})", "point QGRAPH_CACHE_DIR at a directory of your own", "QGRAPH_CACHE=0")


@posix_only
def test_a_simulated_other_user_is_refused_the_running_users_directory(tmp_path, arch, monkeypatch):
    """The other way round: the process runs as another user id than the directory's owner."""
    bad = tmp_path / "owned-by-the-test-user"
    bad.mkdir(mode=0o700)
    with pytest.MonkeyPatch.context() as user:
        user.setattr(cache_keys, "current_uid", lambda: os.geteuid() + 1)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("QGRAPH_CACHE_DIR", str(bad))
            with pytest.raises(qgraph.QgraphError, match=f"owned by user id {os.geteuid()}, not by this user "
                                                         f"\\(id {os.geteuid() + 1}\\)"):
                qgraph.init(arch)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("QGRAPH_CACHE_DIR", str(bad))
        qgraph.init(arch)  # the owner may
    qgraph.init(arch)


@posix_only
def test_a_key_of_another_user_or_readable_by_others_is_refused(tmp_path, arch):
    bad = tmp_path / "cache"
    key = cache_keys.cache_key(str(bad))  # makes the directory and its key
    key_path = bad / cache_keys.KEY_NAME
    assert key.root == str(bad) and stat.S_IMODE(key_path.stat().st_mode) == 0o600
    key_path.chmod(0o644)
    _init_fails_then_a_good_directory_works(arch, bad, tmp_path / "good-1", f"the compile cache key {key_path} can be "
                                            "read or written by other users (mode 0644)", f"rm {key_path}",
                                            f"chmod 600 {key_path}")
    key_path.chmod(0o600)
    real = cache_keys.owner_of
    with pytest.MonkeyPatch.context() as patch:
        inode = key_path.stat().st_ino  # this key only (not the session's, which init goes back to)
        patch.setattr(cache_keys, "owner_of", lambda s: 4242 if s.st_ino == inode else real(s))
        _init_fails_then_a_good_directory_works(arch, bad, tmp_path / "good-2", f"the compile cache key {key_path} is "
                                                f"owned by user id 4242, not by this user (id {os.geteuid()})")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_directory_or_key_given_to_a_real_second_user_is_refused(tmp_path, arch):
    """As root (CI runs so), with a real second user id: the directory, then the key, owned by nobody."""
    other = 65534  # nobody
    bad = tmp_path / "cache"
    cache_keys.cache_key(str(bad))
    os.chown(bad, other, other)
    _init_fails_then_a_good_directory_works(arch, bad, tmp_path / "good-1", f"the compile cache directory {bad} is "
                                            f"owned by user id {other}, not by this user (id 0)")
    os.chown(bad, 0, 0)
    key_path = bad / cache_keys.KEY_NAME
    os.chown(key_path, other, other)
    _init_fails_then_a_good_directory_works(arch, bad, tmp_path / "good-2", f"the compile cache key {key_path} is "
                                            f"owned by user id {other}, not by this user (id 0)")
    with pytest.MonkeyPatch.context() as env:  # refused at the first use too, where init found no key to check
        env.setenv("QGRAPH_CACHE_DIR", str(bad))
        key_path.unlink()
        qgraph.init(arch)
        key_path.write_bytes(os.urandom(cache_keys.KEY_BYTES))
        key_path.chmod(0o600)
        os.chown(key_path, other, other)
        with pytest.raises(qgraph.QgraphError, match="the compile cache key .* is owned by user id 65534"):
            cache_keys.cache_key(str(bad))
    qgraph.init(arch)


@posix_only
def test_a_directory_made_unsafe_after_init_is_refused_at_its_first_use(tmp_path, cpu):
    """Another user made the directory between init and the first compile (a path in /tmp): the first
    use checks again, before it makes or reads the key."""
    late = tmp_path / "late"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("QGRAPH_CACHE_DIR", str(late))
        qgraph.init("cpu")  # not there yet: nothing to check
        late.mkdir()
        late.chmod(0o777)

        @qgraph.kernel
        def plus_three(x):
            for i in range(x.shape[0]):
                x[i] = x[i] + 3

        with pytest.raises(qgraph.QgraphError, match=f"the compile cache directory {late} is writable by its group "
                                                     "and other users"):
            plus_three(np.zeros(2))
        assert not (late / cache_keys.KEY_NAME).exists()
        late.chmod(0o700)
        x = np.zeros(2)
        plus_three(x)  # the next call, after the fix
        np.testing.assert_array_equal(x, [3.0, 3.0])
    qgraph.init("cpu")


# ---------------------------------------------------------------- the key


def _key_in_a_fresh_process(root: str, results) -> None:
    results.put(cache_keys.cache_key(root).tag(b"probe"))


@posix_only
def test_processes_making_the_key_at_once_agree_on_one(tmp_path):
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    makers = [context.Process(target=_key_in_a_fresh_process, args=(str(tmp_path / "cache"), results))
              for _ in range(6)]
    for p in makers:
        p.start()
    tags = {results.get(timeout=60) for _ in makers}
    for p in makers:
        p.join(60)
    assert len(tags) == 1
    assert len((tmp_path / "cache" / cache_keys.KEY_NAME).read_bytes()) == cache_keys.KEY_BYTES


def test_a_damaged_key_is_replaced(tmp_path):
    root = tmp_path / "cache"
    cache_keys.make_private_dirs(str(root))
    (root / cache_keys.KEY_NAME).write_bytes(b"short")
    (root / cache_keys.KEY_NAME).chmod(0o600)
    key = cache_keys.cache_key(str(root))
    secret = (root / cache_keys.KEY_NAME).read_bytes()
    assert len(secret) == cache_keys.KEY_BYTES and key.tag(b"x") == cache_keys.CacheKey("", secret).tag(b"x")


# ---------------------------------------------------------------- the CUDA cache's manifest and cubin


def _tampered(tmp_path: Path, edit) -> tuple[CodeCache, str, list[str]]:
    cache = CodeCache(str(tmp_path / "cache"))
    key = entry_key("tamper", str(tmp_path))
    assert cache.store(key, {"kernel": "k", "entries": ["e"], "param_sizes": [8]}, b"the real cubin")
    bin_path, manifest_path = (Path(p) for p in cache._paths(key))
    edit(bin_path, manifest_path, cache, key)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = cache.load(key)
        again = cache.load(key)
    assert loaded is None and again is None
    return cache, key, [str(w.message) for w in caught]


def _edit_manifest(change):
    def edit(bin_path, manifest_path, cache, key):
        manifest = json.loads(manifest_path.read_text())
        change(manifest, bin_path)
        manifest_path.write_text(json.dumps(manifest, sort_keys=True))
    return edit


def _planted_cubin(manifest, bin_path):
    import hashlib

    bin_path.write_bytes(b"a planted cubin")
    manifest["sha256"] = hashlib.sha256(b"a planted cubin").hexdigest()  # consistent, but not re-tagged


@pytest.mark.parametrize("edit", [
    _edit_manifest(lambda m, b: m.update(entries=["another_entry"])),
    _edit_manifest(lambda m, b: m.update(param_sizes=[4096])),
    _edit_manifest(_planted_cubin),
    _edit_manifest(lambda m, b: m.pop("hmac")),
    _edit_manifest(lambda m, b: m.update(hmac="0" * 64)),
    lambda b, m, cache, key: b.write_bytes(b"a planted cubin"),
], ids=["entries", "sizes", "cubin-and-its-hash", "no-tag", "zero-tag", "cubin-alone"])
def test_a_tampered_cuda_entry_is_a_miss_named_once(tmp_path, edit):
    cache, key, said = _tampered(tmp_path, edit)
    assert len(said) == 1 and "failed its authentication check" in said[0], said
    assert cache.store(key, {"kernel": "k", "entries": ["e"], "param_sizes": [8]}, b"the real cubin")  # recompiled
    assert cache.load(key)[1] == b"the real cubin"


def test_a_cuda_entry_in_another_entrys_place_is_a_miss(tmp_path):
    cache = CodeCache(str(tmp_path / "cache"))
    a, b = entry_key("a"), entry_key("b")
    assert cache.store(a, {"kernel": "a"}, b"cubin a") and cache.store(b, {"kernel": "b"}, b"cubin b")
    for src, dst in zip(cache._paths(a), cache._paths(b)):
        Path(dst).write_bytes(Path(src).read_bytes())
    with pytest.warns(RuntimeWarning, match="failed its authentication check"):
        assert cache.load(b) is None
    assert cache.load(a)[1] == b"cubin a"


def test_an_entry_tagged_with_another_key_is_a_miss(tmp_path):
    """A cache copied from elsewhere (another user's key): nothing in it is trusted."""
    mine, theirs = CodeCache(str(tmp_path / "mine")), CodeCache(str(tmp_path / "theirs"))
    key = entry_key("copied")
    assert theirs.store(key, {"kernel": "k"}, b"their cubin") and mine.store(entry_key("own"), {}, b"x")
    for src, dst in zip(theirs._paths(key), mine._paths(key)):
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        Path(dst).write_bytes(Path(src).read_bytes())
    with pytest.warns(RuntimeWarning, match="failed its authentication check"):
        assert mine.load(key) is None


def test_an_older_format_entry_is_a_silent_miss(tmp_path, recwarn):
    cache = CodeCache(str(tmp_path / "cache"))
    key = entry_key("old")
    assert cache.store(key, {}, b"cubin")
    manifest_path = Path(cache._paths(key)[1])
    manifest = json.loads(manifest_path.read_text())
    manifest["format"] = FORMAT - 1
    manifest_path.write_text(json.dumps(manifest))
    assert cache.load(key) is None
    assert not [w for w in recwarn if "authentication" in str(w.message)]
