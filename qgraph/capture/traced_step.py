"""A `@qgraph.graph` step traced once and replayed with new numbers, without running its body.

`StepTracer` (one per step function) keys a call by what selects the step's structure: the
identity of its array (and struct) arguments, the values of its static arguments (`static=`,
and bools, strings, None), the types of its number arguments. The first call of a key runs the
body with the numbers traced (capture.tracing): each kernel call is recorded with the
expressions of its traced parameters (`sites`). A later call of that key evaluates them for
the new numbers (one generated function) and
- on CUDA sets the changed numbers in the step graph's nodes, each by its parameter bytes
  (`BuiltStep.number_setter`; a number that shapes more than bytes, a loop bound, updates its
  call's nodes in full), then launches the graph;
- on the CPU calls the recorded kernels with the new numbers.
A body that used a number in a way a replay cannot repeat (capture.tracing: a comparison, a
conversion, text) falls back to running its body on every call of that key; `StepStats`
says why and where.
"""

from __future__ import annotations

import math
import types
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from ..args.kinds import arg_type
from ..args.structs import RESOLVED_ATTR, STRUCT_EPOCH
from ..runtime.arrays import Ndarray
from ..runtime.call_hooks import BoundCall
from .splices import splicer
from .tracing import NUMBER_TYPES, Trace, Traced

_KEYED = (bool, np.bool_, str, type(None), bytes)  # arguments keyed by value (they select structure)
NEW_TRACES_IN_A_ROW = 8  # traces evicting others without a replay between them: the arrays change every call


def _same_number(a, b) -> bool:
    """Equal numbers of one type, zeros of one sign (a kernel sees -0.0 and 0.0 apart)."""
    return a is b or (type(a) is type(b) and a == b and (a != 0 or math.copysign(1, a) == math.copysign(1, b)))


HELPER_DEPTH = 3  # levels of plain Python helpers whose globals a trace watches (the step function is the first)


def _watch_reads(trace: Trace, fn, known: set, seen: set, depth: int) -> None:
    """Watch the globals and closure cells `fn` names (and, `depth` levels down, those of the plain Python
    functions among them: the helpers the body calls); the arrays among them may be given to kernels."""
    if depth <= 0 or id(fn) in seen:
        return
    seen.add(id(fn))
    found = []
    g = fn.__globals__
    for name in _code_names(fn.__code__):
        if name in g:
            value = g[name]
            trace.watch(lambda g=g, name=name: g.get(name), value)
            found.append(value)
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not yet filled
            continue
        trace.watch(lambda cell=cell: cell.cell_contents, value)
        found.append(value)
    for value in found:
        if type(value) is Ndarray:
            known.add(id(value))
        elif type(value) is types.FunctionType:
            _watch_reads(trace, value, known, seen, depth - 1)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


