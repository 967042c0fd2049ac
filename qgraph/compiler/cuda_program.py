"""Compile a kernel specialisation for CUDA: one kernel per task.

Every task is written as NVVM IR by qgraph's emitter (compiler.cuda_emitted; else by numba-cuda),
then NVVM compiles them in one run into one PTX module (an entry per task), linked with its
variants (compiler.ptx_variants) into cubins on parallel threads (compiler.cuda_images), cached on
disk (keyed by the code's fingerprint, the argument
types, the compute capability and the toolchain versions): a hit needs only the driver.

Launch ABI: each task kernel takes its arguments by value, in numba's flattened layout.
Parameters are ordered so that no padding is ever needed: the int64 launch bounds, then
arrays (all 8-byte fields), then scalars by decreasing size. A task's parameter block is
therefore the plain concatenation of its arguments' packed bytes.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

import numpy as np

from ..args.kinds import ArgKind, arg_type, array_kind
from ..driver.device import CudaDevice, check, driver, owned
from ..errors import QgraphError
from ..lang import generated
from ..lang.cuda import codegen as cuda_codegen
from ..lang.cuda import tiling
from ..lang.cuda.reductions import dtype_name
from ..lang.flat.view import FlatSource, flat_source
from ..lang.front.parse import KernelSource, Task
from ..lang.lower.debug_checks import DebugPlan
from ..lang.lower.fingerprint import fingerprint_of
from ..lang.lower.lowering import CUDA_ATOMICS, CUDA_MATH, Symbols, lower_funcs, module_of
from ..lang.options import DEFAULT_OPTIONS, KernelOptions
from . import numba_adapter as adapter
from . import ptx_text
from .code_cache import CodeCache, entry_key
from .compile_depth import room_to_recurse
from .compile_gc import rare_collections
from .cuda_emitted import compiled_ptx
from .cuda_images import CudaImages, LoadedImages, link_groups
from .ptx_variants import GATED, GATING, TRIGGER, gating_tasks, has_gated_variant, variant_groups
from .random_code import random_functions
from .toolchain import toolchain_versions

BLOCK = 256  # threads per block for parallel tasks (capped by each kernel's own limit)
PDL_COMPUTE_CAPABILITY = (9, 0)  # griddepcontrol and programmatic graph edges: Hopper and newer
TRIGGER_BLOCKS = 8  # the largest grid (blocks) whose graph node uses the launch_dependents variant

@dataclass
class TaskKernel:
    """One loaded task kernel and how to build its parameter block for a call."""

    task: Task
    function: object  # CUfunction
    block: int  # threads per block (1 for a serial task)
    param_size: int
    bounds_slot: int | None  # index of its packed bounds in the host bounds tuple
    arg_slots: tuple[int, ...]  # kernel argument indices, in parameter order
    waits: bool = False  # starts with griddepcontrol.wait: safe behind a programmatic edge
    suffixes: dict[int, bytes] = None  # argument index -> bytes appended to its block (a 0-d array as (1,))
    trigger_function: object = None  # the same kernel starting with launch_dependents (see below)
    wave: int = 0  # blocks that fit on the device at once: the trigger variant is for grids up to this
    grid_limit: int = 0  # a cap on the grid (tasks with reductions run grid-stride loops); 0: none
    scratch: Scratch | None = None  # deterministic reductions' partials and block counter
    modules: tuple = ()  # the CUmodules holding this specialisation's kernels (unloaded on close)
    tiled: bool = False  # a multi-dimensional loop on 2-D blocks: its grid is a shape (launch_code.tile_shape)
    temporal: tuple | None = None  # a temporally tiled task's (passes, tile, halo): its grid is launch_code.tiles_of
    lanes: bool = False  # its inner loop runs on lanes (lang.cuda.lanes): lanes_expr(count) threads an iteration
    arg_exprs: tuple[str, ...] = ()  # each argument slot's value from the call's `p` (a struct leaf: p[k][j])
    record: bytes = b""  # after the scratch arrays: debug mode's record, then an interchanged loop's cancel word
    arrays: int = 0  # array arguments (the scratch arrays and the record follow them)
    gated_function: object = None  # kernels with a flag loop: the variant returning at once once the loop ended
    gated_trigger_function: object = None  # its launch_dependents twin
    gate: bytes = b""  # a node of that variant: padding and the address of its loop's `live` word, appended
    gating: tuple = ()  # a flag loop body's last, serial task: its gating variants (plain, gated; no trigger twin)

    def function_for(self, grid, programmatic: bool):
        """The variant for a graph node of `grid` blocks (a count or a tile shape):
        launch_dependents only for grids of a few blocks (TRIGGER_BLOCKS), whose launch
        latency is most of their time: on an H100 it made a chain of 200 dependent 256-block
        kernels 1.8x slower (benchmarks/ballistic_grad.py) and the README's relax 5-25%
        slower, while 8 one-block tasks ran 14% faster with it."""
        if programmatic and self.trigger_function is not None and blocks_in(grid) <= min(self.wave, TRIGGER_BLOCKS):
            return self.trigger_function
        return self.function

    @property
    def parallel(self) -> bool:
        return self.task.parallel


def blocks_in(grid) -> int:
    """Blocks in a grid given as a count or as a tile shape (gx, gy, gz, bx, by)."""
    return grid if type(grid) is int else grid[0] * grid[1] * grid[2]


def param_order(src: KernelSource, task: Task, types: list[ArgKind]) -> list[int]:
    """Argument indices a task kernel takes: arrays first, then scalars by decreasing size."""
    names = src.param_names
    used = [k for k, n in enumerate(names) if n in task.loaded]
    arrays = [k for k in used if types[k].is_array]
    scalars = [k for k in used if not types[k].is_array]
    scalars.sort(key=lambda k: -types[k].param_size)
    return arrays + scalars


@dataclass
class TaskCodes:
    """The generated kernels of one specialisation, before compilation: one per graph node."""

    tasks: list[Task]  # the tasks, one kernel each
    codes: list  # cuda_codegen.CudaTaskCode per node task
    orders: list[list[int]]  # argument indices each kernel takes
    types: list[list[ArgKind]]  # argument kinds per node task (0-d atomic targets as shape (1,))
    suffixes: list[dict[int, bytes]]  # argument index -> bytes appended to its block
    symbols: Symbols
    flat: FlatSource  # the flattened kernel the codes were generated from (its leaf parameters)
    debug: DebugPlan | None = None  # debug mode's checks, and what each site number means


def task_codes(src: KernelSource, key: tuple[str, ...], options: KernelOptions = DEFAULT_OPTIONS,
               flat: FlatSource | None = None) -> TaskCodes:
    """Generate every node task's kernel function for one argument signature, with `options`
    (resolved: lang.options).

    Struct arguments are flattened into their leaves and vector code into components first
    (lang.flat.view; `flat` when the caller has it already): argument indices below are leaf
    indices. `options.debug` ("bounds"/"nan") adds debug mode's checks (lang.lower.debug_checks)."""
    flat = flat or flat_source(src, [arg_type(s) for s in key], options.default_float)
    src, types = flat.src, flat.kinds
    plan = DebugPlan.of(options.debug, src.param_names, types) if options.debug else None
    symbols = Symbols(dict(CUDA_ATOMICS), specialised=list(flat.funcs.defs), math_paths=dict(CUDA_MATH))
    node_tasks = list(src.tasks)  # one kernel (and graph node) each
    orders, codes, task_types, suffixes = [], [], [], []
    for task in node_tasks:
        order = param_order(src, task, types)
        orders.append(order)
        code = cuda_codegen.cuda_task(src, task, [src.param_names[k] for k in order], symbols, types, options, plan)
        codes.append(code)
        these, suffix = list(types), {}
        for k, name in enumerate(src.param_names):
            if name in code.one_element:  # the 0-d array's parameters, extended to shape (1,)
                these[k], suffix[k] = types[k].one_element()
        task_types.append(these)
        suffixes.append(suffix)
    return TaskCodes(node_tasks, codes, orders, task_types, suffixes, symbols, flat, plan)


