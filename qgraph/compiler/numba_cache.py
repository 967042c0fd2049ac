"""numba's on-disk cache of CPU code, as qgraph uses it: the other half of the numba adapter
(numba_adapter.py), the one other module that touches numba's internals.

Private APIs used here (checked against numba 0.68):
- `numba.core.caching.FunctionCache` / `CompileResultCacheImpl` / `_CacheLocator`: CPU code is
  cached under qgraph's cache directory, keyed by qgraph's fingerprint of the generated code
  instead of a source file's mtime.
- `numba.core.caching.IndexDataCacheFile`'s file layout (`_index_path`, `_version`,
  `_source_stamp`, `_load_index`/`_save_index`, `_data_name`/`_data_path`, `_dump`,
  `_open_for_write`, `load`/`save`): the index (.nbi) and data (.nbc) files are pickles, so
  each is sealed with an HMAC tag of the cache's key and checked before it is unpickled
  (compiler.cache_keys); the index is updated under a file lock.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import pickle
import warnings

from .cache_keys import CacheKey, make_private_dirs, open_private, private_writer, report_rejected
from .code_cache import report_unusable


@contextlib.contextmanager
def _exclusive(path: str):
    """An exclusive lock on `path` across processes (POSIX flock; elsewhere none)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


_LOCKED_INDEX: list = []


def locked_index_file_class():
    """numba's index of a function's cached overloads, updated under a file lock: processes that
    compile different signatures at once would otherwise each read the same index, pick the same
    data file name and keep only the last writer's entry."""
    if not _LOCKED_INDEX:
        from numba.core.caching import IndexDataCacheFile

        class LockedIndexDataCacheFile(IndexDataCacheFile):
            def save(self, key, data):
                with _exclusive(self._index_path + ".lock"):
                    super().save(key, data)

        _LOCKED_INDEX.append(LockedIndexDataCacheFile)
    return _LOCKED_INDEX[0]


_SEALED_INDEX: list = []


def sealed_index_file_class():
    """numba's index (.nbi) and data (.nbc) files, both pickles, each sealed with an HMAC tag of the
    cache's key (compiler.cache_keys) and checked before anything in it is unpickled: a file that fails
    is a miss (recompiled and overwritten) with one warning naming it, never loaded. The index's tag
    binds it to its file name; a data file's to its name, the index's stamp (qgraph's fingerprint) and
    the overload's index key, so a data file moved to another kernel's or signature's place fails.
    Files are written 0600 whatever the umask; a new overload's data is written before the index names it."""
    if not _SEALED_INDEX:
        from numba.core.caching import IndexDataCacheFile

        class SealedIndexDataCacheFile(IndexDataCacheFile):
            def __init__(self, cache_path, filename_base, source_stamp, key) -> None:
                super().__init__(cache_path=cache_path, filename_base=filename_base, source_stamp=source_stamp)
                self._key = key

            def _sealed(self, path: str, *context: bytes):
                """The payload of the sealed file at `path`; None when absent or when it fails its check."""
                try:
                    with open(path, "rb") as f:
                        sealed = f.read()
                except FileNotFoundError:
                    return None
                payload = self._key.open(sealed, self._key.name_of(path), *context)
                if payload is None:
                    report_rejected(path)
                return payload

            def _load_index(self):
                payload = self._sealed(self._index_path, b"numba-index")
                if payload is None:
                    return {}
                stream = io.BytesIO(payload)
                if pickle.load(stream) != self._version:  # another numba's index: not read further
                    return {}
                stamp, overloads = pickle.loads(stream.read())
                return overloads if stamp == self._source_stamp else {}

            def _save_index(self, overloads):
                payload = pickle.dumps(self._version, protocol=-1) + self._dump((self._source_stamp, overloads))
                with self._open_for_write(self._index_path) as f:
                    f.write(self._key.seal(payload, self._key.name_of(self._index_path), b"numba-index"))

            def _data_context(self, key) -> tuple[bytes, ...]:
                return b"numba-data", str(self._source_stamp).encode(), repr(key).encode()

            def load(self, key):
                data_name = self._load_index().get(key)
                if data_name is None:
                    return None
                payload = self._sealed(self._data_path(data_name), *self._data_context(key))
                return None if payload is None else pickle.loads(payload)

            def save(self, key, data):
                with _exclusive(self._index_path + ".lock"):
                    overloads = self._load_index()
                    data_name = overloads.get(key)
                    if data_name is None:
                        existing = set(overloads.values())
                        data_name = next(n for n in map(self._data_name, itertools.count(1)) if n not in existing)
                    path = self._data_path(data_name)
                    with self._open_for_write(path) as f:
                        f.write(self._key.seal(self._dump(data), self._key.name_of(path), *self._data_context(key)))
                    if overloads.get(key) != data_name:
                        overloads[key] = data_name
                        self._save_index(overloads)

            def _open_for_write(self, filepath):
                return private_writer(filepath)

        _SEALED_INDEX.append(SealedIndexDataCacheFile)
    return _SEALED_INDEX[0]