class TracedStep:
    """One traced run's recorded kernel calls and how to replay them for new numbers."""

    def __init__(self, trace: Trace, calls: list, sites: list, result, arrays: list, epoch: int | None,
                 label: str) -> None:
        self.trace = trace
        self.label = label
        self.calls = calls  # BoundCalls with the traced run's numbers (HostCalls too)
        self.arrays = arrays  # the arguments' arrays: keys hold their ids, so they are kept alive
        self.epoch = epoch  # STRUCT_EPOCH when structs were passed (a field set since: trace again)
        self._result = result
        names = sorted({name for _, _, name in sites} | set(_traced_names(result)),
                       key=lambda n: int(n[2:]))
        self.names = names
        self._index = {name: i for i, name in enumerate(names)}
        self.sites = [(j, k, self._index[name]) for j, k, name in sites]  # (call, argument, value index)
        self.values = trace.evaluator(names, label) if names else (lambda args, kwargs: ())
        self.held = [trace.value_of[name] for name in names]  # the values the graph (or the calls) hold now
        self.types = tuple(type(v) for v in self.held)  # a replay's values must have these types
        self.runner = None  # CUDA: the StepRunner that launches it
        self.kernel_calls = sum(c.launcher is not None for c in calls)
        self.host_calls = len(calls) - self.kernel_calls  # qgraph.host_call nodes a launch queues calls on
        self.in_memory = False  # CUDA: its numbers read from a parameter block (capture/number_block.py)
        self._memory: dict = {}  # (value index, key text) -> (pack, loader, offset) of the block's slots
        self.memory_error: str | None = None  # why the block could not be used (the numbers stay by value)
        self.built = None  # CUDA: the BuiltStep, its setters per value, and the version it was last left at
        self.version = -1
        self._full: list[set[int]] = []  # per value, the calls it sets in full

    def fresh(self) -> bool:
        return self.trace.unchanged() and (self.epoch is None or self.epoch == STRUCT_EPOCH[0])

    def result(self, values: tuple):
        r = self._result
        if type(r) is Traced:
            return values[self._index[r.name]]
        if type(r) in (tuple, list) and any(type(v) is Traced for v in r):
            return type(r)(values[self._index[v.name]] if type(v) is Traced else v for v in r)
        if type(r) is dict and any(type(v) is Traced for v in r.values()):
            return {k: values[self._index[v.name]] if type(v) is Traced else v for k, v in r.items()}
        return r

    def call_with(self, j: int, values: tuple) -> BoundCall:
        """Call j with the values `values` give its traced parameters (packs too, on CUDA)."""
        call = self.calls[j]
        args, packs = list(call.args), None if call.packs is None else list(call.packs)
        for jj, k, i in self.sites:
            if jj == j:
                args[k] = values[i]
                if packs is not None:
                    packs[k] = arg_type(call.key[k]).pack(values[i])
        return call._replace(args=tuple(args), packs=None if packs is None else tuple(packs))

    # ---------------------------------------------------------------- CUDA
    def prepare(self, runner, stream: int, flag, values: tuple) -> None:
        """Before the first replay: the numbers that changed since the trace and that the kernels read only
        inside their tasks move into a parameter block (one loader node sets them all), in a graph of this
        step's own, where at least MIN_READERS calls read them; compiles the kernels' variants reading them.
        On any failure the numbers stay by value."""
        from . import number_block

        self.in_memory = True
        eligible = [n for n, (j, k, i) in enumerate(self.sites)
                    if not _same_number(values[i], self.held[i])
                    and number_block.read_in_tasks(self.calls[j].launcher.src, k)]
        if len({self.sites[n][0] for n in eligible}) < number_block.MIN_READERS:
            return
        try:
            calls, block, memory = number_block.memory_form(runner.target, self.calls,
                                                            [self.sites[n] for n in eligible], self.held)
            built = runner.build_with_block(calls, block, stream, flag, self)
        except Exception as e:  # a variant that does not compile: by value, as before (said in memory_error)
            self.memory_error = f"{type(e).__name__}: {e}"
            return
        self.calls, self._memory = calls, memory
        self.sites = [site for n, site in enumerate(self.sites) if n not in eligible]
        self.attach(built)

    def attach(self, built) -> None:
        """After the first launch: the graph it ran, and the generated function setting each traced
        value where it lies in the graph's nodes (`_splice`)."""
        self.built, self.version = built, built.version
        self.flag_address = getattr(built, "flag_address", None)
        groups: dict[tuple, list] = {}  # (value index, the parameter's kind) -> [(call, places)]
        self._full = [set() for _ in self.names]
        for j, k, i in self.sites:
            value = self.held[i]
            if isinstance(value, (bool, np.bool_)):
                other = not value
            else:
                other = value + 1 if value + 1 != value else value * 2 + 1
            places = built.number_places(j, self.calls[j], k, other)
            if places is None:
                self._full[i].add(j)
            else:
                groups.setdefault((i, self.calls[j].key[k]), []).append((j, places))
        self._splice = splicer(groups, built, self.label, self._memory)

    def set_numbers(self, values: tuple) -> None:
        """Under the device lock: the graph's nodes set for `values` (only those that changed)."""
        built = self.built
        try:
            if built.version != self.version:  # another call set the graph since: every call set in full
                built.update([self.call_with(j, values) if c.launcher is not None else c
                              for j, c in enumerate(self.calls)])
                if self.flag_address is not None:
                    built.set_flag(self.flag_address)
                self._splice(values, True)  # (what it holds now: its packs of these values)
            else:
                changed = self._splice(values, False)
                held, full = self.held, set()
                for i, v in enumerate(values):
                    if self._full[i] and not _same_number(v, held[i]):
                        full |= self._full[i]
                for j in sorted(full):
                    built.update_call(j, self.call_with(j, values))
                if changed or full:
                    built.version += 1
        except BaseException:
            built.version += 1  # set in part: the next replay sets every call in full
            raise
        self.held = list(values)
        self.version = built.version

    # ---------------------------------------------------------------- CPU
    def run_cpu(self, values: tuple) -> None:
        for j, call in enumerate(self.calls):
            if call.launcher is None:  # a qgraph.host_call, in order with the kernels
                call.fn(*call.args)
                continue
            call = self.call_with(j, values) if any(jj == j for jj, _, _ in self.sites) else call
            call.launcher.launch(*call.args, None)