@dataclass
class Program:
    """A specialisation's compiled code, before it is loaded: cubins with an entry per task and variant."""

    codes: TaskCodes
    entries: list[str]  # each task's kernel entry (its launch_dependents twin adds TRIGGER)
    sizes: list[int]  # each task's parameter block, bytes
    images: CudaImages
    cached: bool  # loaded from the disk cache
    waits: bool  # the entries start with griddepcontrol.wait (and have trigger twins)
    ptx: tuple[tuple[str, str], ...] = ()  # (name, text) of each PTX module linked (empty when loaded)


def build_program(src: KernelSource, key: tuple[str, ...], cc: tuple[int, int], link, cache: CodeCache,
                  options: KernelOptions = DEFAULT_OPTIONS, flat: FlatSource | None = None,
                  fresh: bool = False) -> Program:
    """Generate, compile and link (or load from the disk cache) every task of one specialisation
    for compute capability `cc`; `link(ptx_list)` makes a cubin of each group (the device's JIT linker, or
    ptxas and nvlink offline). Needs no device: benchmarks/cuda_compile_offline.py profiles it.
    `fresh`: compile even on a cache hit (the PTX exists only in a compile: kernel.inspect)."""
    generated_codes = task_codes(src, key, options, flat)
    flat = generated_codes.flat
    src, types = flat.src, flat.kinds
    codes, orders, task_types = generated_codes.codes, generated_codes.orders, generated_codes.types
    func_defs = lower_funcs(generated_codes.symbols)
    fingerprint = fingerprint_of(src, [c.function for c in codes] + [f for f, _, _ in func_defs],
                                 [s for _, _, s in func_defs])
    waits = tuple(cc) >= PDL_COMPUTE_CAPABILITY
    ckey = entry_key("tasks", fingerprint, ",".join(key), f"sm_{cc[0]}{cc[1]}", f"pdl={waits}", options.code_key(),
                     toolchain_versions())

    # with QGRAPH_DUMP set, compile even on a cache hit: the task source and PTX are only
    # produced by a compile, and the dump must hold every generated source
    cached = cache.load(ckey) if generated.dump_dir() is None and not fresh else None
    if cached is not None:
        manifest, binary = cached
        images = CudaImages.unpacked(manifest, binary)
        if images is not None:
            return Program(generated_codes, manifest["entries"], manifest["param_sizes"], images, True, waits)
    with rare_collections(), room_to_recurse():  # few collections, nested helpers' depth (compiler.compile_*)
        ptx_list, entries, sizes = compiled_ptx(compile_ptx, src, codes, orders, task_types, func_defs, cc, types,
                                                options.fast_math, options.debug is not None)
    groups = variant_groups(src, ptx_list, entries, cc) if waits else [ptx_list]
    linked = tuple(item for group in groups for item in group)
    for name, ptx in linked:
        generated.dump(f"{src.qualname}.{name}", ptx, "ptx")
    images = link_groups(link, groups)
    if images.cubins:
        cache.store(ckey, {"kernel": src.qualname, "entries": entries, "param_sizes": sizes, "types": list(key),
                           **images.manifest()}, images.binary())
    return Program(generated_codes, entries, sizes, images, False, waits, linked)


