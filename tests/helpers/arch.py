"""Which backend a test runs on (behind conftest's arch, cuda, cpu and loop_arch fixtures, and for
tests that switch backends themselves): CUDA skips without a GPU, or fails under
QGRAPH_REQUIRE_CUDA=1, so a GPU run that found no device cannot look green."""

from __future__ import annotations

import importlib.util
import os

import pytest

import qgraph

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


def need_gpus(count: int) -> None:
    """Skip the test unless this machine has `count` CUDA devices (none on CI): the multi-GPU tests."""
    have = qgraph.device_count() if os.environ.get("CI") != "true" else 0
    if have < count:
        pytest.skip(f"needs {count} CUDA device{'s' if count > 1 else ''}")


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
