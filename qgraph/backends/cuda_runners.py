"""How a CUDA specialisation's calls run: one runner per specialisation, chosen once by the launcher.

The generated launch (backends.cuda_call) looks a call's signature up and calls `runner.run(args,
packs, stream)`; `again` and `graph` tell its same-arguments fast path whether and what to replay.
Each runner owns what changes as calls come: a graph runner its graph (built by the first call,
rebuilt once in another form, dropped when the cache evicts it), the host fallback its loop.
"""

from __future__ import annotations

from collections.abc import Callable

from .cuda_spec import Specialisation


class Runner:
    """Eager launches, task by task, on the call's stream (graphs off); the base of the others."""

    __slots__ = ("spec", "run", "again", "graph", "uses_graph", "nodes", "host_runner", "host_loop")

    def __init__(self, spec: Specialisation, run: Callable | None = None, host_runner=None) -> None:
        self.spec = spec
        self.again = spec.again
        self.graph = None  # the graph replayed (graph runners)
        self.uses_graph = False
        self.nodes = 0  # kernel nodes of its graph
        self.host_runner = host_runner  # graphs.host_fallback.HostLoop or HostTree: the loop runs on the host
        self.host_loop = host_runner is not None  # stats.host_loop
        self.run = _checked(run or spec.eager().run, spec.overlap)

    def iterations(self, synchronize: Callable) -> tuple[int, ...]:
        """Passes of each device loop in the last call (stats.iterations; waits for it on a graph)."""
        if self.host_runner is not None:
            passes = self.host_runner.passes
            return tuple(passes) if isinstance(passes, list) else (passes,)
        if self.graph is None:
            return ()
        synchronize()
        return self.graph.loop_passes()

    def evicted(self) -> None:
        """The graph cache let this runner's graph go (graph runners only have one)."""


class HostLoopRunner(Runner):
    """The host fallback: the loop (a do-while around the whole body, or a walk of the region tree
    launching tasks one by one) runs on the host."""

    __slots__ = ()

    def __init__(self, spec: Specialisation, host_runner) -> None:
        super().__init__(spec, host_runner.run, host_runner)


class GraphRunner(Runner):
    """A cached CUDA graph per specialisation, built by its first call and replayed (with node updates
    where parameter bytes differ); with the host fallback, replayed by a host do-while loop."""

    __slots__ = ("stats", "cache", "host_loop_of")

    def __init__(self, spec: Specialisation, stats, cache, host_loop_of: Callable | None) -> None:
        """`cache`: the launcher's GraphCache; `host_loop_of(replay, graph)`: the host loop replaying
        the graph, where device loops run on the host (None: they run on the device)."""
        super().__init__(spec, self._build_and_run)
        self.run = self._build_and_run  # its graphs check overlaps where their arguments change
        self.uses_graph = True
        self.host_loop = host_loop_of is not None
        self.stats, self.cache, self.host_loop_of = stats, cache, host_loop_of

    def _build_and_run(self, args: tuple, packs: tuple, stream: int) -> None:
        self.build(args, packs, stream)
        self.run(args, packs, stream)  # None: the fast path remembers a replay from the next call on

    def build(self, args: tuple, packs: tuple, stream: int):
        """Build the graph for a call (replacing any it had) and make it the one this runner replays."""
        spec, stats = self.spec, self.stats
        graph = spec.build_graph(args, packs, stream, stats)
        graph.on_new_form = self._reform
        stats.builds += 1
        stats.build_seconds = graph.build_seconds
        stats.graph_nodes = self.nodes = graph.kernel_nodes
        self.graph = graph
        run = graph.replay
        if self.host_loop_of is not None:
            self.host_runner = self.host_loop_of(graph.replay, graph)
            run = self.host_runner.run
        self.run = run
        self.cache.add(spec.key, graph)
        stats.cache_size = len(self.cache)
        return graph

    def _reform(self, args: tuple, packs: tuple, stream: int, new_count: bool):
        """A call whose repeat count differs from the one the graph was built straight for
        (graphs.unroll.Straight; `new_count`), or whose grid changes which temporally tiled loops' tiles
        fit a wave (graphs.unroll.tiled_kernels): from now on its repeats keep the WHILE form, where a new
        count is a node update, or its loops run untiled, which suits every grid; the graph is rebuilt
        so once (the old one closed when the device is idle), not at every change back and forth."""
        if new_count:
            self.spec.form.straight_counts = False
        else:
            self.spec.form.tiling = False
        return self.build(args, packs, stream)

    def evicted(self) -> None:
        self.graph = None
        self.run = self._build_and_run


def _checked(run: Callable, check: Callable | None) -> Callable:
    """`run` after `check(packs)` (an interchanged loop's overlap check), for runners without a graph."""
    if check is None:
        return run

    def checked_run(args, packs, stream):
        check(packs)
        return run(args, packs, stream)
    return checked_run