def compile_tasks(src: KernelSource, key: tuple[str, ...], device: CudaDevice, cache: CodeCache,
                  options: KernelOptions = DEFAULT_OPTIONS,
                  flat: FlatSource | None = None) -> tuple[list[TaskKernel], DebugPlan | None, bool]:
    """Compile (or load from the disk cache) every task of one specialisation and load it: the task
    kernels, with `options.debug` the plan of its checks (what each site number means), and
    whether the code came from the disk cache. With `options.deterministic` reductions combine
    through per-task scratch arrays in a fixed order."""
    program = build_program(src, key, device.info.compute_capability, device.link_ptx, cache, options, flat)
    generated_codes, entries, sizes, waits = program.codes, program.entries, program.sizes, program.waits
    flat = generated_codes.flat
    src, types = flat.src, flat.kinds
    dtypes = {name: t.dtype for name, t in zip(src.param_names, types) if t.is_array}
    node_tasks, codes, orders, suffixes = (generated_codes.tasks, generated_codes.codes, generated_codes.orders,
                                           generated_codes.suffixes)
    kernels: list[TaskKernel] = []
    if not node_tasks:
        return kernels, generated_codes.debug, program.cached
    loaded = LoadedImages(device, program.images)
    gating = gating_tasks(src.body) if has_gated_variant(src) else set()  # tasks with gating variants
    slot = 0
    for task, code, order, entry, size, suffix in zip(node_tasks, codes, orders, entries, sizes, suffixes):
        function = loaded.function(entry)
        block, temporal, bounds_slot = 1, None, None
        if task.parallel:
            limit = check(driver().cuFuncGetAttribute(
                driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function),
                "cuFuncGetAttribute")
            block = min(BLOCK, limit)
            cells = math.prod(tiling.region_of(code.temporal)) if code.temporal else 0
            if 0 < cells <= limit:  # a thread a region cell; a kernel allowing fewer runs its loop untiled
                block, temporal = cells, code.temporal
            bounds_slot = slot
            slot += 1
        kernel = TaskKernel(task, function, block, size, bounds_slot, tuple(order), waits, suffix)
        kernel.arg_exprs = tuple(flat.slot_expr(k) for k in order)
        kernel.modules = loaded.modules
        kernel.tiled, kernel.lanes = code.tiled, code.lanes
        kernel.temporal = temporal
        kernel.arrays = sum(1 for k in order if types[k].is_array)
        if task.parallel:
            per_sm = check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(function, block, 0),
                           "cuOccupancyMaxActiveBlocksPerMultiprocessor")
            kernel.wave = max(1, per_sm) * device.info.multiprocessors
            if code.reductions:  # a grid-stride loop: as many blocks as fit at once, one atomic each
                kernel.grid_limit = kernel.wave
            if code.scratch:
                kernel.scratch = Scratch(device, _scratch_specs(code, dtypes, kernel.wave))
        if waits:
            kernel.trigger_function = loaded.function(entry + TRIGGER)
            if has_gated_variant(src):
                kernel.gated_function = loaded.function(entry + GATED)
                kernel.gated_trigger_function = loaded.function(entry + TRIGGER + GATED)
            if task.index in gating:
                kernel.gating = tuple(loaded.function(entry + GATING + gated) for gated in ("", GATED))
        kernels.append(kernel)
    return kernels, generated_codes.debug, program.cached


