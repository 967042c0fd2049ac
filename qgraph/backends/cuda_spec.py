"""A compiled CUDA specialisation as one object: what it is made of, how it runs, its graphs.

`Specialisation` holds one signature's task kernels, the places of its flags, and what every
specialisation of the kernel on that device shares (`DeviceKernel`: the region tree, the host
bounds function, the resolved options, the debug record, how loops and edges are built), fixed
once compiled. It builds its own graphs (`build_graph`: the kernel's own, a part of a
@qgraph.graph step, or nodes added to another library's stream capture) and its eager launches
(`EagerRunner`); how the kernel's own calls run it is its runner's (backends.cuda_runners).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from ..args.kinds import ArrayLayout, arg_type
from ..compiler.cuda_program import TaskKernel
from ..compiler.launch_code import block_expr, generate, grid_expr, signature_with_constants, tile_shape, tiles_of
from ..driver.device import driver, kernel_failure
from ..driver.params import ParamBuffer
from ..graph_cache import TaskGraph
from ..lang.front.interchange import InterchangedTask
from ..lang.front.regions import Region
from ..lang.options import KernelOptions
from .debug_report import DeviceRecord

_BOUNDS_MEMO = 16  # eager calls remember the loop bounds of this many recent argument sets


@dataclass(frozen=True)
class DeviceKernel:
    """What every specialisation of one kernel on one device shares, fixed by its launcher."""

    target: object  # the runtime DeviceState
    body: Region  # the kernel's region tree
    name: str
    bounds: Callable  # the host bounds function: args -> (packed bounds, counts, extents)
    options: KernelOptions  # resolved
    record: DeviceRecord | None  # debug mode's record of a failed check (None: debug off)
    device_loops: bool  # loop regions become WHILE nodes (else the host do-while repeats the graph)
    programmatic: bool  # programmatic edges between kernel nodes where the device has them
    cancel_word: int = 0  # device address of the launcher's runtime.cancel.CancelWord (0: no loops)
    cancel_abi: bytes = b""  # that word as the kernel parameter of interchanged loops' tasks (b"": none)


class GraphForm:
    """How a specialisation's graphs are shaped, each choice given up at most once (backends.cuda
    rebuilds then): short repeats built straight for the call's count, tiled loops run tiled."""

    __slots__ = ("straight_counts", "tiling")

    def __init__(self) -> None:
        self.straight_counts = True  # until a call's count differs from the one a graph was built for
        self.tiling = True  # until a call's grid changes which tiled loops fit a wave


class Specialisation:
    """One compiled signature on one device, fixed once compiled: its task kernels, the places of its
    flags, its debug sites and what every specialisation of the kernel there shares (graphs.builder.GraphSpec).
    How it runs belongs to its runner (backends.cuda_runners), chosen once by the launcher."""

    __slots__ = ("key", "kernels", "flags", "sites", "shared", "form", "overlap", "again")

    def __init__(self, key: tuple, kernels: list[TaskKernel], flags: dict, sites: list, shared: DeviceKernel,
                 overlap: Callable | None) -> None:
        self.key = key
        self.kernels = kernels
        self.flags = flags  # loop or branch flag (or repeat count) -> (argument, struct leaf or None)
        self.sites = sites  # debug mode: what each check's number means (lang.lower.debug_checks)
        self.shared = shared
        self.form = GraphForm()
        self.overlap = overlap  # packs -> None, raising when arrays of an interchanged loop overlap (overlap_check)
        if shared.options.debug:  # every task kernel takes the record after its scratch arrays
            for tk in kernels:
                tk.record = shared.record.abi
        for tk in kernels:  # an interchanged loop's task reads the cancel word (runtime.cancel), after the record
            if isinstance(tk.task, InterchangedTask):
                tk.record += shared.cancel_abi
        # the same-arguments fast path may replay it (cuda_call): not with struct or vector arguments,
        # which can change behind the same object
        self.again = not any(getattr(arg_type(s), "is_struct", False) or getattr(arg_type(s), "is_vector", False)
                             for s in key)

    # what the graph builder reads (graphs.builder.GraphSpec), from the kernel's shared part
    target = property(lambda self: self.shared.target)
    body = property(lambda self: self.shared.body)
    name = property(lambda self: self.shared.name)
    bounds = property(lambda self: self.shared.bounds)
    options = property(lambda self: self.shared.options)
    record = property(lambda self: self.shared.record)
    device_loops = property(lambda self: self.shared.device_loops)
    programmatic = property(lambda self: self.shared.programmatic)
    cancel_word = property(lambda self: self.shared.cancel_word)
    straight_counts = property(lambda self: self.form.straight_counts)
    tiling = property(lambda self: self.form.tiling)

    @property
    def stop_word(self) -> int:
        """Debug mode: the device address device loops watch (they end once a check failed); else 0."""
        return self.record.pointer if self.record is not None else 0

    def build_graph(self, args: tuple, packs: tuple, stream: int, stats, into: tuple | None = None,
                    kernel_deps: frozenset = frozenset()) -> TaskGraph:
        """A graph of this specialisation for these arguments (graph_cache.TaskGraph); `into=(graph,
        deps)` adds the nodes to another graph after `deps` instead (`kernel_deps`: which of those
        are kernel nodes, for programmatic edges). `stats` counts its replays and node updates."""
        if self.overlap is not None:  # interchanged loops need their arrays apart (TaskGraph checks its misses)
            self.overlap(packs)
        return TaskGraph(self, args, packs, stream, stats, into, kernel_deps)

    def eager(self) -> EagerRunner:
        """Launches of the tasks one by one, on the stream of each call."""
        return EagerRunner(self.kernels, self.bounds, self.name)