def _make_cache_class():
    from numba.core.caching import CompileResultCacheImpl, FunctionCache, _CacheLocator

    class QgraphLocator(_CacheLocator):
        """Cache files live in qgraph's cache dir, stamped with qgraph's code fingerprint."""

        def __init__(self, py_func, py_file) -> None:
            self._path, self._fingerprint, _ = py_func.__qgraph_cache__

        def ensure_cache_path(self) -> None:
            make_private_dirs(self._path)  # 0700 whatever the umask

        def get_cache_path(self) -> str:
            return self._path

        def get_source_stamp(self) -> str:
            return self._fingerprint

        def get_disambiguator(self) -> str:
            return self._fingerprint[:20]

        @classmethod
        def from_function(cls, py_func, py_file):
            return cls(py_func, py_file) if hasattr(py_func, "__qgraph_cache__") else None

    class QgraphCacheImpl(CompileResultCacheImpl):
        _locator_classes = [QgraphLocator]

    class QgraphFunctionCache(FunctionCache):
        """numba's function cache, made robust: a corrupt or unreadable entry is recompiled; and
        trusted: every file is sealed with the cache's key and checked before it is unpickled."""

        _impl_class = QgraphCacheImpl

        def __init__(self, py_func) -> None:
            super().__init__(py_func)
            self._cache_file = sealed_index_file_class()(
                cache_path=self._cache_path, filename_base=self._impl.filename_base,
                source_stamp=self._impl.locator.get_source_stamp(), key=py_func.__qgraph_cache__[2])

        def load_overload(self, sig, target_context):
            try:
                return super().load_overload(sig, target_context)
            except OSError as e:  # the directory cannot be read (a missing file is no error to numba)
                report_unusable(self.cache_path, e, "read", os.path.dirname(os.path.dirname(self.cache_path)))
                return None
            except Exception as e:  # an authenticated entry that still does not load (numba's own fault)
                warnings.warn(f"qgraph: ignoring a corrupt CPU cache entry in {self.cache_path} ({e!r}); "
                              "recompiling", RuntimeWarning, stacklevel=2)
                try:
                    os.unlink(self._cache_file._index_path)
                except OSError:
                    pass
                return None

        def save_overload(self, sig, data):
            try:
                super().save_overload(sig, data)
            except OSError as e:  # a read-only or full disk must not fail the call
                report_unusable(self.cache_path, e, "write", os.path.dirname(os.path.dirname(self.cache_path)))
            except Exception as e:
                warnings.warn(f"qgraph: could not write the CPU cache ({e!r})", RuntimeWarning, stacklevel=2)

    return QgraphFunctionCache


_CACHE_CLASS: list = []


def function_cache(py_func, cache: tuple[str, str, CacheKey]):
    """numba's cache object for `py_func` (a dispatcher's `_cache`): its files in `cache`'s directory,
    stamped with its fingerprint and sealed with its key."""
    if not _CACHE_CLASS:
        _CACHE_CLASS.append(_make_cache_class())
    py_func.__qgraph_cache__ = cache
    return _CACHE_CLASS[0](py_func)