def _scratch_specs(code, dtypes: dict, slots: int) -> list[tuple[np.dtype, int]]:
    """(dtype, length) of each scratch array, in parameter order: partials per block, counters."""
    has_partials = any(name.startswith("_qg_part") for name in code.scratch)  # deterministic mode
    specs = [(dtypes[r.target], slots) for r in code.reductions] if has_partials else []
    counters = len(code.scratch) - len(specs)
    return specs + [(np.dtype(np.int32), 1)] * counters


class Scratch:
    """Device memory of a task kernel's scratch arrays: per-block partials, block counters.

    Owned by its task kernel (one per specialisation); zero-filled once (every counter is
    reset by the block that finishes last); `abi` is the bytes of the array parameters,
    constant for the kernel's life."""

    def __init__(self, device: CudaDevice, specs: list[tuple[np.dtype, int]]) -> None:
        from ..args.kinds import numba_abi

        self._device = device
        self.pointers = []
        self._releases = []  # each allocation freed when the scratch (its task kernel) is collected
        abi = b""
        for dtype, length in specs:
            ptr = device.alloc(length * dtype.itemsize)
            self._releases.append(owned(self, device.free, ptr))
            self.pointers.append(ptr)
            device.memset(ptr, b"\0", length * dtype.itemsize)
            abi += numba_abi(ptr, (length,), (dtype.itemsize,), dtype.itemsize)
        device.sync_stream()
        self.abi = abi


