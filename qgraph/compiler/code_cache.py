"""On-disk cache of compiled code: CUDA cubins, and the CPU's emitted serial forms (compiler.llvm_cpu)
as object code (numba's own CPU functions use numba's cache, via the adapter).

An entry is a binary (the linked cubin of a specialisation's tasks) and a JSON manifest
describing it. Both are written to temporary names and moved into place with os.replace,
binary first, manifest last: the manifest is the commit marker, so a reader never sees
half an entry, and concurrent writers of the same key write identical content. The
manifest records the binary's SHA-256 and an HMAC-SHA256 tag of itself made with the cache's
secret key (compiler.cache_keys): an entry that fails to parse or verify is treated as missing
(and overwritten by the recompile), never as a crash, and a planted or edited one is never loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings

from ..errors import QgraphError
from .cache_keys import CacheKey, cache_key, make_private_dirs, private_writer, report_rejected

# 2: generated CPU functions carry names unique to their kernel and code (older CPU entries
# could define the same symbol for different kernels); every older entry is ignored.
# 3: every entry is authenticated with the cache's key (compiler.cache_keys).
FORMAT = 3


_FIX = "point QGRAPH_CACHE_DIR at a writable directory (it is created if missing) or set QGRAPH_CACHE=0 to turn " \
       "the cache off"
_REPORTED: set[tuple[str, str]] = set()  # (directory, "read" or "write") already reported in this process


def check_directory(path: str, source: str) -> None:
    """QgraphError when the cache cannot be a directory at `path` because a file is there (or
    at the nearest part of the path that exists); `source` says where the path came from."""
    existing = path
    while not os.path.lexists(existing):
        parent = os.path.dirname(existing)
        if parent == existing:
            return
        existing = parent
    if not os.path.isdir(existing):
        where = "is a file" if existing == path else f"cannot be created: {existing} is a file"
        raise QgraphError(f"{source}: the compile cache directory {path} {where}; {_FIX}")


def report_unusable(directory: str, error: OSError, doing: str, root: str | None = None) -> None:
    """One RuntimeWarning per cache (`root`, the directory the user named), kind of access and
    process: the disk refused to let the cache `doing` ("read" or "write") in `directory`, so
    entries are compiled instead of loaded or kept."""
    if (root or directory, doing) in _REPORTED:
        return
    _REPORTED.add((root or directory, doing))
    then = "compiling instead" if doing == "read" else "compiled code is not kept for later processes"
    warnings.warn(f"qgraph: cannot {doing} the compile cache in {directory} ({type(error).__name__}: "
                  f"{error.strerror or error}); {then}: {_FIX}", RuntimeWarning, stacklevel=3)


def entry_key(*parts: str) -> str:
    """The cache key of everything that determines the compiled code."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class CodeCache:
    """A directory of compiled entries; `None` directory means caching is off."""

    def __init__(self, directory: str | None, kind: str = "cuda") -> None:
        self.root = directory  # where the key is (compiler.cache_keys)
        self.directory = None if directory is None else os.path.join(directory, kind)
        self._context = f"{kind}-entry".encode()  # what a tag covers besides the manifest: no entry moves kind

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def holds_entries(self) -> bool:
        """Whether any compiled entry is here (any toolchain or kernel): if not, a first call
        compiles (compiler.numba_prefetch)."""
        if self.directory is None:
            return False
        try:
            with os.scandir(self.directory) as found:
                return any(entry.is_dir() for entry in found)
        except OSError:
            return False

    def _paths(self, key: str) -> tuple[str, str]:
        base = os.path.join(self.directory, key[:2], key)
        return base + ".bin", base + ".json"

    def load(self, key: str) -> tuple[dict, bytes] | None:
        """(manifest, binary) for `key`, or None when absent or damaged."""
        if self.directory is None:
            return None
        bin_path, manifest_path = self._paths(key)
        try:
            with open(manifest_path, "rb") as f:
                manifest = json.loads(f.read())
            with open(bin_path, "rb") as f:
                binary = f.read()
        except (FileNotFoundError, ValueError):  # absent, or a manifest that does not parse
            return None
        except OSError as e:  # the disk refuses: say so once, then compile
            report_unusable(self.directory, e, "read", self.root)
            return None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            return None  # another qgraph's entry (or no entry): never read further
        secret = self._key()
        if secret is None:  # no key (none can be made here): nothing here can be trusted
            return None
        tag = manifest.pop("hmac", None)
        if not secret.matches(tag, self._context, _canonical(manifest)) or manifest.get("key") != key:
            report_rejected(manifest_path)
            return None
        if manifest.get("sha256") != hashlib.sha256(binary).hexdigest():
            report_rejected(bin_path)
            return None
        return manifest, binary

    def _key(self, doing: str = "read") -> CacheKey | None:
        """The cache's key (made on first use); None, reported once when `doing` a write, when the
        disk refuses. QgraphError when another user owns or can write the directory or key."""
        try:
            return cache_key(self.root)
        except OSError as e:
            if doing == "write":
                report_unusable(self.directory, e, "write", self.root)
            return None

    def store(self, key: str, manifest: dict, binary: bytes) -> bool:
        """Write an entry; returns False (and leaves no partial entry, with one warning per
        directory) when the disk refuses."""
        if self.directory is None:
            return False
        secret = self._key("write")
        if secret is None:
            return False
        bin_path, manifest_path = self._paths(key)
        record = dict(manifest, format=FORMAT, key=key, sha256=hashlib.sha256(binary).hexdigest())
        record["hmac"] = secret.tag(self._context, _canonical(record)).hex()
        try:
            make_private_dirs(os.path.dirname(bin_path))
            _write_atomic(bin_path, binary)
            _write_atomic(manifest_path, json.dumps(record, sort_keys=True).encode())
        except OSError as e:
            report_unusable(self.directory, e, "write", self.root)
            return False
        return True


def _canonical(manifest: dict) -> bytes:
    """The manifest's bytes its tag covers (its key, format and the binary's SHA-256 among them)."""
    return json.dumps(manifest, sort_keys=True).encode()


def _write_atomic(path: str, data: bytes) -> None:
    with private_writer(path) as f:  # mode 0600, moved into place when written
        f.write(data)
