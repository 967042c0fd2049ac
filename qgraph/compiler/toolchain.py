"""The versions that change generated code, which key every cache entry.

Read on every start, warm ones too, so they are read without importing what they describe, and
without importlib.metadata (13 ms to import on the development machine, 35 ms on the GPU host,
of a 45-80 ms warm first call): a distribution's version is the `Version:` line of the METADATA
in its .dist-info folder beside its package, with importlib.metadata as the fallback for other
layouts (eggs, editable installs).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys

from .code_cache import FORMAT

# distribution -> the top-level package it installs (found without importing it)
DISTRIBUTIONS = {"numba": "numba", "numba-cuda": "numba_cuda", "llvmlite": "llvmlite"}


@functools.cache
def qgraph_digest() -> str:
    """A hash of qgraph's own source: a qgraph upgrade must not load code an older one cached."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "bench", "examples"))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    h.update(os.path.relpath(path, package).encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


@functools.cache
def toolchain_versions() -> str:
    """qgraph's digest, the cache format and the code generators' versions; part of every key."""
    parts = [f"qgraph={qgraph_digest()}", f"cache-format={FORMAT}"]
    parts += [f"{dist}={installed_version(dist, package)}" for dist, package in DISTRIBUTIONS.items()]
    return ";".join(parts)


@functools.cache
def toolchain_versions_digest() -> str:
    """A short directory name for the toolchain and Python version."""
    text = toolchain_versions() + f";python={sys.version_info[:2]}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def installed_version(dist: str, package: str) -> str:
    """`dist`'s version as importlib.metadata.version gives it, or "none" when not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        return "none"
    for place in spec.submodule_search_locations or [os.path.dirname(spec.origin or "")]:
        version = _dist_info_version(os.path.dirname(place), dist)
        if version is not None:
            return version
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def _dist_info_version(site: str, dist: str) -> str | None:
    """The Version of `dist`'s .dist-info folder in `site` (names compared normalised, PEP 503)."""
    try:
        names = os.listdir(site)
    except OSError:
        return None
    wanted = _normalised(dist)
    for name in names:
        if name.endswith(".dist-info") and _normalised(name[: -len(".dist-info")].rpartition("-")[0]) == wanted:
            try:
                with open(os.path.join(site, name, "METADATA"), encoding="utf-8") as f:
                    for line in f:
                        if line.startswith("Version:"):
                            return line.partition(":")[2].strip()
                        if not line.strip():
                            break  # the headers end at the first blank line
            except OSError:
                continue
    return None


def _normalised(name: str) -> str:
    return name.replace("-", "_").replace(".", "_").lower()
