"""Trust in the compile cache: a private directory, and a per-user key that authenticates each entry.

What the cache holds is run: numba's CPU files are pickles (unpickling one can run any code) and
a CUDA entry is machine code. So the cache directory must be writable by its owner alone, and
every file qgraph reads there carries an HMAC-SHA256 tag made with a secret key (32 random bytes
in `<cache>/.key`, created with O_EXCL, mode 0600): a file another user planted or edited, or an
entry moved to another entry's place, fails the check before anything in it is parsed, and is
treated as missing (recompiled and overwritten; one RuntimeWarning names the file).

A directory or key that another user owns or can write is refused with a QgraphError that says
how to fix it, as ssh refuses a world-writable key: at `qgraph.init()` when it already exists
(runtime.settings), and at the first use of the cache in a process, when the key is read or made
(one memo per cache directory, dropped by init). Directories qgraph makes are 0700 and files 0600,
whatever the umask. See docs/caching.md, "Security and shared cache directories".
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import stat
import threading
import time
import uuid
import warnings

from ..errors import QgraphError

KEY_NAME = ".key"
KEY_BYTES = 32
MAGIC = b"qgraph-hmac-sha256\n"  # the first bytes of every sealed file, then the 32-byte tag
TAG_BYTES = 32

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_CACHE_OFF = "QGRAPH_CACHE=0 turns the cache off"


# --------------------------------------------------------------------------- who may write


def current_uid() -> int | None:
    """The user whose cache this is (the effective user id); None where there are no user ids."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def owner_of(status: os.stat_result) -> int:
    """The user id that owns a file (one place, so tests can simulate another user)."""
    return status.st_uid


def _writers(mode: int) -> str:
    who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "other users")) if mode & bit]
    return " and ".join(who)


def directory_problem(path: str, status: os.stat_result) -> str | None:
    """Why the cache directory at `path` must not be trusted, or None: it must be owned by this
    user and writable by nobody else."""
    uid = current_uid()
    if uid is None:
        return None
    owner = owner_of(status)
    if owner != uid:
        return (f"the compile cache directory {path} is owned by user id {owner}, not by this user (id {uid}): its "
                f"owner could plant compiled code that qgraph would run; point QGRAPH_CACHE_DIR at a directory of your "
                f"own (or {_CACHE_OFF})")
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (f"the compile cache directory {path} is writable by {_writers(status.st_mode)} (mode "
                f"{stat.S_IMODE(status.st_mode):04o}): another user could plant compiled code that qgraph would run; "
                f"run `chmod 700 {path}`, or point QGRAPH_CACHE_DIR at a private directory (or {_CACHE_OFF})")
    return None


def key_problem(path: str, status: os.stat_result) -> str | None:
    """Why the key file at `path` must not be trusted, or None: a regular file of this user's that
    nobody else can read or write."""
    if stat.S_ISLNK(status.st_mode) or not stat.S_ISREG(status.st_mode):
        return (f"the compile cache key {path} is not a regular file (a symbolic link or another kind): remove it "
                f"(`rm {path}`: a new key is made and cached code is recompiled)")
    uid = current_uid()
    if uid is None:
        return None
    owner = owner_of(status)
    if owner != uid:
        return (f"the compile cache key {path} is owned by user id {owner}, not by this user (id {uid}): point "
                f"QGRAPH_CACHE_DIR at a directory of your own (or {_CACHE_OFF})")
    if status.st_mode & 0o077:
        return (f"the compile cache key {path} can be read or written by other users (mode "
                f"{stat.S_IMODE(status.st_mode):04o}): whoever read it can forge cache entries that qgraph would run; "
                f"remove it (`rm {path}`: a new key is made and cached code is recompiled), or `chmod 600 {path}` if "
                f"nobody else can have read it")
    return None


def check_cache_directory(path: str, source: str = "") -> None:
    """QgraphError (prefixed by `source`, where the path came from) when the cache directory or its
    key exists and another user owns or can write it; nothing is created. At init: a stat or two."""
    prefix = f"{source}: " if source else ""
    try:
        status = os.stat(path)
    except OSError:
        return  # not there yet (made private on first use), or unreadable (reported at first use)
    problem = directory_problem(path, status)
    if problem is None:
        key = os.path.join(path, KEY_NAME)
        try:
            problem = key_problem(key, os.lstat(key))
        except OSError:
            return
    if problem is not None:
        raise QgraphError(prefix + problem)


# --------------------------------------------------------------------------- private directories and files


