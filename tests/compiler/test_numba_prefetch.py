"""What starts beside the CUDA driver's start when a first call will compile (no CUDA entry in the
code cache): NVVM's load where qgraph's emitter compiles (numba-cuda is not imported), numba-cuda's
import with QGRAPH_EMITTER=0 (never twice, never when it is imported already); nothing when warm."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from qgraph.compiler import numba_prefetch
from qgraph.compiler.code_cache import CodeCache


def test_an_empty_or_absent_cache_holds_no_entries_and_a_stored_one_does(tmp_path):
    assert not CodeCache(None).holds_entries()  # caching off: every process compiles
    cache = CodeCache(str(tmp_path / "absent"))
    assert not cache.holds_entries()
    os.makedirs(cache.directory)
    assert not cache.holds_entries()
    assert cache.store("ab" + "0" * 62, {"kernel": "k"}, b"cubin")
    assert cache.holds_entries()


def test_no_import_starts_when_numba_cuda_is_imported_or_importing(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba.cuda", sys.modules.get("numba.cuda", object()))
    assert numba_prefetch.import_numba_cuda_soon() is None


def _child(cache_dir: str, emitter: str = "strict") -> list[str]:
    """A fresh process: what does qgraph.init('cuda') start (the init fails without a GPU)?"""
    code = textwrap.dedent("""
        import sys, threading
        import qgraph
        try:
            qgraph.init("cuda")
        except qgraph.QgraphError:
            pass
        print([t.name for t in threading.enumerate() if t.name.startswith("qgraph: import")])
        print("numba.cuda" in sys.modules or any(t.name.startswith("qgraph: import") for t in threading.enumerate()))
        print(any(t.name == "qgraph: load NVVM" for t in threading.enumerate()))
    """)
    env = dict(os.environ, QGRAPH_CACHE_DIR=cache_dir, QGRAPH_EMITTER=emitter)
    env.pop("QGRAPH_CACHE", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


def test_init_cuda_imports_numba_cuda_only_for_an_empty_cache_without_the_emitter(tmp_path):
    _, imported, _ = _child(str(tmp_path / "cold"), "0")[:3]
    assert imported == "True"  # an empty cache: the first call will compile (importing, or imported)
    warm = tmp_path / "warm"
    assert CodeCache(str(warm)).store("cd" + "1" * 62, {"kernel": "k"}, b"cubin")
    started, imported, _ = _child(str(warm), "0")[:3]
    assert started == "[]" and imported == "False", (started, imported)  # a warm cache never imports numba


def test_init_cuda_with_the_emitter_loads_nvvm_and_never_imports_numba_cuda(tmp_path):
    started, imported = _child(str(tmp_path / "cold"))[:2]
    assert (started, imported) == ("[]", "False")


def test_a_compile_right_after_the_import_started_waits_for_it_instead_of_deadlocking():
    """Importing a numba-cuda submodule while the thread imports the package takes the module
    locks in opposite orders: without the wait, one side fails (_DeadlockError or KeyError)."""
    code = textwrap.dedent("""
        import time
        from qgraph.compiler import numba_adapter, numba_prefetch
        failures = []
        def recording():
            try:
                import numba.cuda  # noqa: F401
            except Exception as e:
                failures.append(repr(e))
        numba_prefetch._import = recording
        thread = numba_prefetch.import_numba_cuda_soon()
        assert thread is not None
        time.sleep(0.05)  # the thread is inside numba-cuda's import (about 0.5 s)
        with numba_adapter.assumed_compute_capability((9, 0)):  # imports numba.cuda.dispatcher
            pass
        thread.join()
        print(failures)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
