"""@qgraph.graph: a Python function that calls kernels, run as one CUDA graph per step.

The function body runs on every call (so what it computes in Python is never stale), with
its kernel calls recorded instead of launched; the recorded calls are replayed as one graph
holding every task of every call (capture/step_capture.py). On the CPU the function simply
runs, its kernel calls counted (runtime/call_hooks.py).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from .. import runtime
from ..errors import QgraphError
from ..lang.options import USE_ENVIRONMENT, KernelOptions, ResolvedOptions
from ..runtime import DeviceState
from ..tracebacks import user_error


@dataclass
class StepStats:
    """What a @qgraph.graph function did: graphs built and replayed, and its last call's shape."""

    builds: int = 0  # step graphs built, total
    replays: int = 0  # step graph launches, total
    cache_size: int = 0  # step graphs cached now
    node_updates: int = 0  # in-place kernel-node parameter updates, total
    graph_nodes: int = 0  # kernel nodes in the last call's graph
    kernel_calls: int = 0  # kernel calls in the last call
    waits: tuple = ()  # of the last graph built: for each kernel call, the earlier calls it waits for


class GraphFunction:
    """A function whose kernel calls run as one CUDA graph; call it like the function."""

    _drops_first = True  # runtime reset: its graphs hold nodes of the kernels' modules

    def __init__(self, fn: Callable, graph_cache_size: int | None, graph_while: str | None = None,
                 max_iterations=USE_ENVIRONMENT) -> None:
        self._fn = fn
        self.graph_while = graph_while
        # the step's options as a kernel's (one resolution from the environment, lang.options): its graphs
        # kept per device and its loop's runaway guard
        self.options = KernelOptions(graph_cache_size=USE_ENVIRONMENT if graph_cache_size is None else graph_cache_size,
                                     max_iterations=max_iterations)
        self._options_now = ResolvedOptions(self.options)
        self._flag_at = None
        if graph_while is not None:  # where the flag is among the arguments
            names = list(inspect.signature(fn).parameters)
            if graph_while not in names:
                raise TypeError(f"graph_while={graph_while!r} names no parameter of {fn.__name__}({', '.join(names)})")
            self._flag_at = names.index(graph_while)
        self.stats = StepStats()
        self._runners: dict[str, object] = {}  # per device ("cuda:0", ...)
        self._last = None  # the runner of the last call: its replay of the same arguments comes first
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
            if not isinstance(target, DeviceState):
                return self._cpu_run(args, kwargs, self.options_now(state))
            if self.graph_while is not None and call_hooks.tape_recording():
                # under a tape every pass's calls are recorded: the loop runs here, its calls launched as made
                return self._passes(args, kwargs, self.options_now(state),
                                    lambda: (None, self._fn(*args, **kwargs)))
            runner = self._last or self._runner(target, state)
            if stream is not None:
                from ..driver.device import stream_handle

                stream = stream_handle(stream)
            if not (call_hooks.tape_recording()):  # a tape must see the body's calls
                replayed, result = runner.replay_same(args, kwargs, runner.own_stream if stream is None else stream)
                if replayed:
                    if call_hooks.WATCHING[0]:  # a tape may need what the replay overwrote: counted
                        runner.note_writes()
                    return result
            from .step_capture import recorded

            calls, result = call_hooks.run_body(self._fn, args, kwargs, recorded)
            if not calls:  # nothing to launch
                self.stats.kernel_calls = self.stats.graph_nodes = 0
            else:
                # the graph lives on the device its kernels ran on (their arrays' device)
                targets = {call.launcher.target for call in calls if call.launcher is not None} or {target}
                if len(targets) > 1:
                    where = ", ".join(sorted(t.key for t in targets))
                    raise QgraphError(f"step {self.__name__}: its kernel calls ran on different devices ({where}); a "
                                      "step's graph lives on one device: give all its calls arrays of one device")
                runner = self._runner(targets.pop(), state)
                handle = runner.own_stream if stream is None else stream
                runner.run(calls, handle, self._flag(args, kwargs))
                runner.remember(args, kwargs, handle, result)
                self._last = runner
            return result
        except Exception as e:
            user_error(e)
            raise
        finally:
            # a tool may keep this frame after it returns (compute-sanitizer keeps the caller frames
            # of each CUDA launch, with their locals): it then keeps none of the call's arguments
            args = kwargs = calls = None

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

    def _passes(self, args: tuple, kwargs: dict, options: KernelOptions, body: Callable):
        """graph_while run by Python: `body()` (its calls or None, its result) until the flag reads
        0 (do-while), with the guard."""
        import numpy as np

        flag = self._flag(args, kwargs)
        limit = options.max_iterations
        passes = 0
        while True:
            calls, result = body()
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
        self._last = None
        self.stats = StepStats()

    def __repr__(self) -> str:
        return f"<qgraph.graph {self.__qualname__}>"


def graph(fn: Callable | None = None, *, graph_cache_size: int | None = None, graph_while: str | None = None,
          max_iterations=USE_ENVIRONMENT):
    """Run a Python function that calls kernels as one CUDA graph per call.

    The first call with a given sequence of kernel signatures builds a graph holding every task
    of every kernel call; later calls replay it, updating in place the nodes of calls whose
    arrays, shapes or numbers changed. Calls whose arrays do not overlap (or only read the
    same arrays) run concurrently. `graph_cache_size` bounds the graphs kept (default
    QGRAPH_GRAPH_CACHE_SIZE). `graph_while="flag"` repeats the whole step on the device while
    the int32 flag argument is non-zero (do-while, as a kernel's graph_while; a kernel called in
    the step must set it), with the runaway guard `max_iterations` (default
    QGRAPH_MAX_ITERATIONS). On the CPU the function runs as written (in a loop on the flag).
    """
    if graph_cache_size is not None and (not isinstance(graph_cache_size, int) or graph_cache_size < 1):
        raise ValueError(f"graph_cache_size must be a positive int, got {graph_cache_size!r}")

    def wrap(f: Callable) -> GraphFunction:
        if getattr(f, "_qgraph_kind", None) == "kernel":
            raise TypeError(f"{f!r} is a kernel: @qgraph.graph decorates a plain function that calls kernels")
        if not callable(f) or not hasattr(f, "__code__"):
            raise TypeError(f"@qgraph.graph decorates a Python function, got {f!r}")
        return GraphFunction(f, graph_cache_size, graph_while, max_iterations)

    return wrap if fn is None else wrap(fn)


def host_call(fn: Callable, *args) -> None:
    """In a @qgraph.graph step: call `fn(*args)` on the host in order with the step's kernel calls
    (on CUDA a host node of the step's graph, run on a driver thread: `fn` must not call CUDA,
    and the graph keeps `fn` and `args` alive until it has run; backends/step_host.py). On the
    CPU, or outside a step (after qgraph.sync()), it calls `fn(*args)` at once."""
    from ..runtime import call_hooks

    if not callable(fn):
        raise TypeError(f"qgraph.host_call takes a callable first, got {fn!r}")
    body = call_hooks.current_body()
    calls = None if body is None else body.calls
    if calls is not None and isinstance(runtime.STATE.current(), DeviceState):
        from .step_host import HostCall

        calls.append(HostCall(fn, args))
        return
    if calls is None:
        runtime.sync()
    fn(*args)


host_call._qgraph_kind = "host_call"  # what the kernel front end rejects (lang.front.reports)

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

