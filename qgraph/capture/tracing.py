"""Numbers traced through a step's body: what a `@qgraph.graph` call computes from its number arguments.

A traced run of a step's body gets each number argument as a `Traced` value: the number itself,
plus a name in the trace's code. Arithmetic on it (Python operators, `round`, `math.floor`, NumPy
ufuncs on scalars) gives a new `Traced` whose code line says how it was computed, so a kernel
call given `t + k * dt` records that expression, not the number. A later call with new numbers
evaluates the recorded expressions (`Trace.evaluator`, one generated function) instead of
running the body again.

Any other use makes the value leave the trace (`Trace.escape`): a comparison or `bool()` (a
Python decision), `float()`/`int()` (a conversion qgraph does not see: `math.sin(t)`), text
(`print`, f-strings), a hash, `np.asarray`. The value is then the plain number, so the run
stays correct, but the step cannot replay without its body: it falls back, and the reason
names the first such line. What the body reads besides its arguments (globals, closure cells,
the module arrays its kernels read) is watched (`Trace.watch`): a replay checks they are the
same objects, so a body swapping global arrays is not replayed stale.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable

import numpy as np

from ..args.structs import RESOLVED_ATTR
from ..lang import generated
from ..runtime.arrays import Ndarray
from ..runtime.call_hooks import BoundCall, StepBody

NUMBER_TYPES = (int, float, np.integer, np.floating)  # traced (bool and np.bool_ key the cache instead)
_TRACED_NAME = re.compile(r"\b_[ta]\d+\b")  # the traced values an expression line reads
_PLAIN = (bool, np.bool_, str, type(None), bytes, tuple) + NUMBER_TYPES  # kernel arguments a replay gives again
_QGRAPH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Traced:
    """A number of a traced step run: its value now and its name in the trace's code."""

    __slots__ = ("value", "name", "trace", "roots")
    _qgraph_traced = True  # what argument resolution unwraps (args.resolve)
    __array_priority__ = 1000

    def __init__(self, value, name: str, trace: Trace, roots: frozenset) -> None:
        self.value, self.name, self.trace, self.roots = value, name, trace, roots

    @property
    def __class__(self):  # isinstance(t, float) answers for the number it stands for
        return type(self.value)

    # -------------------------------------------------------------- traced operations
    def _op(self, other, fn: Callable, text: str, swap: bool = False):
        if type(other) is Traced:
            b, b_name, roots = other.value, other.name, self.roots | other.roots
        elif isinstance(other, (bool, np.bool_) + NUMBER_TYPES):
            b, b_name, roots = other, self.trace.constant(other), self.roots
        else:
            return NotImplemented
        a, a_name = self.value, self.name
        if swap:
            a, b, a_name, b_name = b, a, b_name, a_name
        return self.trace.line(text.format(a_name, b_name), fn(a, b), roots)

    def __add__(self, o): return self._op(o, lambda a, b: a + b, "{} + {}")
    def __radd__(self, o): return self._op(o, lambda a, b: a + b, "{} + {}", True)
    def __sub__(self, o): return self._op(o, lambda a, b: a - b, "{} - {}")
    def __rsub__(self, o): return self._op(o, lambda a, b: a - b, "{} - {}", True)
    def __mul__(self, o): return self._op(o, lambda a, b: a * b, "{} * {}")
    def __rmul__(self, o): return self._op(o, lambda a, b: a * b, "{} * {}", True)
    def __truediv__(self, o): return self._op(o, lambda a, b: a / b, "{} / {}")
    def __rtruediv__(self, o): return self._op(o, lambda a, b: a / b, "{} / {}", True)
    def __floordiv__(self, o): return self._op(o, lambda a, b: a // b, "{} // {}")
    def __rfloordiv__(self, o): return self._op(o, lambda a, b: a // b, "{} // {}", True)
    def __mod__(self, o): return self._op(o, lambda a, b: a % b, "{} % {}")
    def __rmod__(self, o): return self._op(o, lambda a, b: a % b, "{} % {}", True)
    def __rpow__(self, o): return self._op(o, lambda a, b: a ** b, "{} ** {}", True)

    def __pow__(self, o, modulo=None):
        if modulo is not None:
            return pow(self._leave("raised to a power modulo a number"), _plain(o), _plain(modulo))
        return self._op(o, lambda a, b: a ** b, "{} ** {}")

    def _unary(self, fn: Callable, text: str, *extra):
        return self.trace.line(text.format(self.name, *extra), fn(self.value), self.roots)

    def __neg__(self): return self._unary(lambda a: -a, "-{}")
    def __pos__(self): return self._unary(lambda a: +a, "+{}")
    def __abs__(self): return self._unary(abs, "abs({})")
    def __trunc__(self): return self._unary(math.trunc, "_math.trunc({})")
    def __floor__(self): return self._unary(math.floor, "_math.floor({})")
    def __ceil__(self): return self._unary(math.ceil, "_math.ceil({})")

    def __round__(self, digits=None):
        if digits is None:
            return self._unary(round, "round({})")
        if type(digits) is Traced:
            return round(self._leave("rounded to a traced number of digits"), digits.value)
        return self._unary(lambda a: round(a, digits), "round({}, {})", self.trace.constant(digits))

    def __array_ufunc__(self, ufunc, method: str, *inputs, **kwargs):
        """A NumPy ufunc on numbers (np.sin(t), np.float32(2) * t) is traced; anything else leaves."""
        if method == "__call__" and not kwargs and ufunc.nout == 1 and \
                all(type(x) is Traced or isinstance(x, (bool, np.bool_) + NUMBER_TYPES) for x in inputs):
            trace = self.trace
            names = [x.name if type(x) is Traced else trace.constant(x) for x in inputs]
            roots = frozenset().union(*(x.roots for x in inputs if type(x) is Traced))
            value = ufunc(*(_plain(x) for x in inputs))
            return trace.line(f"{trace.constant(ufunc)}({', '.join(names)})", value, roots)
        self._leave(f"passed to numpy.{ufunc.__name__} in a way not traced")
        return getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)

    # -------------------------------------------------------------- uses that leave the trace
    def _leave(self, what: str):
        self.trace.escape(self, what)
        return self.value

    def __float__(self): return float(self._leave("converted with float() (or read by a function qgraph does "
                                                  "not trace, such as math.sin: use numpy's, which is traced)"))
    def __int__(self): return int(self._leave("converted with int()"))
    def __index__(self): return self._leave("used as an index or a count (range(), a list index)").__index__()
    def __complex__(self): return complex(self._leave("converted with complex()"))
    def __bool__(self): return bool(self._leave("decides Python control flow (if, while, and/or, bool())"))
    def __hash__(self): return hash(self._leave("used as a dict key or set member"))
    def __str__(self): return str(self._leave("made into text (print, str, an f-string)"))
    def __repr__(self): return repr(self._leave("made into text (repr)"))
    def __format__(self, spec): return format(self._leave("made into text (format, an f-string)"), spec)
    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._leave("made into a NumPy array"), dtype=dtype)

    def _compare(self, other, op: Callable, symbol: str):
        self._leave(f"compared (`{symbol}`, also inside min(), max() or sorted()): a Python decision on it "
                    "(np.minimum, np.maximum and np.clip are traced)")
        return op(self.value, _plain(other))

    def __eq__(self, o): return self._compare(o, lambda a, b: a == b, "==")
    def __ne__(self, o): return self._compare(o, lambda a, b: a != b, "!=")
    def __lt__(self, o): return self._compare(o, lambda a, b: a < b, "<")
    def __le__(self, o): return self._compare(o, lambda a, b: a <= b, "<=")
    def __gt__(self, o): return self._compare(o, lambda a, b: a > b, ">")
    def __ge__(self, o): return self._compare(o, lambda a, b: a >= b, ">=")

    def __divmod__(self, o): return divmod(self._leave("given to divmod()"), _plain(o))
    def __rdivmod__(self, o): return divmod(_plain(o), self._leave("given to divmod()"))

    def __getattr__(self, name: str):
        if name.startswith("__"):  # protocol probes (__array_interface__, ...) find nothing
            raise AttributeError(name)
        return getattr(self._leave(f"read for its attribute .{name}"), name)

    def clip(self, a_min=None, a_max=None, out=None, **kwargs):
        """np.clip(t, lo, hi) calls this method: traced as np.clip of the numbers."""
        if out is not None or kwargs:
            return np.clip(self._leave("clipped into an array (out=)"), _plain(a_min), _plain(a_max), out=out,
                           **kwargs)
        trace = self.trace
        bounds = [a_min, a_max]
        if not all(b is None or type(b) is Traced or isinstance(b, (bool, np.bool_) + NUMBER_TYPES) for b in bounds):
            return np.clip(self._leave("clipped to bounds that are not numbers"), _plain(a_min), _plain(a_max))
        names = [x.name if type(x) is Traced else trace.constant(x) for x in bounds]
        roots = self.roots.union(*(b.roots for b in bounds if type(b) is Traced))
        value = np.clip(self.value, _plain(a_min), _plain(a_max))
        return trace.line(f"{trace.constant(np.clip)}({self.name}, {names[0]}, {names[1]})", value, roots)


