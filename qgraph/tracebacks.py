"""Tracebacks of the errors qgraph raises for a user's mistake end at the user's code.

Such an error (a wrong argument, a kernel numba cannot compile, a misused tape) is raised deep
inside qgraph, so its traceback used to run through 6 to 32 of qgraph's and numba's frames, with
numba's dump printed twice (the compile error's message holds it, and its chained cause printed
it again), and the user's line lost among them. As JAX's traceback_util does at its API boundary,
each public entry point (a kernel's binder, the decorators, `Tape.backward`, a step's call,
torch_op's operator) hands what leaves it to `user_error`, which, for an error qgraph raised on
purpose (a `raise` statement in qgraph's code or in the code it generates), removes the frames
whose code is qgraph's, hides the chained cause (what it says is in the message already), and
ends the traceback of an error about a kernel's source line (`QgraphSyntaxError`, `at_source`)
at that line, so that it reads as Python's own would: the user's call, then the kernel line.
Anything else (a bug in qgraph, an exception of the user's own code called back) passes
unchanged, and `QGRAPH_TRACEBACK=full` turns all of this off, for a bug report. Only the error
path runs any of it: a `try` around an entry point costs nothing (Python 3.11) until something
raises.
"""

from __future__ import annotations

import functools
import linecache
import opcode
import os
import re
from types import TracebackType

from .errors import QgraphError, QgraphSyntaxError

VARIABLE = "QGRAPH_TRACEBACK"
MODES = ("short", "full")

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_RAISE = opcode.opmap["RAISE_VARARGS"]
_LINE_MARK = "_qgraph_kernel_line"  # in the globals of the frame that stands for a kernel's source line
_AT = "_qgraph_source_line"  # on an error about a kernel's source line: (file, line) (at_source)


def traceback_mode(environ=os.environ) -> str:
    """QGRAPH_TRACEBACK's mode, read when an error leaves qgraph (so it can be set at any time):
    "short" (unset or empty) or "full". Another value counts as "full" here, where nothing may be
    lost, and is refused by `qgraph.init()` (check_mode)."""
    text = environ.get(VARIABLE, "").strip().lower()
    return "short" if text in ("", "short") else "full"


def check_mode(environ=os.environ) -> None:
    """QgraphError unless QGRAPH_TRACEBACK is unset, empty, `short` or `full` (read by init())."""
    text = environ.get(VARIABLE, "")
    if text.strip().lower() not in ("",) + MODES:
        raise QgraphError(f"{VARIABLE}={text!r}: expected 'short' (the default: tracebacks of qgraph's errors end "
                          "at your code) or 'full' (every frame and the chained errors, for a bug report)")


def is_internal(code) -> bool:
    """Whether a frame runs qgraph's code: its package's files, code generated under a `<qgraph: ...>`
    name, or a generated function placed in the user's file (`_qg_bounds`)."""
    name = code.co_filename
    return name.startswith(_PACKAGE) or name.startswith("<qgraph") or code.co_name.startswith("_qg_")


