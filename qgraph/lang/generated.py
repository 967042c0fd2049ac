"""The one way qgraph runs code it generates, and the dump of everything it generates.

Launch paths and binders are generated as Python source: they run under a readable
pseudo-file name (`<qgraph: launch of kernel relax>`) registered with `linecache`, so a
traceback through them shows the generated line. Task code is generated as AST carrying
the user's file and line numbers (so errors point at the user's source) and runs under
that file name. With `QGRAPH_DUMP=<dir>` every generated source (Python, and the PTX the
CUDA backend compiles) is also written to `<dir>`, one file per piece of code. Host sources
are remembered by label, so those generated before `init()` read the dump directory (the
binders, made at decoration) are written when it does; each generated function keeps its
source for `kernel.inspect`. Host sources are built with `Lines` from structured pieces,
never edited by position or substring once written.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import linecache
import os
import re
from collections.abc import Iterator

_dump_dir: str | None = None
# label -> the latest host source run under it: what a dump directory set later still gets
_host_sources: dict[str, str] = {}


class Lines:
    """Generated Python as structured pieces, rendered once: statements at the current depth
    (`line`), a compound statement's body under `with lines.block("if x:")`, another builder's
    statements nested where it is added (`add`). A piece composes others instead of patching text."""

    def __init__(self) -> None:
        self._lines: list[tuple[int, str]] = []  # (depth, statement or header)
        self._depth = 0

    def line(self, *statements: str) -> Lines:
        self._lines += [(self._depth, s) for s in statements]
        return self

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[Lines]:
        """`header` (`if x:`, `try:`, ...) with what is added inside the `with` as its body."""
        self.line(header)
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1

    def add(self, piece: Lines) -> Lines:
        self._lines += [(self._depth + d, s) for d, s in piece._lines]
        return self

    @classmethod
    def of_body(cls, body: list[str]) -> Lines:
        """A piece from lines of a function body already indented (`    x = 1`), for generators
        that still return text; each four spaces past the first is a level."""
        piece = cls()
        piece._lines = [((len(s) - len(s.lstrip(" "))) // 4 - 1, s.lstrip(" ")) for s in body]
        return piece

    def rendered(self, depth: int = 0) -> list[str]:
        """The lines as text, `depth` levels in (a function body is 1)."""
        return ["    " * (depth + d) + s for d, s in self._lines]

    def function(self, signature: str) -> str:
        """The source of `def <signature>:` with these statements as its body."""
        return f"def {signature}:\n" + "\n".join(self.rendered(1)) + "\n"


def configure(dump_dir: str | None) -> None:
    """Set by `qgraph.init()` from QGRAPH_DUMP; a directory also gets the host sources generated
    before (a kernel's binders are made when it is decorated, usually before `init()`)."""
    global _dump_dir
    _dump_dir = dump_dir
    for label, source in list(_host_sources.items()):
        dump(label, source, "py")


def dump_dir() -> str | None:
    return _dump_dir


def run_source(source: str, label: str, namespace: dict) -> dict:
    """Execute generated source as `<qgraph: label>`; returns the namespace it filled."""
    filename = f"<qgraph: {label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    _host_sources[label] = source
    dump(label, source, "py")
    return namespace


def compile_tree(module: ast.Module, filename: str, label: str):
    """Compile generated AST located in the user's `filename`; dumps its source as `label`."""
    code = compile(module, filename, "exec")
    if _dump_dir is not None:
        dump(label, f"# generated from {filename}\n" + ast.unparse(module) + "\n", "py")
    return code


_MODULE_ENTRIES = ("__name__", "__file__", "__package__", "__spec__", "__loader__", "__builtins__")


def namespace(tree: ast.AST, globals_: dict, closure, injected: dict) -> dict:
    """The namespace generated `tree` runs in: its module's own entries (__name__...), the globals
    and closure variables the tree names, then `injected`. Never a copy of every global: the
    compiled code keeps its namespace, so a copy would keep every module-level object of the
    user's module (an argument a script still held at compile time) alive as long as the kernel."""
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    ns = {name: globals_[name] for name in _MODULE_ENTRIES if name in globals_}
    ns.update((name, globals_[name]) for name in names if name in globals_)
    ns.update((name, closure[name]) for name in names if name in closure)
    ns.update(injected)
    return ns


def run_tree(module: ast.Module, filename: str, label: str, namespace: dict) -> dict:
    exec(compile_tree(module, filename, label), namespace)
    return namespace


def function(source: str, name: str, label: str, namespace: dict):
    """The function `name` defined by generated `source` (which it keeps: `source_of`)."""
    fn = run_source(source, label, namespace)[name]
    fn.__qgraph_source__ = source
    return fn


def tree_function(module: ast.Module, filename: str, label: str, namespace: dict, name: str):
    """The function `name` defined by generated AST located in `filename` (it keeps the tree: `source_of`)."""
    fn = run_tree(module, filename, label, namespace)[name]
    fn.__qgraph_tree__ = module
    return fn


def source_of(fn) -> str | None:
    """The generated source that defined `fn` (`function`, `tree_function`), else None."""
    source = getattr(fn, "__qgraph_source__", None)
    if source is None and getattr(fn, "__qgraph_tree__", None) is not None:
        source = ast.unparse(fn.__qgraph_tree__) + "\n"
    return source


_UNSAFE = re.compile(r"[^\w.+-]+")


def dump(label: str, text: str, suffix: str) -> str | None:
    """Write one generated source under QGRAPH_DUMP (no-op when unset); returns its path."""
    if _dump_dir is None:
        return None
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    name = _UNSAFE.sub("_", label).strip("_")[:150]
    path = os.path.join(_dump_dir, f"{name}-{digest}.{suffix}")
    try:
        os.makedirs(_dump_dir, exist_ok=True)
        # a new file only, never through a link: a link planted at this (predictable) name in a shared
        # directory would otherwise make the run overwrite its target
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:  # the name holds the text's digest: a regular file there is this source
        return path if os.path.isfile(path) and not os.path.islink(path) else None
    except OSError:
        return None
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