def _traced_names(result) -> list[str]:
    if type(result) is Traced:
        return [result.name]
    if type(result) in (tuple, list):
        return [v.name for v in result if type(v) is Traced]
    if type(result) is dict:
        return [v.name for v in result.values() if type(v) is Traced]
    return []


class StepTracer:
    """The traced steps of one step function, by key, and the reason it last fell back."""

    def __init__(self, fn: Callable, param_names: list[str], static: frozenset, capacity: int) -> None:
        self._fn = fn
        self._names = param_names
        self._static = set(static)  # with the integer arguments found selecting structure (auto_static)
        self.auto_static: set[str] = set()
        self._capacity = capacity
        self._steps: OrderedDict = OrderedDict()  # key -> TracedStep
        self._untraceable: OrderedDict = OrderedDict()  # key -> why its body runs every call
        self._new_in_a_row = 0
        self.disabled: str | None = None  # why this step traces no more

    def key(self, args: tuple, kwargs: dict):
        """(key, None) for a call that can be traced, or (None, why not)."""
        parts = []
        for k, a in enumerate(args):
            part = self._part(a, self._names[k] if k < len(self._names) else f"#{k}")
            if type(part) is str:
                return None, part
            parts.append(part)
        for name, a in kwargs.items():
            part = self._part(a, name)
            if type(part) is str:
                return None, part
            parts.append((name, part))
        return (len(args), *parts), None

    def _part(self, a, name: str):
        t = type(a)
        if name in self._static:
            try:
                hash(a)
            except TypeError:
                return (f"the static argument '{name}' is a {t.__name__}, which cannot key the step's graphs (it is "
                        "not hashable); pass a hashable value (a tuple, a number, a string)")
            return ("=", t, a)
        if t is Ndarray or hasattr(t, RESOLVED_ATTR["cuda"]):
            return ("@", id(a))
        if t in _KEYED:
            return ("=", t, a)
        if isinstance(a, NUMBER_TYPES) and t is not Traced:
            return ("#", t)
        if t is tuple:
            try:
                hash(a)
                return ("=", t, a)
            except TypeError:
                pass
        return (f"argument '{name}' is a {t.__name__}: a traced step takes qgraph arrays, structs, numbers and "
                "static values (strings, None, tuples of numbers); pass such arguments, or read the others inside "
                "the body (which then runs on every call)")

    def find(self, key) -> TracedStep | None:
        step = self._steps.get(key)
        if step is not None:
            if step.fresh():
                self._steps.move_to_end(key)
                self._new_in_a_row = 0
                return step
            del self._steps[key]
        return None

    last_note = None  # why the last finished trace was not kept, where it was no fallback

    def drop(self, key) -> None:
        self._steps.pop(key, None)

    def untraceable(self, key) -> str | None:
        return self._untraceable.get(key)

    def start(self, args: tuple, kwargs: dict) -> tuple[Trace, tuple, dict]:
        """A trace of a run with these arguments: the arguments with their numbers traced, and
        the globals and closure cells the body reads watched."""
        trace = Trace()
        fn = self._fn
        known = {id(a) for a in list(args) + list(kwargs.values())
                 if type(a) is Ndarray or hasattr(type(a), RESOLVED_ATTR["cuda"])}
        _watch_reads(trace, fn, known, set(), HELPER_DEPTH)
        trace.known = known

        def traced(a, where: str, name: str):
            if name in self._static or type(a) not in NUMBER_TYPES and not isinstance(a, (np.integer, np.floating)):
                return a
            return trace.argument(a, where, name)

        new_args = tuple(traced(a, f"args[{k}]", self._names[k] if k < len(self._names) else f"#{k}")
                         for k, a in enumerate(args))
        new_kwargs = {name: traced(a, f"kwargs[{name!r}]", name) for name, a in kwargs.items()}
        return trace, new_args, new_kwargs

    def finish(self, key, trace: Trace, calls: list, result, args: tuple, kwargs: dict,
               label: str) -> TracedStep | None:
        """The traced step of a finished run, kept under `key`; None where it fell back (the reason kept)."""
        trace.open = False
        ints = {name for name, a in list(zip(self._names, args)) + list(kwargs.items())
                if isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))}
        if trace.escaped is not None and trace.escaped_roots and trace.escaped_roots <= ints:
            # an integer argument deciding structure (a count in range()): static from now on, keyed by value
            self.auto_static |= trace.escaped_roots
            self._static |= trace.escaped_roots
            names = ", ".join(f"'{n}'" for n in sorted(trace.escaped_roots))
            self.last_note = (f"{trace.escaped.split(': the number')[0]}: the integer argument {names} selects the "
                              "step's structure, so it keys the step's traces by value from the next call on")
            return None
        if trace.escaped is None and type(result) not in (tuple, list, dict, type(None), Traced) \
                and any(type(v) is Traced for v in getattr(result, "__dict__", {}).values()):
            trace.escaped = "the step returns an object holding a traced number: return the number itself"
        if trace.escaped is not None:
            self._untraceable[key] = trace.escaped
            while len(self._untraceable) > 4 * self._capacity:
                self._untraceable.popitem(last=False)
            return None
        arrays = [a for a in list(args) + list(kwargs.values()) if type(a) is Ndarray]
        structs = any(hasattr(type(a), RESOLVED_ATTR["cuda"]) for a in list(args) + list(kwargs.values()))
        step = TracedStep(trace, calls, trace.sites, result, arrays, STRUCT_EPOCH[0] if structs else None, label)
        self._steps[key] = step
        evicted = len(self._steps) > self._capacity
        while len(self._steps) > self._capacity:
            self._steps.popitem(last=False)
        self._new_in_a_row = self._new_in_a_row + 1 if evicted else 0  # new structures filling the cache are fine
        if self._new_in_a_row >= NEW_TRACES_IN_A_ROW:
            self.disabled = (f"{NEW_TRACES_IN_A_ROW} calls in a row each needed a new trace: the step's arrays (or "
                             "static arguments) change on every call, so it runs its body instead; pass the same "
                             "arrays each call (swap them inside a kernel or by argument order between two traces)")
            self._steps.clear()
        return step

    def clear(self) -> None:
        self._steps.clear()
        self._untraceable.clear()
        self._new_in_a_row = 0
        self.disabled = None
