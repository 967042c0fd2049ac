"""Shared fixtures: run behaviour tests on every arch; CUDA skips without a GPU (fails under
QGRAPH_REQUIRE_CUDA=1, so a GPU run that found no device cannot look green). Offline CUDA code
generation skips only where a piece of numba-cuda's compiler is not installed, found before
compiling: an error of qgraph's own code generation is never a skip."""

from __future__ import annotations

import gc
import importlib.util
import os
import tempfile

import pytest

# Keep test compilations out of the user's cache, but shared across this session's tests: made by the
# first process (pytest, or pytest-xdist's controller) and inherited by the tests' subprocesses, so one
# compile serves all. Each xdist worker keeps a directory of its own inside it: two processes compiling
# the same kernel into one numba cache at once crashed a subprocess (SIGSEGV) in a CI run.
os.environ.setdefault("QGRAPH_CACHE_DIR", tempfile.mkdtemp(prefix="qgraph-test-cache-"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["QGRAPH_CACHE_DIR"] = os.path.join(os.environ["QGRAPH_CACHE_DIR"], os.environ["PYTEST_XDIST_WORKER"])

import numba  # noqa: E402

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

REQUIRE_CUDA = os.environ.get("QGRAPH_REQUIRE_CUDA") == "1"
_cuda_reason: list[str | None] = []


def cuda_unavailable_reason() -> str | None:
    if not _cuda_reason:
        try:
            qgraph.init("cuda")
            _cuda_reason.append(None)
        except qgraph.QgraphError as e:
            _cuda_reason.append(str(e))
    return _cuda_reason[0]


def use_arch(name: str) -> None:
    if name == "cuda":
        reason = cuda_unavailable_reason()
        if reason is not None:
            if REQUIRE_CUDA:
                pytest.fail(f"QGRAPH_REQUIRE_CUDA=1 but CUDA is unavailable: {reason}")
            pytest.skip(f"CUDA unavailable: {reason}")
    qgraph.init(name)


def missing_cuda_compiler() -> str | None:
    """The piece of numba-cuda's compiler (numba-cuda, NVVM, NVRTC, libdevice) that is not
    installed, or None: asked the way numba-cuda finds them, without compiling anything."""
    if importlib.util.find_spec("numba_cuda") is None:
        return "numba-cuda is not installed"
    from cuda import pathfinder

    from qgraph.compiler import numba_prefetch

    numba_prefetch.wait()  # init("cuda") may be importing numba-cuda on a thread
    from numba.cuda.cuda_paths import get_cuda_paths

    try:
        paths = get_cuda_paths()
    except pathfinder.DynamicLibNotFoundError as e:  # NVRTC or NVVM: the pip extra [cu13] or a CUDA toolkit
        return str(e).splitlines()[0]
    for piece in ("nvvm", "libdevice"):
        if not (paths[piece].info and os.path.isfile(paths[piece].info)):
            return f"{piece} is not installed (numba-cuda looked in: {paths[piece].by})"
    return None


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


def generated_module(tmp_path_factory, name: str, source: str):
    """The module `name` made of `source`, written to a file of its own (qgraph reads kernels' source)
    and imported: the generated families' kernels."""
    path = tmp_path_factory.mktemp(name) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