def entry_point(fn):
    """`fn` as a public entry point: an error qgraph raised for the user's mistake leaves it with the
    traceback `user_error` gives (for functions called once per program, such as decorators; the call
    paths of kernels and steps have the same `try` in their own bodies, adding no call)."""

    @functools.wraps(fn)
    def entry(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            e.with_traceback(e.__traceback__.tb_next)  # not this wrapper's frame: as if `fn` were called
            user_error(e)
            raise

    return entry


def at_source(error: BaseException, filename: str, lineno: int) -> BaseException:
    """`error`, marked as being about the kernel source line `filename:lineno` (an out-of-bounds index
    in debug mode, an array shorter than its loop), so its traceback ends there as a syntax error's does."""
    setattr(error, _AT, (filename, lineno))
    return error


def user_error(error: BaseException, through: tuple[str, ...] = ()) -> None:
    """Shorten, in place, the traceback of `error` as it leaves a public entry point (see the module's
    docstring); the entry point re-raises it with a bare `raise`, which adds no frame of its own.
    `through`: directories of another library whose frames the entry point's call runs through
    (PyTorch's dispatcher, under torch_op's operator), dropped as well."""
    if getattr(error, "_qgraph_short", False):  # shortened at an inner entry point: drop the frames since
        error.with_traceback(_without_internal(error.__traceback__, through))
        return
    if not raised_by_qgraph(error) or traceback_mode() == "full" or "qgraph bug" in str(error):
        return
    kept = _without_internal(error.__traceback__, through)
    where = (error.filename, error.lineno) if isinstance(error, QgraphSyntaxError) else getattr(error, _AT, None)
    if where and where[0] and where[1]:
        kept = _append(kept, _line_entry(error, *where))
    error.__cause__ = None  # still reachable as __context__, not printed
    error.__suppress_context__ = True
    error.with_traceback(kept)
    error._qgraph_short = True


def raised_by_qgraph(error: BaseException) -> bool:
    """Whether a `raise` statement in qgraph's code raised `error` (an error said on purpose, not a
    failing operation: that would be a bug, whose frames the report needs)."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return is_internal(code) and 0 <= tb.tb_lasti < len(code.co_code) and code.co_code[tb.tb_lasti] == _RAISE


def _without_internal(tb: TracebackType | None, through: tuple[str, ...] = ()) -> TracebackType | None:
    kept = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if _LINE_MARK in tb.tb_frame.f_globals or not (is_internal(code) or code.co_filename.startswith(through)):
            kept.append(tb)
        tb = tb.tb_next
    return _chained(kept, None)


def _append(tb: TracebackType | None, last: TracebackType | None) -> TracebackType | None:
    if last is None:
        return tb
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    return _chained(entries, last)


def _chained(entries: list[TracebackType], tail: TracebackType | None) -> TracebackType | None:
    """A new traceback of `entries`' frames in order, then `tail`."""
    for entry in reversed(entries):
        tail = TracebackType(tail, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return tail


def _line_entry(error: BaseException, filename: str, lineno: int) -> TracebackType | None:
    """A traceback entry at `filename:lineno`, in a frame named after the function there: a statement
    raising `error`, compiled at that line and column, and run."""
    line = linecache.getline(filename, lineno)
    indent = line[:len(line) - len(line.lstrip())] if line.strip() and lineno > 1 else ""
    statement = "raise (\n_e)"  # its position runs on past the line: no carets under it
    head = "if 1:\n" + "\n" * (lineno - 2) if indent else "\n" * (lineno - 1)
    name = _function_at(filename, lineno)
    try:
        code = compile(head + indent + statement + "\n", filename, "exec")
    except SyntaxError:  # an indentation of tabs and spaces the block cannot take
        code = compile("\n" * (lineno - 1) + "raise _e\n", filename, "exec")
    code = code.replace(co_name=name, **({"co_qualname": name} if hasattr(code, "co_qualname") else {}))
    namespace = {"_e": error, _LINE_MARK: True}
    saved = error.__traceback__, error.__cause__, error.__context__, error.__suppress_context__
    entry = None
    try:
        exec(code, namespace)
    except BaseException as raised:  # `error` itself
        entry = raised.__traceback__.tb_next if raised is error and raised.__traceback__ else None
    finally:
        del namespace["_e"]
        error.__traceback__, error.__cause__, error.__context__, error.__suppress_context__ = saved
    return None if entry is None else TracebackType(None, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)


_DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)")


def _function_at(filename: str, lineno: int) -> str:
    """The name of the function whose body holds the line (the kernel's, or a helper's)."""
    lines = linecache.getlines(filename)
    if not 0 < lineno <= len(lines):
        return "<kernel>"
    target = lines[lineno - 1]
    depth = len(target) - len(target.lstrip())
    for text in reversed(lines[:lineno]):
        found = _DEF.match(text)
        if found and (len(found.group(1)) < depth or text is target):
            return found.group(2)
    return "<kernel>"