def _plain(x):
    return x.value if type(x) is Traced else x


def plain(value):
    """`value` with Traced numbers (also inside a tuple, list or dict) replaced by their numbers."""
    if type(value) is Traced:
        return value.value
    if type(value) in (tuple, list) and any(type(v) is Traced for v in value):
        return type(value)(plain(v) for v in value)
    if type(value) is dict and any(type(v) is Traced for v in value.values()):
        return {k: plain(v) for k, v in value.items()}
    return value


class Trace:
    """One traced run of a step body: the code computing each traced value from the arguments,
    the first use that left the trace (`escaped`), and what the run read besides its arguments."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, tuple[str, ...]]] = []  # (name, expression, names it reads)
        self.constants: dict[str, object] = {"_math": math}
        self.escaped: str | None = None  # why the step cannot replay without its body (with the line)
        self.escaped_roots: frozenset = frozenset()  # the arguments the escaped value came from
        self.open = True  # False once the run is over: later uses of a leaked value change nothing
        self._watched: list[tuple[Callable[[], object], object]] = []
        self.value_of: dict[str, object] = {}  # name -> its value in this run
        self.sites: list[tuple[int, int, str]] = []  # (call, argument, name) of each traced kernel parameter
        self.known: set[int] = set()  # ids of the arrays a kernel may be given (the arguments', the globals')

    def argument(self, value, where: str, label: str) -> Traced:
        """The Traced of a number argument, read as `where` (`args[0]`, `kwargs['dt']`)."""
        name = f"_a{len(self.lines)}"
        self.lines.append((name, where, ()))
        self.value_of[name] = value
        return Traced(value, name, self, frozenset((label,)))

    def constant(self, value) -> str:
        name = f"_c{len(self.constants)}"
        self.constants[name] = value
        return name

    def line(self, expression: str, value, roots: frozenset) -> Traced:
        name = f"_t{len(self.lines)}"
        self.lines.append((name, expression, tuple(_TRACED_NAME.findall(expression))))
        self.value_of[name] = value
        return Traced(value, name, self, roots)

    def escape(self, value: Traced, what: str) -> None:
        if not self.open or self.escaped is not None:
            return
        self.escaped_roots = value.roots
        names = ", ".join(f"'{r}'" for r in sorted(value.roots))
        arguments = "argument" if len(value.roots) == 1 else "arguments"
        self.escaped = (f"{_user_line()}: the number from {arguments} {names} is {what}; a replay does not run the "
                        f"body, so the step runs its body on every call. If that argument selects the step's "
                        f"structure, declare it static (@qgraph.graph(static=({names},))); else compute with "
                        f"it inside a kernel")

    def leave(self, what: str) -> None:
        """Something the body did cannot be replayed without it (`what` says what, with the fix)."""
        if self.open and self.escaped is None:
            self.escaped = f"{_user_line()}: {what}"

    def watch(self, read: Callable[[], object], value) -> None:
        """A replay needs `read()` to still be `value` (a global the body read, a module array)."""
        self._watched.append((read, value))

    def unchanged(self) -> bool:
        """Whether everything the run read besides its arguments is still the same object."""
        return all(read() is value for read, value in self._watched)

    def evaluator(self, results: list[str], label: str) -> Callable:
        """values(args, kwargs) -> the tuple of the named traced values for new arguments: the
        lines they need, in order, as one generated function."""
        reads = {name: deps for name, _, deps in self.lines}
        needed, pending = set(), list(results)
        while pending:
            name = pending.pop()
            if name not in needed:
                needed.add(name)
                pending += reads.get(name, ())
        lines = generated.Lines()
        for name, expression, _ in self.lines:
            if name in needed:
                lines.line(f"{name} = {expression}")
        lines.line(f"return ({', '.join(results)}{',' if len(results) == 1 else ''})")
        source = lines.function(f"values(args, kwargs, {', '.join(f'{c}={c}' for c in self.constants)})")
        return generated.function(source, "values", f"traced numbers of step {label}", dict(self.constants))


def _user_line() -> str:
    """`line N of file (`source`)` of the innermost frame outside qgraph and installed libraries."""
    import linecache

    frame = sys._getframe(2)
    fallback = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_QGRAPH_DIR):
            fallback = fallback or frame
            if "site-packages" not in filename and "dist-packages" not in filename and not filename.startswith("<"):
                break
        frame = frame.f_back
    frame = frame or fallback
    if frame is None:
        return "the step's body"
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    where = f"line {frame.f_lineno} of {os.path.basename(frame.f_code.co_filename)}"
    return f"{where} (`{text}`)" if text else where


# ----------------------------------------------------------------- what a traced run records of a kernel call

def tracing_take(trace: Trace, inner: Callable[[StepBody, BoundCall], bool]) -> Callable:
    """A step body's `take` for a traced run: each call's traced numbers replaced by their values
    (what `inner` records or runs), with what a replay could not repeat noted in the trace."""

    def take(body: StepBody, call: BoundCall) -> bool:
        sites = [a if type(a) is Traced else None for a in call.args]
        launcher = call.launcher
        name = launcher.src.name
        for p, a in zip(launcher.src.params, call.args):
            if p.source is not None:  # a module-level array the kernel reads: the same one at a replay
                if "rng" in p.source:
                    trace.leave(f"kernel {name} draws random numbers: each call takes a new position in the "
                                "random stream, so the step runs its body on every call")
                else:
                    trace.watch(lambda src=launcher.src, n=p.name: _resolve_name(src, n), a)
                    trace.known.add(id(a))
            elif (type(a) is Ndarray or hasattr(type(a), RESOLVED_ATTR["cuda"])) and id(a) not in trace.known:
                trace.leave(f"kernel {name} is given an array (or struct) that is not an argument of the step (made in "
                            "the body, or read through an attribute or a helper's global): a replay would reuse this "
                            "one; pass it as an argument of the step")
            elif not (type(a) is Traced or type(a) is Ndarray or isinstance(a, _PLAIN)
                      or hasattr(type(a), RESOLVED_ATTR["cuda"])):
                trace.leave(f"kernel {name} is given a {type(a).__name__} (another library's array): its memory may "
                            "change between calls, so the step runs its body on every call")
        if any(s is not None for s in sites):
            call = call._replace(args=tuple(plain(a) for a in call.args))
        index = len(body.calls)
        taken = inner(body, call)
        trace.sites += [(index, k, a.name) for k, a in enumerate(sites) if a is not None]
        return taken

    return take


def run_now(body: StepBody, call: BoundCall) -> bool:
    """The CPU's `take` for a traced run: the call (its numbers plain) runs now and is kept."""
    body.calls.append(call)
    call.launcher.run_bound(call)
    return True


def _resolve_name(src, name: str):
    import ast

    return src.resolve(ast.Name(name, ast.Load()))
