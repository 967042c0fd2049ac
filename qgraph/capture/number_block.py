"""A traced step's parameter block: its changing numbers in device memory, written by one loader node.

Each number a replay changes would otherwise be a node update of every kernel call it is passed to
(about 1-2.5 us of host time each, measured on an H200). A traced step whose kernels read a number
only inside their tasks (not as a loop bound) gets the kernels' variant reading it from an 8-byte
slot of one device block (args.kinds.MemoryScalarKind, lang.cuda.codegen.read_from_memory). The
step graph starts with a loader kernel node whose by-value parameters are the block's words: it
copies them into the block, and the tasks behind it wait for it (a programmatic edge on Hopper:
they launch early and wait in their first instruction). A replay with new numbers writes them into
the loader's parameter bytes and updates that one node, however many calls take them. The graph's
launches are ordered, so a queued launch never sees a later call's numbers.
"""

from __future__ import annotations

import numpy as np

from ..compiler.code_cache import entry_key
from ..driver import nvrtc
from ..driver.device import check, driver
from ..driver.nodes import kernel_node_params
from ..driver.params import ParamBuffer
from ..runtime.arrays import Ndarray

CHUNKS = (16, 64, 256, 504)  # words per loader kernel: 8 + 8 * 504 bytes fits the 4 KB parameter limit
MIN_READERS = 4  # calls that must read changing numbers for a block to pay: below, node updates cost less
_THREADS = 128
LOADER_SOURCE = "\n".join(
    f"struct Words{n} {{ unsigned long long w[{n}]; }};\n"
    f'extern "C" __global__ void qgraph_load_numbers_{n}(unsigned long long* dst, const Words{n} words) {{\n'
    f"    for (int i = threadIdx.x; i < {n}; i += blockDim.x) dst[i] = words.w[i];\n}}"
    for n in CHUNKS)


class _Loaders:
    """The loader kernels of one device (one per chunk size), compiled once by NVRTC and cached."""

    def __init__(self, target) -> None:
        device = target.device
        cc = device.info.compute_capability
        key = entry_key("number-loaders", LOADER_SOURCE, f"sm_{cc[0]}{cc[1]}")
        cached = target.code_cache.load(key)
        if cached is not None:
            cubin = cached[1]
        else:
            cubin = nvrtc.compile_cubin(LOADER_SOURCE, "qgraph_number_loaders.cu", cc)
            target.code_cache.store(key, {"nvrtc": nvrtc.version()}, cubin)
        module = device.load_module(cubin)
        self.functions = {n: device.function(module, f"qgraph_load_numbers_{n}") for n in CHUNKS}


def _loaders(target) -> _Loaders:
    found = target.helpers.get("number-loaders")
    if found is None:
        found = target.helpers["number-loaders"] = _Loaders(target)
    return found


class NumberBlock:
    """`slots` 8-byte slots of device memory and the loader nodes that fill them."""

    def __init__(self, target, slots: int) -> None:
        self.array = Ndarray(np.uint64, (max(slots, 1),))  # freed when the traced step is
        self.address = int(self.array.__cuda_array_interface__["data"][0])
        self.slots = slots
        self.buffers: list[tuple[ParamBuffer, object, int]] = []  # per loader: (buffer, node params, first slot)
        functions = _loaders(target).functions
        for first in range(0, slots, CHUNKS[-1]):
            count = min(CHUNKS[-1], slots - first)
            size = next(n for n in CHUNKS if n >= count)
            buffer = ParamBuffer(8 + 8 * size)
            buffer.data[:8] = (self.address + 8 * first).to_bytes(8, "little")
            params = kernel_node_params(functions[size], 1, _THREADS, buffer)
            self.buffers.append((buffer, params, first))
        self.nodes: list = []  # the loader nodes of the graph built with this block
        self.readers: set[int] = set()  # the calls (their indices in the step) reading the block

    def slot_address(self, slot: int) -> int:
        return self.address + 8 * slot

    def where(self, slot: int) -> tuple[int, int]:
        """(loader index, byte offset in its parameters) of a slot."""
        loader = slot // CHUNKS[-1]
        return loader, 8 + 8 * (slot - self.buffers[loader][2])

    def add(self, graph) -> list:
        """The loader nodes, at the head of `graph` (nothing before them): their handles."""
        d = driver()
        self.nodes = [check(d.cuGraphAddKernelNode(graph, [], 0, params), "adding a number loader node")
                      for _, params, _ in self.buffers]
        return self.nodes


# ------------------------------------------------------------------ which numbers, and the calls reading them

_READ_IN_TASKS: dict[tuple[int, int], bool] = {}  # (id(kernel source), position) -> read_in_tasks


def read_in_tasks(src, position: int) -> bool:
    """Whether a kernel reads its number parameter at `position` only inside its tasks' bodies (never as a
    loop bound, a repeat count or a loop's test, never assigned): then it can come from device memory."""
    found = _READ_IN_TASKS.get((id(src), position))
    if found is None:
        import ast

        name = src.param_names[position]

        def uses(nodes) -> int:
            return sum(isinstance(n, ast.Name) and n.id == name for node in nodes for n in ast.walk(node))

        found = not any(name in t.bound_names or name in t.stored for t in src.tasks) and \
            uses(src.fn_def.body) == sum(uses(t.body) for t in src.tasks) > 0
        _READ_IN_TASKS[(id(src), position)] = found
    return found


def memory_form(target, calls: list, sites: list, held: list):
    """The calls reading the numbers of `sites` ((call, position, value index), each read in tasks only) from
    a new NumberBlock: (the calls, the block, {(value index, key text): (pack, loader, offset)}). Sites of
    one value and one kind share a slot; the loaders start with the values in `held`."""
    from ..args.kinds import arg_type, memory_kind

    slots: dict[tuple[int, str], int] = {}
    for j, k, i in sites:
        slots.setdefault((i, calls[j].key[k]), len(slots))
    block = NumberBlock(target, len(slots))
    groups = {}
    for (i, sig), slot in slots.items():
        pack = arg_type(sig).pack
        loader, offset = block.where(slot)
        packed = pack(held[i])
        block.buffers[loader][0].data[offset:offset + len(packed)] = packed
        groups[(i, sig)] = (pack, loader, offset)
    new = list(calls)
    block.readers = {j for j, _, _ in sites}
    for j, k, i in sites:
        call = new[j]
        sig = call.key[k]
        kind = memory_kind(arg_type(sig))
        key = call.key[:k] + (kind.sig,) + call.key[k + 1:]
        packs = call.packs[:k] + (kind.slot(block.slot_address(slots[(i, sig)])),) + call.packs[k + 1:]
        new[j] = call._replace(key=key, packs=packs)
    return new, block, groups