def overlap_check(src, pairs: tuple, tiled: tuple = ()):
    """check(packs): raise lang.front.interchange.overlap_error for the arrays of `pairs` (names of
    `src`'s parameters) as the parameter bytes `packs` give them; None without pairs. The last
    parameter bytes checked are remembered, so a replay with them costs one comparison. `tiled`: the
    pairs of temporally tiled loops (not even the same view)."""
    pairs, tiled = tuple(dict.fromkeys(pairs + tiled)), frozenset(tiled)
    if not pairs:
        return None
    from ..lang.front.interchange import overlap_error

    index = {name: src.param_names.index(name) for pair in pairs for name in pair}
    last = [None]

    def check(packs: tuple) -> None:
        if packs == last[0]:
            return
        views = {}
        for name, k in index.items():
            block = packs[k]
            if not isinstance(block, bytes) or len(block) < ArrayLayout.SHAPE:
                return  # not an array's parameters (a struct, a number): nothing to compare
            ndim = (len(block) - ArrayLayout.SHAPE) // 16
            words = struct.unpack_from(f"<{5 + 2 * ndim}q", block)
            views[name] = (words[4], words[5:5 + ndim], words[5 + ndim:], words[3])
        error = overlap_error(src.name, pairs, views, tiled)
        if error is not None:
            raise error
        last[0] = packs
    return check


class EagerRunner:
    """Launches a specialisation's tasks one by one on the call's stream."""

    def __init__(self, kernels: list[TaskKernel], bounds, name: str) -> None:
        self.kernels = kernels
        self.buffers = [ParamBuffer(tk.param_size) for tk in kernels]
        d = driver()
        # _keep: the driver reads each buffer's `extra` array by address; it lives as long as `run`
        constants = {"_bounds": bounds, "_memo": {}, "_tile": tile_shape, "_tiles": tiles_of,
                     "_launch": d.cuLaunchKernel, "_fail": kernel_failure(name), "_keep": self.buffers,
                     "_memo_size": _BOUNDS_MEMO}
        lines = []
        shapes = list(dict.fromkeys(grid_expr(tk, False) for tk in kernels if tk.tiled))
        if any(tk.parallel for tk in kernels):
            lines += ["    bn = _memo.get(p)",
                      "    if bn is None:",
                      "        if len(_memo) >= _memo_size:",
                      "            _memo.clear()",
                      "        b, n, c = _bounds(*args)",
                      f"        bn = _memo[p] = (b, n, ({''.join(shape + ', ' for shape in shapes)}))",
                      "    b, n, t = bn"]
        for k, (tk, buf) in enumerate(zip(kernels, self.buffers)):
            constants[f"f{k}"] = tk.function
            constants[f"buf{k}"] = buf.data
            constants[f"ex{k}"] = buf.extra
            indent = "    "
            if tk.param_size:
                lines.append(f"    buf{k}[:] = {block_expr(tk)}")
            if tk.parallel:
                lines.append(f"    if n[{tk.bounds_slot}]:")
                indent = "        "
            if tk.tiled:  # its (gx, gy, gz, bx, by), computed with the bounds (t: one per distinct shape)
                shape = f"t[{shapes.index(grid_expr(tk, False))}]"
                lines.append(f"{indent}r = _launch(f{k}, *{shape}, 1, 0, stream, 0, ex{k})[0]")
            else:
                lines.append(f"{indent}r = _launch(f{k}, {grid_expr(tk, False)}, 1, 1, {tk.block}, 1, 1, 0, "
                             f"stream, 0, ex{k})[0]")
            lines.append(f"{indent}if r:")
            lines.append(f"{indent}    raise _fail(r, 'launching task {k}')")
        source = f"def run({signature_with_constants('args, p, stream', constants)}):\n" + "\n".join(lines) + "\n"
        self.run = generate(source, "run", constants, f"eager launch of kernel {name}")