def compile_ptx(src, codes, orders, task_types, func_defs, cc, types, fast_math: bool = False,
                 debug: bool = False, together: bool = True):
    """numba-cuda: every task typed and lowered, then NVVM: the PTX modules (name, text), each
    task's entry name and parameter block size. `together`: one NVVM run and one module for all
    tasks (the CUDA backend; else a module per task, as the offline PTX tables show them). Raises
    numba's errors for the launcher to translate."""
    ns_base = adapter.cuda_namespace()
    ns_base.update(random_functions("cuda"))
    if debug:
        from .debug_functions import cuda_functions

        ns_base.update(cuda_functions())
    for name, kind in zip(src.param_names, types):  # element types, for typed reduction partials
        if kind.is_array:
            ns_base[dtype_name(name)] = adapter.scalar_numba_type(kind.dtype)
    raw_funcs = {}
    func_namespaces = []
    for fdef, _, fsrc in func_defs:
        tree = module_of([fdef])
        ns = generated.run_tree(tree, fsrc.filename, f"cuda {fdef.name}", _namespace(tree, fsrc, ns_base))
        raw_funcs[fdef.name] = ns[fdef.name]
        func_namespaces.append(ns)
    device_funcs = {name: adapter.cuda_device_function(f, fast_math) for name, f in raw_funcs.items()}
    tree = module_of([c.function for c in codes])
    kernel_ns = generated.run_tree(tree, src.filename, f"cuda tasks of {src.qualname}", _namespace(tree, src, ns_base))
    for ns in func_namespaces + [kernel_ns]:
        ns.update(device_funcs)

    i64 = adapter.int64_argtype()
    libraries, entries, expected = [], [], []
    for code, order, types in zip(codes, orders, task_types):
        argtypes = [i64] * len(code.bound_params) + [types[k] for k in order]
        if code.scratch:  # after the array arguments: partials typed as their targets, int32 counters
            split = len(code.bound_params) + sum(1 for k in order if types[k].is_array)
            dtypes = {name: t.dtype for name, t in zip(src.param_names, types) if t.is_array}
            argtypes[split:split] = [array_kind(dtype, 1, True) for dtype, _ in _scratch_specs(code, dtypes, 1)]
        split = len(code.bound_params) + sum(1 for k in order if types[k].is_array) + len(code.scratch)
        if debug:  # the record, after the array arguments and the scratch arrays
            argtypes.insert(split, array_kind(np.dtype(np.int64), 1, True))
        if code.cancel:  # an interchanged loop's cancel word, after them (lang.cuda.loops.cancellable_passes)
            argtypes.insert(split + bool(debug), array_kind(np.dtype(np.int64), 1, True))
        try:
            libraries.append(adapter.cuda_kernel_library(kernel_ns[code.function.name], argtypes, cc, fast_math))
        except Exception as e:
            e.qgraph_task = code.task
            raise
        entries.append(adapter.library_entry(libraries[-1]))
        expected.append(adapter.expected_param_sizes(argtypes))
    if not libraries:
        return [], [], []
    if together:
        modules = adapter.cuda_libraries_ptx(libraries, cc)
    else:
        modules = [ptx for library in libraries for ptx in adapter.cuda_libraries_ptx([library], cc)]
    params = {name: sizes for ptx in modules for name, sizes in ptx_text.ptx_entries(ptx).items()}
    for code, entry, sizes in zip(codes, entries, expected):
        if params.get(entry) != sizes:
            raise QgraphError(f"numba-cuda produced an unexpected kernel parameter layout for task "
                              f"{code.task.index} of {src.name} ({params.get(entry)} != {sizes}); this "
                              f"qgraph release does not support the installed numba-cuda ({toolchain_versions()})")
    if len(modules) == len(codes):
        names = [f"{src.name}_task{code.task.index}.ptx" for code in codes]
    else:
        names = [f"{src.name}_tasks{k or ''}.ptx" for k in range(len(modules))]
    return list(zip(names, modules)), entries, [sum(sizes) for sizes in expected]


def _namespace(tree: ast.AST, src: KernelSource, injected: dict) -> dict:
    return generated.namespace(tree, src.globals, src.closure, injected)
