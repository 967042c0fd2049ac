"""Shared fixtures: run behaviour tests on every arch; CUDA skips without a GPU (fails under
QGRAPH_REQUIRE_CUDA=1, so a GPU run that found no device cannot look green)."""

from __future__ import annotations

import os
import tempfile

import pytest

# Keep test compilations out of the user's cache, but shared across this session's tests.
os.environ.setdefault("QGRAPH_CACHE_DIR", tempfile.mkdtemp(prefix="qgraph-test-cache-"))

import qgraph  # noqa: E402

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
