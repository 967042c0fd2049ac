"""Shared fixtures: run behaviour tests on every arch; CUDA skips without a GPU (fails under
QGRAPH_REQUIRE_CUDA=1, so a GPU run that found no device cannot look green). Offline CUDA code
generation skips only where a piece of numba-cuda's compiler is not installed, found before
compiling: an error of qgraph's own code generation is never a skip.

The layout: tests/<package>/test_*.py mirrors qgraph/<package>/ (tests of the root modules, the
decorator's and the launcher's front doors and the repository itself stay in tests/); what more
than one test module uses lives in tests/helpers/, the only shared test library, which test
modules import as `helpers.<module>` (pyproject's `pythonpath = ["tests"]`), never each other.
The test directories have no __init__.py: pytest imports each test file by its basename (its
directory put on sys.path, the default "prepend" import mode), so basenames are unique across
tests/ (pytest refuses a second test_x.py) and a file's tests keep one module, the unit that
pytest-xdist's `--dist loadfile` sends to one worker."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import tempfile

import pytest

# Keep test compilations out of the user's cache, but shared across this session's tests: made by the
# first process (pytest, or pytest-xdist's controller) and inherited by the tests' subprocesses, so one
# compile serves all. Each xdist worker keeps a directory of its own inside it: two processes compiling
# the same kernel into one numba cache at once crashed a subprocess (SIGSEGV) in a CI run.
# The process that made the directory removes it at exit: CI machines are reused, and the compiled code of
# every run left behind (34 MB a run) added to what filled a CI machine's disk.
if "QGRAPH_CACHE_DIR" not in os.environ:
    os.environ["QGRAPH_CACHE_DIR"] = tempfile.mkdtemp(prefix="qgraph-test-cache-")
    atexit.register(shutil.rmtree, os.environ["QGRAPH_CACHE_DIR"], ignore_errors=True)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["QGRAPH_CACHE_DIR"] = os.path.join(os.environ["QGRAPH_CACHE_DIR"], os.environ["PYTEST_XDIST_WORKER"])
# The emitter's own failures fail the tests instead of falling back to numba (compiler.llvm_cpu)
os.environ.setdefault("QGRAPH_EMITTER", "strict")

import numba  # noqa: E402
from helpers.arch import REQUIRE_CUDA, missing_cuda_compiler, use_arch  # noqa: E402

import qgraph  # noqa: E402


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# Under pytest-xdist each worker runs numba's parallel loops on its share of the cores. With every worker
# on all of them (2 workers x 2 threads on 2 cores) each parallel loop waited for a descheduled thread:
# mpm88's 1200 substeps took 5.2 s on 2 threads and 0.4 s on 1 on a busy 2-core machine. Tests of parallel
# execution itself (atomics, reductions) take every thread back with the `all_numba_threads` fixture.
NUMBA_THREADS_SHARE = max(1, min(numba.config.NUMBA_NUM_THREADS,
                                 _cores() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
numba.set_num_threads(NUMBA_THREADS_SHARE)


@pytest.fixture
def all_numba_threads():
    """numba's parallel loops on all its threads for the test (the suite's default under
    pytest-xdist is the worker's share of the cores, possibly one thread)."""
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    yield numba.config.NUMBA_NUM_THREADS
    numba.set_num_threads(NUMBA_THREADS_SHARE)


@pytest.fixture
def collect_only_new_objects():
    """For tests that call gc.collect(): the objects alive before the test are frozen out of its
    collections, which then scan what the test made. A full collection walks every object the
    process holds: late in a pytest-xdist worker's run (every kernel it compiled), 1-2 s each."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def cuda_compiler():
    """For tests that generate CUDA code without a GPU (PTX for an assumed compute capability):
    skipped where numba-cuda's compiler is not installed, failed under QGRAPH_REQUIRE_CUDA=1."""
    reason = missing_cuda_compiler()
    if reason is not None:
        if REQUIRE_CUDA:
            pytest.fail(f"QGRAPH_REQUIRE_CUDA=1 but numba-cuda cannot compile here: {reason}")
        pytest.skip(f"numba-cuda cannot compile here: {reason}")


@pytest.fixture(scope="module")
def sm90(cuda_compiler):
    """numba-cuda asks the current device for its compute capability when it compiles
    device functions; without a GPU, answer 9.0 (for the module's tests: offline compiles only)."""
    import numba.cuda.dispatcher as dispatcher

    monkeypatch = pytest.MonkeyPatch()

    class Hopper:
        compute_capability = (9, 0)

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: Hopper())
    yield
    monkeypatch.undo()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def arch(request):
    """Run the test on the CPU backend and on CUDA."""
    use_arch(request.param)
    yield request.param
    qgraph.sync()


@pytest.fixture
def cuda():
    """A CUDA-only test."""
    use_arch("cuda")
    yield "cuda"
    qgraph.sync()


@pytest.fixture
def cpu():
    use_arch("cpu")
    yield "cpu"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "cuda" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cuda)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda),
                        pytest.param("cuda-host", marks=pytest.mark.cuda)])
def loop_arch(request, monkeypatch):
    """cpu, the CUDA device WHILE loop, and the forced host do-while fallback."""
    if request.param == "cuda-host":
        monkeypatch.setenv("QGRAPH_GRAPH_WHILE", "host")
    use_arch(request.param.split("-")[0])
    yield request.param
    qgraph.sync()
    monkeypatch.delenv("QGRAPH_GRAPH_WHILE", raising=False)
    qgraph.init(request.param.split("-")[0])
