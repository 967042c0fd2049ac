"""@qgraph.graph: a Python function that calls kernels, run as one CUDA graph per step.

The first call of a structure runs the body with its number arguments traced
(capture/tracing.py, capture/traced_step.py): its kernel calls are recorded instead of launched,
with the expressions of their traced numbers, and replayed as one graph holding every task of
every call (capture/step_capture.py). A later call with new numbers evaluates those expressions
and replays without running the body. A body that decides something in Python from a number
(or a tape recording) runs on every call instead. On the CPU the traced calls are made again
directly with the new numbers; a body that is not traced runs, its kernel calls counted
(runtime/call_hooks.py).
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from .. import runtime
from ..errors import DeviceLoopRefused, FallbackWarning, QgraphError
from ..lang import roles
from ..lang.options import USE_ENVIRONMENT, KernelOptions, ResolvedOptions
from ..lang.roles import role_of
from ..runtime import DeviceState
from ..tracebacks import user_error


@dataclass(slots=True)  # the fast paths count replays: a slot is the cheapest attribute to bump
class StepStats:
    """What a @qgraph.graph function did: graphs built and replayed, and its last call's shape."""

    builds: int = 0  # step graphs built, total
    replays: int = 0  # step graph launches, total
    cache_size: int = 0  # step graphs cached now
    node_updates: int = 0  # in-place kernel-node parameter updates, total
    graph_nodes: int = 0  # kernel nodes in the last call's graph
    kernel_calls: int = 0  # kernel calls in the last call
    waits: tuple = ()  # of the last graph built: for each kernel call, the earlier calls it waits for
    traced: bool = False  # the last call replayed (or recorded) a trace: its body does not run for new numbers
    fallback_reason: str | None = None  # why the last call ran its body (None when traced)
    traces: int = 0  # traced runs of the body, total
    host_loop: str | None = None  # why a graph_while step loops on the host (None: in a WHILE node)


