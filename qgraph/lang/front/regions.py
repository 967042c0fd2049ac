"""The region tree of a kernel body: what runs, in which order, under which device control flow.

    Sequence(children)          run the children in order
    Task                        one offloaded task: a parallel loop or a serial block (a leaf)
    DeviceLoop(flag, body)      repeat `body` while the int32 `flag` is non-zero: tested after
                                each pass (graph_while=, do-while) or before (qgraph.loop)
    IfRegion(flag, then, orelse) run `then` if `flag` is non-zero, else `orelse` (qgraph.cond)
    RepeatLoop(count, body)     run `body` `count` times, `count` a scalar parameter (qgraph.repeat)

The front end builds the tree; every backend walks it (the CPU runner, the CUDA graph
builder, eager launches and the host fallback). `graph_while="flag"` is a do-while
DeviceLoop around the whole body; `while qgraph.loop(flag):`, `if qgraph.cond(flag):` and
`for _ in qgraph.repeat(k):` at the top level of a kernel body (or of another region's body)
make the others, nested to any depth.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field


class Region:
    """A node of the region tree."""


@dataclass(frozen=True)
class Dim:
    """One dimension of a parallel loop: `range(start, stop, step)`; step None means 1."""

    start: ast.expr
    stop: ast.expr
    step: ast.expr | None = None


@dataclass(eq=False)
class Task(Region):
    """One offloaded task: a parallel loop (one iteration per thread) or a serial block."""

    index: int
    parallel: bool
    lineno: int
    body: list[ast.stmt]
    loop_vars: tuple[str, ...] = ()
    dims: tuple[Dim, ...] = ()
    stored: frozenset[str] = frozenset()
    loaded: dict[str, int] = field(default_factory=dict)  # name -> first line it is read
    bound_names: frozenset[str] = frozenset()  # names read by the loop bounds

    @property
    def kind(self) -> str:
        return "parallel" if self.parallel else "serial"

    def __repr__(self) -> str:
        what = f"for {', '.join(self.loop_vars)}" if self.parallel else "serial"
        return f"<Task {self.index} {what} at line {self.lineno}>"


@dataclass(frozen=True, eq=False)
class Sequence(Region):
    children: tuple[Region, ...]


@dataclass(frozen=True, eq=False)
class DeviceLoop(Region):
    """Repeat `body` while the int32 array parameter `flag` is non-zero, tested after each pass
    (do-while) or, with `test_first`, before each pass. `max_iterations` overrides the kernel's
    runaway guard for this loop (USE_KERNEL: the kernel's; None: no guard); `unroll` its copies of
    the body per WHILE pass on CUDA (USE_KERNEL: the kernel's unroll=; None: chosen, graphs.unroll)."""

    flag: str
    body: Sequence
    lineno: int
    test_first: bool = False
    max_iterations: object = "kernel"
    unroll: object = "kernel"


@dataclass(frozen=True, eq=False)
class IfRegion(Region):
    """Run `then` if the int32 array parameter `flag` is non-zero, else `orelse`."""

    flag: str
    then: Sequence
    orelse: Sequence
    lineno: int


@dataclass(frozen=True, eq=False)
class RepeatLoop(Region):
    """Run `body` `count` times; `count` names an integer scalar parameter (read at each call).
    `unroll` as DeviceLoop's."""

    count: str
    body: Sequence
    lineno: int
    unroll: object = "kernel"


USE_KERNEL = "kernel"  # a DeviceLoop's max_iterations when the kernel's guard applies


def loop_limit(loop: DeviceLoop, kernel_limit: int | None) -> int | None:
    """The runaway guard's limit of `loop`: its own max_iterations=, else the kernel's."""
    return kernel_limit if loop.max_iterations == USE_KERNEL else loop.max_iterations


def with_bodies(region: Region, rebuild) -> Region:
    """`region` with each child sequence replaced by `rebuild(child)` (a Sequence), fields kept."""
    import dataclasses

    if isinstance(region, (DeviceLoop, RepeatLoop)):
        return dataclasses.replace(region, body=rebuild(region.body))
    if isinstance(region, IfRegion):
        return dataclasses.replace(region, then=rebuild(region.then), orelse=rebuild(region.orelse))
    raise TypeError(f"not a control-flow region: {region!r}")


def children_of(region: Region) -> tuple[Region, ...]:
    """The sub-regions of a region, in launch order."""
    if isinstance(region, Sequence):
        return region.children
    if isinstance(region, (DeviceLoop, RepeatLoop)):
        return (region.body,)
    if isinstance(region, IfRegion):
        return (region.then, region.orelse)
    return ()


def leaf_tasks(region: Region) -> Iterator[Task]:
    """The tasks of a tree in launch order."""
    if isinstance(region, Task):
        yield region
    elif isinstance(region, Region):
        for child in children_of(region):
            yield from leaf_tasks(child)
    else:
        raise TypeError(f"not a region: {region!r}")


def device_loops(region: Region) -> Iterator[DeviceLoop]:
    """Every flag-controlled DeviceLoop of a tree, outermost first (pre-order)."""
    if isinstance(region, DeviceLoop):
        yield region
    for child in children_of(region):
        yield from device_loops(child)


def control_regions(region: Region) -> Iterator[Region]:
    """Every DeviceLoop, IfRegion and RepeatLoop of a tree, in pre-order."""
    if isinstance(region, (DeviceLoop, IfRegion, RepeatLoop)):
        yield region
    for child in children_of(region):
        yield from control_regions(child)


def flags_of(region: Region) -> list[str]:
    """The flag parameters the tree's loops and branches read (each once, in pre-order)."""
    return list(dict.fromkeys(r.flag for r in control_regions(region) if not isinstance(r, RepeatLoop)))


def is_root_loop(body: Region) -> bool:
    """The tree is one do-while loop around everything (the decorator's graph_while)."""
    return isinstance(body, Sequence) and len(body.children) == 1 and isinstance(body.children[0], DeviceLoop) \
        and not body.children[0].test_first and not any(True for _ in control_regions(body.children[0].body))
