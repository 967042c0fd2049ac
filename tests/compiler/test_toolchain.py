"""compiler/toolchain: the versions in every cache key are importlib.metadata's, read without
importing it (or numba): a warm start pays for neither."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from qgraph.compiler.toolchain import installed_version, toolchain_versions


@pytest.mark.parametrize("dist, package", [("numba", "numba"), ("llvmlite", "llvmlite"), ("numpy", "numpy"),
                                           ("numba-cuda", "numba_cuda"), ("pytest", "pytest")])
def test_installed_versions_are_those_importlib_metadata_gives(dist, package):
    try:
        expected = metadata.version(dist)
    except metadata.PackageNotFoundError:
        expected = "none"
    assert installed_version(dist, package) == expected


def test_a_package_that_is_not_installed_has_version_none():
    assert installed_version("qgraph-no-such-dist", "qgraph_no_such_package") == "none"


def test_the_cache_key_versions_name_qgraph_and_the_code_generators():
    parts = dict(part.split("=", 1) for part in toolchain_versions().split(";"))
    assert set(parts) == {"qgraph", "cache-format", "numba", "numba-cuda", "llvmlite"}
    assert parts["numba"] == metadata.version("numba") and parts["llvmlite"] == metadata.version("llvmlite")


def test_reading_the_versions_imports_neither_importlib_metadata_nor_numba():
    code = """if True:
        import sys
        from qgraph.compiler.toolchain import toolchain_versions
        toolchain_versions()
        imported = [m for m in ("importlib.metadata", "numba") if m in sys.modules]
        assert not imported, imported
        print("ok")
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
