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

from .. import conditional, host_fallback
from ..args.kinds import FlagKind
from ..compiler.compile_signals import interruptible_compile
from ..compiler.cuda_program import build_program, compile_tasks
from ..compiler.numba_adapter import is_compile_error
from ..errors import FallbackWarning
from ..graph_cache import GraphCache
from ..lang.cpu.codegen import counted_loops
from ..lang.flat.view import flat_name
from ..lang.front.interchange import checked_pairs, for_launch
from ..lang.front.regions import RepeatLoop, control_regions, is_root_loop
from ..lang.front.temporal_tiling import TiledTask, tiled, tiled_pairs
from ..lang.options import KernelOptions
from ..runtime import DeviceState
from ..runtime.cancel import CancelWord
from . import cuda_call, outer_capture
from .checks import check_signature, compile_error, flag_params, flag_shape_error, host_bounds
from .cuda_spec import DeviceKernel, EagerRunner, Specialisation, overlap_check
from .debug_report import DeviceRecord, check_failure


class CudaLauncher:
    """Runs a kernel's calls on the CUDA device of the current runtime."""

    def __init__(self, kernel, state, target: DeviceState, options: KernelOptions) -> None:
        self.kernel = kernel
        # elementwise repeat loops interchanged, stencil repeat loops given their tiled task
        self.src = src = tiled(for_launch(kernel._source, options), options)
        self.stats = kernel.stats
        self.target = target
        self.device = target.device
        self.lifetimes = target.lifetimes
        self.settings = state.settings
        self.code_cache = target.code_cache
        self.options = options  # resolved once (Kernel._options_now)
        self._bounds = host_bounds(src)
        self._specs: dict[tuple, Specialisation] = {}
        self._last: list = [None]
        self._flags = flag_params(src)
        self._record = DeviceRecord(self.device) if options.debug else None
        self._capture = outer_capture.CaptureRecorder(self)  # calls on streams other libraries capture
        loops = self._loops = counted_loops(src.body)  # stats.iterations, in this order
        regions = list(control_regions(src.body))
        # the flag of a loop around the whole body: it can run as the host do-while (the fallback)
        self._root_flag = loops[0].flag if is_root_loop(src.body) else None
        self.use_graphs = options.cuda_graph and state.settings.graphs
        self.graphs = GraphCache(options.graph_cache_size, self.device, self._evicted)
        self.while_mode, self.while_reason = None, None
        if regions:
            self.while_mode, self.while_reason = conditional.while_strategy(
                self.device.info.compute_capability, self.device.info.driver_version,
                graphs=self.use_graphs, force_host=options.graph_while_host)
        self._cancel = CancelWord(target) if regions else None  # kernel.cancel(), Ctrl-C (runtime.cancel)
        # what every specialisation here shares, and builds its graphs with
        self._shared = DeviceKernel(target, src.body, src.name, self._bounds, options, self._record,
                                    self.while_mode == "device", state.settings.programmatic_edges,
                                    self._cancel.device_pointer if regions else 0)
        self.stats.used_graph = False
        self.stats.graph_nodes = 0
        self.stats.host_loop = False
        self.stats.cache_size = 0
        self.stats._iterations = self._iterations if loops else None
        self.again = [cuda_call.forgotten(len(src.param_names))]  # the same-arguments fast path's memory
        self.launch = cuda_call.launch_function(self)
        self._strict = None  # strict_launch(), made when a call is first routed here
        self._resolve = None  # resolve(a0, ..., an) -> key, generated for compile()
        self._overlap = overlap_check(src, checked_pairs(src), tiled_pairs(src))  # None without such loops

    def compile(self, args: tuple) -> tuple[str, ...]:
        """Compile (or load from the disk cache) the signature of `args` and load its module, without
        running it; its graph is built by its first call."""
        if self._resolve is None:
            self._resolve = cuda_call.resolve_function(self)
        key = self._resolve(*args)
        self.specialisation(key, args)
        return key

    def inspect(self, args: tuple):
        """The code of the signature of `args` (backends.inspection): compiled afresh, since the PTX
        exists only in a compile; nothing runs and nothing is registered."""
        from . import inspection

        if self._resolve is None:
            self._resolve = cuda_call.resolve_function(self)
        key = self._resolve(*args)
        with self.target.lock:
            flat = check_signature(self.src, key, args, self._bounds, self.options)
            try:
                program = build_program(self.src, key, self.device.info.compute_capability, self.device.link_ptx,
                                        self.code_cache, self.options, flat, fresh=True)
            except Exception as e:
                if is_compile_error(e):
                    raise compile_error(self.src, key, e, getattr(e, "qgraph_task", None)) from e
                raise
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
        return (self.options.max_iterations, self.src.name, root)

    def _flag_error(self, index: int, flag_bytes: bytes) -> TypeError:
        return flag_shape_error(self.src, index, FlagKind.shape_of(flag_bytes))

    def _check_failed(self, spec: Specialisation, words: list[int]) -> None:
        raise check_failure(self.src, spec.sites, words)

    def switch_to(self, spec: Specialisation) -> None:
        """Make `spec` the last call's specialisation (its stats, stats.iterations) unless it is."""
        if spec is not self._last[0]:
            self._switch(spec)

    def adopt_last(self, other: CudaLauncher) -> None:
        """The last call ran as `other`'s (a tape's recording of it): stats.iterations reports that call
        (the next call of this launcher switches back to its own specialisation)."""
        spec = other._last[0]
        if spec is not None:
            self._last[0] = spec
            self.stats.used_graph, self.stats.host_loop = spec.uses_graph, spec.host_loop

    def _switch(self, spec: Specialisation) -> None:
        self._last[0] = spec
        stats = self.stats
        stats.used_graph = spec.uses_graph
        stats.graph_nodes = spec.nodes
        stats.host_loop = spec.host_loop
        stats.num_tasks = sum(not isinstance(tk.task, TiledTask) for tk in spec.kernels)  # the tasks as written
        if spec.graph is not None:
            self.graphs.touch(spec.key)

    # ------------------------------------------------------------------ specialisation

    def specialisation(self, key: tuple, args: tuple) -> Specialisation:
        """The specialisation of signature `key`, compiled now from `args` if new (a step's call
        is recorded, not run: its graph is built from compiled tasks)."""
        spec = self._specs.get(key)
        if spec is None:
            with self.target.lock:
                spec = self._specs.get(key)
                if spec is None:
                    spec = self._specialise(key, args)
        return spec

    def compiled(self, key: tuple) -> Specialisation | None:
        """The specialisation of signature `key` if a call compiled it already."""
        return self._specs.get(key)

    def _specialise(self, key: tuple, args: tuple) -> Specialisation:
        src = self.src
        flat = check_signature(src, key, args, self._bounds, self.options)  # the same checks as on the CPU
        try:
            with interruptible_compile(src.name):
                kernels, debug, from_cache = compile_tasks(src, key, self.device, self.code_cache, self.options, flat)
        except Exception as e:
            if is_compile_error(e):
                raise compile_error(src, key, e, getattr(e, "qgraph_task", None)) from e
            raise
        names = [r.count if isinstance(r, RepeatLoop) else r.flag for r in control_regions(src.body)]
        flags = {name: flat.slots[flat.src.param_names.index(flat_name(name))] for name in names}
        spec = Specialisation(key, kernels, flags, debug.sites if debug is not None else [], self._shared)
        spec.overlap = self._overlap  # graphs check it where their arguments change, eager runs at each call
        self._assign_runner(spec)
        if spec.overlap is not None and not spec.uses_graph:
            spec.run = _checked(spec.run, spec.overlap)
        self._specs[key] = spec
        self.stats.specialisations += 1
        self.stats.cache_loads += from_cache
        return spec

    def _assign_runner(self, spec: Specialisation) -> None:
        """Choose how this specialisation runs; graphs are built on its first call."""
        name = self.src.name
        if self.while_mode == "host":
            self._warn_fallback()
            spec.host_loop = True
            if self._root_flag is None:  # regions: walked on the host, tasks launched one by one
                runs = {tk.task.index: EagerRunner([tk], self._bounds, name).run
                        for tk in spec.kernels}
                spec.host_runner = host_fallback.HostTree(self.target, self.src.body, runs, spec.flags, self._loops,
                                                        self.options.max_iterations, name, self._cancel)
                spec.run = spec.host_runner.run
                return
        if not self.use_graphs:
            eager = spec.eager()
            spec.run = eager.run
            if self.while_mode == "host":
                spec.host_runner = host_fallback.HostLoop(self.target, eager.run, None, spec.flags[self._root_flag],
                                                        self._guard(), self._cancel)
                spec.run = spec.host_runner.run
            return
        spec.uses_graph = True
        spec.run = self._build_runner(spec)

    def _build_runner(self, spec: Specialisation):
        def build_and_run(args, packs, stream):
            self._build(spec, args, packs, stream)
            spec.run(args, packs, stream)
        return build_and_run

    def _build(self, spec: Specialisation, args: tuple, packs: tuple, stream: int):
        """Build the graph of `spec` for a call (replacing any it had) and make it the one `spec` runs."""
        graph = spec.build_graph(args, packs, stream, self.stats)
        graph.on_new_form = lambda args, packs, stream, new_count: self._reform(spec, args, packs, stream, new_count)
        self.stats.builds += 1
        self.stats.build_seconds = graph.build_seconds
        spec.graph = graph
        spec.nodes = graph.kernel_nodes
        self.stats.graph_nodes = graph.kernel_nodes
        run = graph.replay
        if self.while_mode == "host":
            spec.host_runner = host_fallback.HostLoop(self.target, graph.replay, graph,
                                                    spec.flags[self._root_flag], self._guard(), self._cancel)
            run = spec.host_runner.run
        spec.run = run
        self.graphs.add(spec.key, graph)
        self.stats.cache_size = len(self.graphs)
        return graph

    def _reform(self, spec: Specialisation, args: tuple, packs: tuple, stream: int, new_count: bool):
        """A call whose repeat count differs from the one `spec`'s graph was built straight for
        (graph_unroll.Straight; `new_count`), or whose grid changes which temporally tiled loops' tiles
        fit a wave (graph_unroll.tiled_kernels): from now on its repeats keep the WHILE form, where a new
        count is a node update, or its loops run untiled, which suits every grid; the graph is rebuilt
        so once (the old one closed when the device is idle), not at every change back and forth."""
        if new_count:
            spec.straight_counts = False
        else:
            spec.tiling = False
        return self._build(spec, args, packs, stream)

    def cancel(self) -> None:
        """kernel.cancel(): the running device loops end after their current pass (runtime.cancel)."""
        if self._cancel is not None:
            self._cancel.set()

    def loop_passes(self) -> int:
        """The outermost device loop's passes so far, for progress bars (runtime.cancel)."""
        return self._cancel.passes() if self._cancel is not None else 0

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
        if self._cancel is not None:
            self._cancel.close()


def _checked(run, check):
    """`run` after `check(packs)` (an interchanged loop's overlap check): the eager and host-walk runners."""
    def checked_run(args, packs, stream):
        check(packs)
        return run(args, packs, stream)
    return checked_run