class GraphFunction:
    """A function whose kernel calls run as one CUDA graph; call it like the function."""

    _drops_first = True  # runtime reset: its graphs hold nodes of the kernels' modules

    def __init__(self, fn: Callable, graph_cache_size: int | None, graph_while: str | None = None,
                 max_iterations=USE_ENVIRONMENT, static: tuple = (), trace: bool = True) -> None:
        self._fn = fn
        self.graph_while = graph_while
        names = list(inspect.signature(fn).parameters)
        unknown = [name for name in static if name not in names]
        if unknown:
            raise TypeError(f"static={tuple(static)!r}: {', '.join(map(repr, unknown))} names no parameter of "
                            f"{fn.__name__}({', '.join(names)})")
        self.static = tuple(static)
        self.trace = trace
        self._tracer = None  # a StepTracer per runtime generation (made at the first call)
        self._names = names
        # the step's options as a kernel's (one resolution from the environment, lang.options): its graphs
        # kept per device and its loop's runaway guard
        self.options = KernelOptions(graph_cache_size=USE_ENVIRONMENT if graph_cache_size is None else graph_cache_size,
                                     max_iterations=max_iterations)
        self._options_now = ResolvedOptions(self.options)
        self._flag_at = None
        if graph_while is not None:  # where the flag is among the arguments
            if graph_while not in names:
                raise TypeError(f"graph_while={graph_while!r} names no parameter of {fn.__name__}({', '.join(names)})")
            self._flag_at = names.index(graph_while)
        self.stats = StepStats()
        self._runners: dict[str, object] = {}  # per device ("cuda:0", ...)
        self._last = None  # the runner of the last call: its replay of the same arguments comes first
        self._host_step = None  # graph_while on the host: the step without its loop, launched once a pass
        functools.update_wrapper(self, fn)
        runtime.STATE.kernels.add(self)

    # the decorator's settings (None / USE_ENVIRONMENT where the environment decides), as Kernel has them
    graph_cache_size = property(lambda self: None if self.options.graph_cache_size is USE_ENVIRONMENT
                                else self.options.graph_cache_size)
    max_iterations = property(lambda self: self.options.max_iterations)

    def options_now(self, state) -> KernelOptions:
        """The options with the environment's defaults filled in: resolved once per runtime generation."""
        return self._options_now(state)

    def __call__(self, *args, stream=None, **kwargs):
        from ..runtime import call_hooks

        try:  # an error qgraph raises for the user's mistake leaves with qgraph's frames removed (tracebacks.py)
            state = runtime.ensure_init()
            target = state.current()
            if call_hooks.current_body() is not None:
                return self._fn(*args, **kwargs)  # a step called by a step: its calls join the outer one
            cuda = isinstance(target, DeviceState)
            taped = call_hooks.tape_recording()  # a tape must see the body's calls: no replay, no trace
            if cuda and self.graph_while is not None and (taped or self._host_step is not None):
                return self._loop_on_host(args, kwargs, stream, state, taped)
            if cuda:
                runner = self._last or self._runner(target, state)
                if stream is not None:
                    from ..driver.device import stream_handle

                    stream = stream_handle(stream)
                handle = runner.own_stream if stream is None else stream
                if not taped:
                    replayed, result = runner.replay_same(args, kwargs, handle)
                    if replayed:
                        if call_hooks.WATCHING[0]:  # a tape may need what the replay overwrote: counted
                            runner.note_writes()
                        return result
            if not taped and self.trace:
                done, result = self._traced(args, kwargs, stream, state, target)
                if done:
                    return result
            if not cuda:
                return self._cpu_run(args, kwargs, self.options_now(state))
            from .step_capture import recorded

            calls, result = call_hooks.run_body(self._fn, args, kwargs, recorded)
            self._launch(calls, args, kwargs, result, stream, state, target)
            return result
        except DeviceLoopRefused as e:  # nothing was launched: the loop moves to the host for good
            self._tracer, self.stats.host_loop = None, f"{e}"
            self._host_step = GraphFunction(self._fn, self.graph_cache_size, None, self.max_iterations, self.static,
                                            self.trace)
            self._host_step.stats = self.stats
            warnings.warn(f"step {self.__name__}: graph_while runs as a host loop, the flag read after every pass, "
                          f"because {e}", FallbackWarning, stacklevel=2)
            return self._loop_on_host(args, kwargs, stream, state, False)
        except Exception as e:
            user_error(e)
            raise
        finally:
            # a tool may keep this frame after it returns (compute-sanitizer keeps the caller frames
            # of each CUDA launch, with their locals): it then keeps none of the call's arguments
            args = kwargs = calls = None

    def _launch(self, calls: list, args: tuple, kwargs: dict, result, stream, state, target, remember: bool = True):
        """Launch a body run's recorded calls as the step's graph on their device; its runner, or None.
        `remember`: the same arguments next time replay it at once (not for a traced step: its replays
        check what the body read first)."""
        if not calls:  # nothing to launch
            self.stats.kernel_calls = self.stats.graph_nodes = 0
            return None
        # the graph lives on the device its kernels ran on (their arrays' device)
        targets = {call.launcher.target for call in calls if call.launcher is not None} or {target}
        if len(targets) > 1:
            where = ", ".join(sorted(t.key for t in targets))
            raise QgraphError(f"step {self.__name__}: its kernel calls ran on different devices ({where}); a "
                              "step's graph lives on one device: give all its calls arrays of one device")
        runner = self._runner(targets.pop(), state)
        handle = runner.own_stream if stream is None else stream
        runner.run(calls, handle, self._flag(args, kwargs))
        if remember:
            runner.remember(args, kwargs, handle, result)
        else:
            runner.forget()
        self._last = runner
        return runner

    def _traced(self, args: tuple, kwargs: dict, stream, state, target) -> tuple[bool, object]:
        """A call through the step's traces (capture.traced_step): (True, result) when it replayed a trace
        or made one, (False, None) when the body must run as written (the reason in stats)."""
        from .traced_step import StepTracer

        tracer = self._tracer
        if tracer is None:
            tracer = self._tracer = StepTracer(self._fn, self._names, frozenset(self.static),
                                               self.options_now(state).graph_cache_size)
        stats = self.stats
        if tracer.disabled is not None:
            stats.traced, stats.fallback_reason = False, tracer.disabled
            return False, None
        key, why = tracer.key(args, kwargs)
        if key is None:
            stats.traced, stats.fallback_reason = False, why
            return False, None
        step = tracer.find(key)
        if step is not None:
            replayed = None
            try:
                values = step.values(args, kwargs)
                if tuple(map(type, values)) == step.types:
                    replayed = self._replay(step, args, kwargs, values, stream, state, target)
            except Exception:  # a value the kernels cannot take (too large, a division by zero):
                replayed = None  # the body runs, and raises what it raises for it
            if replayed:
                stats.traced, stats.fallback_reason = True, None
                return True, step.result(values)
            if replayed is None:
                stats.traced, stats.fallback_reason = False, "this call's numbers do not fit what the trace recorded"
                return False, None
            tracer.drop(key)  # its graph was evicted from the step's cache: traced again below
        why = tracer.untraceable(key)
        if why is not None:
            stats.traced, stats.fallback_reason = False, why
            return False, None
        return True, self._trace(tracer, key, args, kwargs, stream, state, target)

    def _replay(self, step, args, kwargs, values: tuple, stream, state, target) -> bool:
        """Run a traced step for new numbers: its graph on CUDA, its kernel calls on the CPU."""
        if not isinstance(target, DeviceState):
            if self.graph_while is None:
                step.run_cpu(values)
                self.stats.kernel_calls = sum(c.launcher is not None for c in step.calls)
            else:
                self._passes(args, kwargs, self.options_now(state), lambda: (step.calls, step.run_cpu(values)))
            return True
        runner = step.runner
        if runner is None:  # the body made no kernel call
            self.stats.kernel_calls = self.stats.graph_nodes = 0
            return True
        handle = runner.own_stream if stream is None else stream
        if not step.in_memory and values != tuple(step.held):  # the first replay with new numbers: those
            step.prepare(runner, handle, self._flag(args, kwargs), values)  # numbers move into a parameter block
        done = runner.replay_traced(step, values, handle)
        if done:
            self._last = runner
        return done

    def _trace(self, tracer, key, args: tuple, kwargs: dict, stream, state, target):
        """The first call of a structure: the body run with its numbers traced, its calls launched."""
        from ..runtime import call_hooks
        from .tracing import plain, run_now, tracing_take

        cuda = isinstance(target, DeviceState)
        if cuda:
            from .step_capture import recorded
        trace, traced_args, traced_kwargs = tracer.start(args, kwargs)
        try:
            calls, result = call_hooks.run_body(self._fn, traced_args, traced_kwargs,
                                                tracing_take(trace, recorded if cuda else run_now), trace)
        finally:
            trace.open = False
        step = tracer.finish(key, trace, calls, result, args, kwargs, self.__name__)
        self.stats.traces += 1
        self.stats.traced = step is not None
        self.stats.fallback_reason = None if step is not None else (tracer.untraceable(key) or tracer.last_note)
        result = plain(result)
        if cuda:
            runner = self._launch(calls, args, kwargs, result, stream, state, target, remember=step is None)
            if step is not None:
                if runner is None:  # no kernel call: nothing to replay but the result
                    step.runner = None
                else:
                    step.runner = runner
                    step.attach(runner.current())
        else:
            self.stats.kernel_calls = sum(c.launcher is not None for c in calls)
            if self.graph_while is not None:  # the CPU's loop: the traced run was its first pass
                again = (lambda: (step.calls, step.run_cpu(step.held))) if step is not None else \
                    (lambda: call_hooks.run_body(self._fn, args, kwargs))
                result = self._passes(args, kwargs, self.options_now(state), again, first=(calls, result))
        return result

    def _runner(self, target: DeviceState, state):
        """The step runner of one device (its graphs and their cache), made on first use."""
        from . import step_capture

        runner = self._runners.get(target.key)
        if runner is None:
            options = self.options_now(state)
            loop = None
            if self.graph_while is not None:
                loop = (self.graph_while, options.max_iterations, self._fn.__code__.co_firstlineno)
            runner = self._runners[target.key] = step_capture.StepRunner(target, self.__name__, self.stats,
                                                                         options.graph_cache_size, loop)
        return runner

    def _flag(self, args: tuple, kwargs: dict):
        if self._flag_at is None:
            return None
        return args[self._flag_at] if self._flag_at < len(args) else kwargs.get(self.graph_while)

    def _cpu_run(self, args: tuple, kwargs: dict, options: KernelOptions):
        """The CPU: the body runs as written, its kernel calls counted (stats.kernel_calls, as on
        CUDA); with graph_while, until the flag reads 0 (do-while), with the guard."""
        from ..runtime import call_hooks

        if self.graph_while is None:
            calls, result = call_hooks.run_body(self._fn, args, kwargs)
            self.stats.kernel_calls = len(calls)
            return result
        return self._passes(args, kwargs, options, lambda: call_hooks.run_body(self._fn, args, kwargs))

    def _loop_on_host(self, args: tuple, kwargs: dict, stream, state, taped: bool):
        """graph_while on CUDA run by the host: under a tape every pass's calls launched as made (the
        tape records them), else each pass one launch of the step's graph without its loop."""
        step = (lambda: self._fn(*args, **kwargs)) if taped else (lambda: self._host_step(*args, stream=stream,
                                                                                         **kwargs))
        return self._passes(args, kwargs, self.options_now(state), lambda: (None, step()))

    def _passes(self, args: tuple, kwargs: dict, options: KernelOptions, body: Callable, first=None):
        """graph_while run by Python: `body()` (its calls or None, its result) until the flag reads
        0 (do-while), with the guard; `first`: the first pass's (calls, result), already run."""
        import numpy as np

        flag = self._flag(args, kwargs)
        limit = options.max_iterations
        passes = 0
        while True:
            calls, result = body() if first is None else first
            first = None
            if calls is not None:
                self.stats.kernel_calls = len(calls)  # of one pass, as the body of a CUDA step's loop
            passes += 1
            if np.asarray(flag).reshape(-1)[0] == 0:
                return result
            if limit is not None and passes >= limit:
                raise QgraphError(f"step {self.__name__}: its loop ran {limit:,} passes with the flag "
                                  f"'{self.graph_while}' still non-zero and was stopped by the runaway guard "
                                  "(max_iterations); raise it or make a kernel set the flag to 0")

    def release(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()
        self._last = self._host_step = None
        self._tracer = None  # its traces hold the old runtime's arrays and graphs
        self.stats = StepStats()

    def __repr__(self) -> str:
        return f"<qgraph.graph {self.__qualname__}>"


def graph(fn: Callable | None = None, *, graph_cache_size: int | None = None, graph_while: str | None = None,
          max_iterations=USE_ENVIRONMENT, static: tuple[str, ...] | str = (), trace: bool = True):
    """Run a Python function that calls kernels as one CUDA graph per call.

    The first call with a given sequence of kernel signatures builds a graph holding every task
    of every kernel call; later calls replay it, updating in place the nodes of calls whose
    arrays, shapes or numbers changed. The first call with given arrays runs the body with its
    number arguments traced: later calls with new numbers replay without running the body
    (`stats.traced`); a body that decides something in Python from a number runs on every call
    (`stats.fallback_reason` says where). `static` names arguments that select the structure
    (they key the cache by value, and are not traced); `trace=False` runs the body every call.
    Calls whose arrays do not overlap (or only read the
    same arrays) run concurrently. `graph_cache_size` bounds the graphs kept (default
    QGRAPH_GRAPH_CACHE_SIZE). `graph_while="flag"` repeats the whole step on the device while
    the int32 flag argument is non-zero (do-while, as a kernel's graph_while; a kernel called in
    the step must set it), with the runaway guard `max_iterations` (default
    QGRAPH_MAX_ITERATIONS). On the CPU the function runs as written (in a loop on the flag).
    """
    if graph_cache_size is not None and (not isinstance(graph_cache_size, int) or graph_cache_size < 1):
        raise ValueError(f"graph_cache_size must be a positive int, got {graph_cache_size!r}")
    static = (static,) if isinstance(static, str) else tuple(static)
    if not all(isinstance(name, str) for name in static):
        raise TypeError(f"static= takes parameter names (strings), got {static!r}")

    def wrap(f: Callable) -> GraphFunction:
        if role_of(f) == roles.KERNEL:
            raise TypeError(f"{f!r} is a kernel: @qgraph.graph decorates a plain function that calls kernels")
        if not callable(f) or not hasattr(f, "__code__"):
            raise TypeError(f"@qgraph.graph decorates a Python function, got {f!r}")
        return GraphFunction(f, graph_cache_size, graph_while, max_iterations, static, bool(trace))

    return wrap if fn is None else wrap(fn)


_LOOPS: dict = {}  # step function -> its graph_while wrapper (qgraph.while_loop)


def while_loop(flag, step: Callable, *args, **kwargs):
    """Run `step(*args, **kwargs)` (a function calling kernels) again and again on the device
    while the int32 array `flag` is non-zero, as one graph with a WHILE node (do-while: the
    body runs at least once); a kernel called in the step must be passed `flag` and set it.
    On the CPU the same loop runs on the host."""
    fn = getattr(step, "_fn", step)  # a @qgraph.graph function or a plain one
    wrapper = _LOOPS.get(fn)
    if wrapper is None:
        def body(_qg_flag, *inner, **inner_kw):
            return fn(*inner, **inner_kw)

        body.__name__, body.__qualname__ = fn.__name__, fn.__qualname__
        wrapper = _LOOPS[fn] = GraphFunction(body, None, "_qg_flag")
    return wrapper(flag, *args, **kwargs)

