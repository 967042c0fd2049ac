"""The region tree of a kernel body: what runs, in which order, under which device control flow.

    Sequence(children)          run the children in order
    Task                        one offloaded task: a parallel loop or a serial block (a leaf)
    DeviceLoop(flag, body)      repeat `body` while the int32 `flag` is non-zero (do-while)

The front end builds the tree; every backend walks it (the CPU runner, the CUDA graph
builder, eager launches and the host do-while fallback). `graph_while="flag"` is a
DeviceLoop around the whole body. Regions nest structurally (a loop inside a loop, a
sequence inside a loop body), even where the front end does not yet produce them.
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
    """Repeat `body` while the int32 array parameter `flag` is non-zero, tested after each pass."""

    flag: str
    body: Sequence
    lineno: int


def leaf_tasks(region: Region) -> Iterator[Task]:
    """The tasks of a tree in launch order."""
    if isinstance(region, Task):
        yield region
    elif isinstance(region, Sequence):
        for child in region.children:
            yield from leaf_tasks(child)
    elif isinstance(region, DeviceLoop):
        yield from leaf_tasks(region.body)
    else:
        raise TypeError(f"not a region: {region!r}")


def device_loops(region: Region) -> Iterator[DeviceLoop]:
    """Every DeviceLoop of a tree, outermost first."""
    if isinstance(region, DeviceLoop):
        yield region
        yield from device_loops(region.body)
    elif isinstance(region, Sequence):
        for child in region.children:
            yield from device_loops(child)


def has_nested_loops(region: Region) -> bool:
    return any(any(True for _ in device_loops(loop.body)) for loop in device_loops(region))