def make_private_dirs(path: str) -> None:
    """`path` and its missing parents made with mode 0700 whatever the umask (os.makedirs leaves
    the parents to the umask and masks the leaf's mode). Directories that exist are left as they are."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            if os.path.isdir(folder):
                continue  # another process made it
            raise
        os.chmod(folder, 0o700)


@contextlib.contextmanager
def private_writer(path: str):
    """A file object writing `path` atomically: a new temporary file beside it (O_EXCL, O_NOFOLLOW,
    mode 0600 whatever the umask) moved into place with os.replace when the block ends; removed on
    an error. A reader never sees half a file."""
    tmp = os.path.join(os.path.dirname(path), f".tmp-{uuid.uuid4().hex[:16]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            fd = -1
            yield handle
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def open_private(path: str, flags: int) -> int:
    """os.open of a file qgraph keeps in the cache (a lock file): mode 0600, never through a symbolic link."""
    fd = os.open(path, flags | _NOFOLLOW | _CLOEXEC, 0o600)
    if flags & os.O_CREAT and hasattr(os, "fchmod"):
        with contextlib.suppress(OSError):  # (the file may be an older one of ours)
            os.fchmod(fd, 0o600)
    return fd


# --------------------------------------------------------------------------- the key and the tags


class CacheKey:
    """The secret of one cache directory: seals what qgraph writes there and opens what it reads."""

    def __init__(self, root: str, secret: bytes) -> None:
        self.root = root
        self._secret = secret

    def name_of(self, path: str) -> bytes:
        """A file's name relative to the cache directory: tags bind a file's content to its place."""
        return os.path.relpath(path, self.root).replace(os.sep, "/").encode()

    def tag(self, *parts: bytes) -> bytes:
        """HMAC-SHA256 of the parts, each prefixed by its length (no two lists of parts read the same)."""
        mac = hmac.new(self._secret, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(len(part).to_bytes(8, "little"))
            mac.update(part)
        return mac.digest()

    def seal(self, payload: bytes, *context: bytes) -> bytes:
        """MAGIC, the tag of `context` and `payload`, then `payload`: what is written."""
        return MAGIC + self.tag(*context, payload) + payload

    def open(self, sealed: bytes, *context: bytes) -> bytes | None:
        """The payload of a sealed file when its tag matches `context` (its place and entry), else None."""
        head = len(MAGIC) + TAG_BYTES
        if len(sealed) < head or not sealed.startswith(MAGIC):
            return None
        payload = memoryview(sealed)[head:]
        if not hmac.compare_digest(sealed[len(MAGIC):head], self.tag(*context, payload)):
            return None
        return bytes(payload)

    def matches(self, tag_hex: object, *parts: bytes) -> bool:
        return isinstance(tag_hex, str) and hmac.compare_digest(tag_hex.encode(), self.tag(*parts).hex().encode())


_LOCK = threading.Lock()
_KEYS: dict[str, CacheKey] = {}


def cache_key(root: str) -> CacheKey:
    """The key of the cache directory `root`, made (directory 0700, key 0600) on first use; once per
    process and root until `forget()`. QgraphError when another user owns or can write either;
    OSError when the disk will not let it be read or made (the caller reports that and compiles)."""
    with _LOCK:
        found = _KEYS.get(root)
        if found is None:
            found = _KEYS[root] = CacheKey(root, _secret(root))
        return found


def forget() -> None:
    """Drop the keys read (init: the directory may have been replaced or repaired since)."""
    with _LOCK:
        _KEYS.clear()


def _secret(root: str) -> bytes:
    make_private_dirs(root)
    problem = directory_problem(root, os.stat(root))
    if problem is not None:
        raise QgraphError(problem)
    path = os.path.join(root, KEY_NAME)
    for _ in range(20):  # a key another process is writing this moment: wait for its 32 bytes
        try:
            secret = _read_key(path)
        except FileNotFoundError:
            secret = _create_key(path)
        if secret is not None and len(secret) == KEY_BYTES:
            return secret
        time.sleep(0.01)
    secret = os.urandom(KEY_BYTES)  # a damaged key (a crash while it was written): a new one
    with private_writer(path) as handle:
        handle.write(secret)
    return secret


def _read_key(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    try:
        problem = key_problem(path, os.fstat(fd))
        if problem is not None:
            raise QgraphError(problem)
        return os.read(fd, KEY_BYTES + 1)
    finally:
        os.close(fd)


def _create_key(path: str) -> bytes | None:
    """A new key written to `path` with O_EXCL; None when another process made one first."""
    secret = os.urandom(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    except FileExistsError:
        return None
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        if os.write(fd, secret) != KEY_BYTES:
            raise OSError("short write of the compile cache key")
    finally:
        os.close(fd)
    return secret


_REJECTED: set[str] = set()


def report_rejected(path: str) -> None:
    """One RuntimeWarning per file and process: a cache file failed its check, so it was not loaded."""
    if path in _REJECTED:
        return
    _REJECTED.add(path)
    warnings.warn(f"qgraph: the compile cache file {path} failed its authentication check (it was not written "
                  "by this user's qgraph with this cache's key: planted by someone else, moved from another entry's "
                  "place, or damaged); it was not loaded, and its entry is compiled again", RuntimeWarning,
                  stacklevel=3)
