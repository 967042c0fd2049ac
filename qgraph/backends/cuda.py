"""CUDA launches of a kernel call: argument resolution, specialisation lookup, dispatch.

The call path is one generated function per kernel (`launch`): resolve the arguments
inline to a key of type strings and a tuple of parameter bytes, look the specialisation
up, run it. Each specialisation gets one runner, chosen once:
- eager: the tasks launched one by one (generated straight-line cuLaunchKernel calls);
- graph: a cached CUDA graph (graph_cache), an instance per recent argument set;
- device loop: a graph with a WHILE node (conditional);
- host loop: the body replayed while the flag read back is non-zero (conditional).
"""

from __future__ import annotations

import warnings

from .. import conditional
from ..args.kinds import FlagKind, arg_type
from ..compiler.compile_signals import interruptible_compile
from ..compiler.cuda_program import TaskKernel, build_program, compile_tasks
from ..compiler.launch_code import block_expr, generate, grid_expr, signature_with_constants, tile_shape
from ..compiler.numba_adapter import is_compile_error
from ..driver.device import driver, kernel_failure
from ..driver.params import ParamBuffer
from ..errors import FallbackWarning
from ..graph_cache import GraphCache, TaskGraph
from ..lang.cpu.codegen import counted_loops
from ..lang.flat.view import flat_name, flat_source
from ..lang.front.regions import RepeatLoop, control_regions, is_root_loop
from ..runtime import DeviceState
from . import cuda_call, outer_capture
from .checks import (
    check_bounds,
    check_deterministic,
    check_flag_types,
    check_outside_values,
    check_repeat_counts,
    compile_error,
    default_float,
    flag_params,
    flag_shape_error,
    host_bounds,
    is_deterministic,
    is_fast_math,
    max_iterations,
)
from .debug_report import DeviceRecord, check_failure, kernel_debug_mode

_BOUNDS_MEMO = 16  # eager calls remember the loop bounds of this many recent argument sets


