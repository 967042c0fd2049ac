"""@qgraph.graph: a Python function that calls kernels, run as one CUDA graph per step.

The function body runs on every call (so what it computes in Python is never stale), with
its kernel calls recorded instead of launched; the recorded calls are replayed as one graph
holding every task of every call (backends/step_capture.py). On the CPU the function simply
runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from . import runtime
from .runtime import DeviceState


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

    def __init__(self, fn: Callable, graph_cache_size: int | None) -> None:
        self._fn = fn
        self.graph_cache_size = graph_cache_size
        self.stats = StepStats()
        self._runners: dict[str, object] = {}
        functools.update_wrapper(self, fn)
        runtime.STATE.kernels.add(self)

    def __call__(self, *args, stream=None, **kwargs):
        from .backends import step_capture

        state = runtime.ensure_init()
        target = state.target
        if not isinstance(target, DeviceState) or step_capture.is_recording():
            return self._fn(*args, **kwargs)  # the CPU; or a step called by a step: its calls join the outer one
        runner = self._runners.get(target.key)
        if runner is None:
            capacity = self.graph_cache_size or state.settings.graph_cache_size
            runner = self._runners[target.key] = step_capture.StepRunner(target, self.__name__, self.stats, capacity)
        if stream is None:
            handle = target.device.stream_handle
        else:
            from .driver.device import stream_handle

            handle = stream_handle(stream)
        replayed, result = runner.replay_same(args, kwargs, handle)
        if replayed:
            return result
        calls, result = step_capture.record(self._fn, args, kwargs)
        if calls:
            runner.run(calls, handle)
            runner.remember(args, kwargs, handle, result)
        return result

    def _drop(self) -> None:
        for runner in self._runners.values():
            runner.close()
        self._runners.clear()
        self.stats = StepStats()

    def __repr__(self) -> str:
        return f"<qgraph.graph {self.__qualname__}>"


def graph(fn: Callable | None = None, *, graph_cache_size: int | None = None):
    """Run a Python function that calls kernels as one CUDA graph per call.

    The first call with a given sequence of kernel signatures builds a graph holding every task
    of every kernel call; later calls replay it, updating in place the nodes of calls whose
    arrays, shapes or numbers changed. Calls whose arrays do not overlap (or only read the
    same arrays) run concurrently. `graph_cache_size` bounds the graphs kept (default
    QGRAPH_GRAPH_CACHE_SIZE). On the CPU the function runs as written.
    """
    if graph_cache_size is not None and (not isinstance(graph_cache_size, int) or graph_cache_size < 1):
        raise ValueError(f"graph_cache_size must be a positive int, got {graph_cache_size!r}")

    def wrap(f: Callable) -> GraphFunction:
        if getattr(f, "_qgraph_kind", None) == "kernel":
            raise TypeError(f"{f!r} is a kernel: @qgraph.graph decorates a plain function that calls kernels")
        if not callable(f) or not hasattr(f, "__code__"):
            raise TypeError(f"@qgraph.graph decorates a Python function, got {f!r}")
        return GraphFunction(f, graph_cache_size)

    return wrap if fn is None else wrap(fn)