class EagerRunner:
    """Launches a specialisation's tasks one by one on the call's stream."""

    def __init__(self, kernels: list[TaskKernel], bounds, name: str) -> None:
        self.kernels = kernels
        self.buffers = [ParamBuffer(tk.param_size) for tk in kernels]
        d = driver()
        # _keep: the driver reads each buffer's `extra` array by address; it lives as long as `run`
        constants = {"_bounds": bounds, "_memo": {}, "_tile": tile_shape,
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


class _Spec:
    """One compiled specialisation and how it runs now."""

    __slots__ = ("key", "kernels", "run", "graph", "uses_graph", "host_loop", "nodes", "flags", "host_runner",
                 "sites", "captured_run", "again")

    def __init__(self, key: tuple, kernels: list[TaskKernel], flags: dict) -> None:
        self.key = key
        self.kernels = kernels
        self.flags = flags  # device-loop flag -> (argument, struct leaf or None): where its pointer is
        self.run = None
        self.graph = None
        self.uses_graph = False
        self.host_loop = False
        self.nodes = 0
        self.host_runner = None  # the conditional.HostLoop of the host fallback
        self.sites = []  # debug mode: what each check's number means (lang.lower.debug_checks)
        self.captured_run = None  # eager launches into another library's stream capture (outer_capture)
        # the same-arguments fast path may replay it (cuda_call): not with struct or vector arguments,
        # which can change behind the same object
        self.again = not any(getattr(arg_type(s), "is_struct", False) or getattr(arg_type(s), "is_vector", False)
                             for s in key)


class CudaLauncher:
    """Runs a kernel's calls on the CUDA device of the current runtime."""

    def __init__(self, kernel, state, target: DeviceState) -> None:
        self.kernel = kernel
        self.src = src = kernel._source
        self.stats = kernel.stats
        self.target = target
        self.device = target.device
        self.lifetimes = target.lifetimes
        self.settings = state.settings
        self.code_cache = target.code_cache
        self._bounds = None
        self._specs: dict[tuple, _Spec] = {}
        self._last: list = [None]
        self._flags = flag_params(src)
        self._deterministic = is_deterministic(kernel, state.settings)
        self._fast_math = is_fast_math(kernel, state.settings)
        self._default_float = default_float(kernel, state.settings)
        self._max_iterations = max_iterations(kernel, state.settings)
        self._debug = kernel_debug_mode(kernel, state.settings)
        self._record = DeviceRecord(self.device) if self._debug else None
        self._capture = outer_capture.CaptureRecorder(self, EagerRunner)  # calls on streams other libraries capture
        loops = self._loops = counted_loops(src.body)  # stats.iterations, in this order
        regions = list(control_regions(src.body))
        # the flag of a loop around the whole body: it can run as the host do-while (the fallback)
        self._root_flag = loops[0].flag if is_root_loop(src.body) else None
        self.use_graphs = kernel.cuda_graph and state.settings.graphs
        capacity = kernel.graph_cache_size or state.settings.graph_cache_size
        self.graphs = GraphCache(capacity, self.device, self._evicted)
        self.while_mode, self.while_reason = None, None
        if regions:
            self.while_mode, self.while_reason = conditional.while_strategy(
                self.device.info.compute_capability, self.device.info.driver_version,
                graphs=self.use_graphs,
                force_host=state.settings.graph_while_host or getattr(kernel, "_force_host_loop", False))
        self.stats.used_graph = False
        self.stats.graph_nodes = 0
        self.stats.host_loop = False
        self.stats.cache_size = 0
        self.stats._iterations = self._iterations if loops else None
        self.again = [cuda_call.forgotten(len(src.param_names))]  # the same-arguments fast path's memory
        self.launch = cuda_call.launch_function(self)
        self._strict = None  # strict_launch(), made when a call is first routed here
        self._resolve = None  # resolve(a0, ..., an) -> key, generated for compile()

    def compile(self, args: tuple) -> tuple[str, ...]:
        """Compile (or load from the disk cache) the signature of `args` and load its module, without
        running it; its graph is built by its first call."""
        if self._resolve is None:
            self._resolve = cuda_call.resolve_function(self)
        key = self._resolve(*args)
        with self.target.lock:
            if key not in self._specs:
                self._specialise(key, args)
        return key

    def inspect(self, args: tuple):
        """The code of the signature of `args` (backends.inspection): compiled afresh, since the PTX
        exists only in a compile; nothing runs and nothing is registered."""
        from . import inspection

        if self._resolve is None:
            self._resolve = cuda_call.resolve_function(self)
        key = self._resolve(*args)
        with self.target.lock:
            flat = self._checked(key, args)
            try:
                program = build_program(self.src, key, self.device.info.compute_capability, self.device.link_ptx,
                                        self.code_cache, self._deterministic, self._fast_math, self._default_float,
                                        flat, self._debug, fresh=True)
            except Exception as e:
                if is_compile_error(e):
                    raise compile_error(self.src, key, e, getattr(e, "qgraph_task", None)) from e
                raise
            check_repeat_counts(flat.src, flat.key)
            resources = self._resources(program)
        return inspection.cuda_code(self.kernel, key, program, resources, inspection.host_sources(self.kernel, self))

    def _resources(self, program) -> dict[int, dict[str, int]]:
        """Task index -> the driver's attributes of its function, from the program's cubin loaded for the purpose."""
        from .inspection import function_resources

        if not program.entries:
            return {}
        module = self.device.load_module(program.cubin)
        try:
            return {task.index: function_resources(self.device.function(module, entry))
                    for task, entry in zip(program.codes.tasks, program.entries)}
        finally:
            self.device.unload_module(module)

    # ------------------------------------------------------------------ the call path

    def strict_launch(self):
        """The launch of calls routed here from another device's launcher: it routes no further
        (arguments of two devices raise in Kernel._route instead of bouncing)."""
        if self._strict is None:
            self._strict = cuda_call.launch_function(self, strict=True)
        return self._strict

    def _iterations(self) -> tuple[int, ...]:
        """stats.iterations: passes of each device loop in the last call (waits for it)."""
        spec = self._last[0]
        if spec is None:
            return ()
        if spec.host_loop:
            passes = spec.host_runner.passes
            return tuple(passes) if isinstance(passes, list) else (passes,)
        if spec.graph is None:
            return ()
        self.device.synchronize()
        return spec.graph.loop_passes()

    def _guard(self) -> tuple:
        root = next((loop for loop in self._loops if getattr(loop, "flag", None) == self._root_flag), None)
        return (self._max_iterations, self.src.name, root)

    def _flag_error(self, index: int, flag_bytes: bytes) -> TypeError:
        return flag_shape_error(self.src, index, FlagKind.shape_of(flag_bytes))

    def _check_failed(self, spec: _Spec, words: list[int]) -> None:
        raise check_failure(self.src, spec.sites, words)

    def _switch(self, spec: _Spec) -> None:
        self._last[0] = spec
        stats = self.stats
        stats.used_graph = spec.uses_graph
        stats.graph_nodes = spec.nodes
        stats.host_loop = spec.host_loop
        stats.num_tasks = len(spec.kernels)
        if spec.graph is not None:
            self.graphs.touch(spec.key)

    # ------------------------------------------------------------------ specialisation

    def _checked(self, key: tuple, args: tuple):
        """The flat view of a new signature, after the checks a call makes before compiling it."""
        src = self.src
        if self._bounds is None:
            self._bounds = host_bounds(src)
        check_bounds(src, key, self._bounds, args)
        check_outside_values(src, key)
        flat = flat_source(src, [arg_type(s) for s in key], self._default_float)
        check_flag_types(flat.src, flat.key)  # every flag, struct fields included
        if self._deterministic:
            check_deterministic(flat.src, flat.key)
        return flat

    def _specialise(self, key: tuple, args: tuple) -> _Spec:
        src = self.src
        flat = self._checked(key, args)
        try:
            with interruptible_compile(src.name):
                kernels, debug, from_cache = compile_tasks(src, key, self.device, self.code_cache,
                                                           self._deterministic, self._fast_math,
                                                           self._default_float, flat, self._debug)
        except Exception as e:
            if is_compile_error(e):
                raise compile_error(src, key, e, getattr(e, "qgraph_task", None)) from e
            raise
        check_repeat_counts(flat.src, flat.key)
        names = [r.count if isinstance(r, RepeatLoop) else r.flag for r in control_regions(src.body)]
        flags = {name: flat.slots[flat.src.param_names.index(flat_name(name))] for name in names}
        spec = _Spec(key, kernels, flags)
        if debug is not None:
            spec.sites = debug.sites
            for tk in kernels:
                tk.record = self._record.abi
        self._assign_runner(spec)
        self._specs[key] = spec
        self.stats.specialisations += 1
        self.stats.cache_loads += from_cache
        return spec

    def _assign_runner(self, spec: _Spec) -> None:
        """Choose how this specialisation runs; graphs are built on its first call."""
        name = self.src.name
        if self.while_mode == "host":
            self._warn_fallback()
            spec.host_loop = True
            if self._root_flag is None:  # regions: walked on the host, tasks launched one by one
                runs = {tk.task.index: EagerRunner([tk], self._bounds, name).run
                        for tk in spec.kernels}
                spec.host_runner = conditional.HostTree(self.target, self.src.body, runs, spec.flags, self._loops,
                                                        self._max_iterations, name)
                spec.run = spec.host_runner.run
                return
        if not self.use_graphs:
            eager = EagerRunner(spec.kernels, self._bounds, name)
            spec.run = eager.run
            if self.while_mode == "host":
                spec.host_runner = conditional.HostLoop(self.target, eager.run, None, spec.flags[self._root_flag],
                                                        self._guard())
                spec.run = spec.host_runner.run
            return
        spec.uses_graph = True
        spec.run = self._build_runner(spec)

    def _build_runner(self, spec: _Spec):
        def build_and_run(args, packs, stream):
            graph = TaskGraph(self.target, spec.kernels, self.src.body, self._bounds, self.stats, self.src.name,
                              args, packs, stream, spec.flags, device_loops=self.while_mode == "device",
                              programmatic=self.settings.programmatic_edges, max_iterations=self._max_iterations,
                              stop_word=self._record.pointer if self._record is not None else 0)
            self.stats.builds += 1
            self.stats.build_seconds = graph.build_seconds
            spec.graph = graph
            spec.nodes = graph.kernel_nodes
            self.stats.graph_nodes = graph.kernel_nodes
            run = graph.replay
            if self.while_mode == "host":
                spec.host_runner = conditional.HostLoop(self.target, graph.replay, graph,
                                                        spec.flags[self._root_flag], self._guard())
                run = spec.host_runner.run
            spec.run = run
            self.graphs.add(spec.key, graph)
            self.stats.cache_size = len(self.graphs)
            run(args, packs, stream)
        return build_and_run

    def _evicted(self, key: tuple) -> None:
        spec = self._specs.get(key)
        if spec is not None:
            spec.graph = None
            spec.run = self._build_runner(spec)
        self.stats.cache_size = len(self.graphs)

    def _warn_fallback(self) -> None:
        if getattr(self.kernel, "_fallback_warned", False):
            return
        self.kernel._fallback_warned = True
        warnings.warn(f"qgraph kernel {self.src.name}: graph_while runs as a host do-while loop because "
                      f"{self.while_reason}", FallbackWarning, stacklevel=6)

    def close(self) -> None:
        """Destroy graphs, then unload the specialisations' modules (after the device is idle)."""
        self.graphs.clear()
        modules = {tk.module for spec in self._specs.values() for tk in spec.kernels if tk.module is not None}
        self._specs.clear()
        self._last[0] = None
        self.again[0] = cuda_call.forgotten(len(self.src.param_names))
        if modules:
            self.device.synchronize()  # eager launches may still be queued
            for module in modules:
                self.device.unload_module(module)
        self._capture.close()
        if self._record is not None:
            self._record.close()
