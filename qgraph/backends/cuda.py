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

import dataclasses
import warnings
import weakref

from .. import conditional
from ..args.kinds import FlagKind
from ..capture import outer_capture
from ..compiler.compile_signals import interruptible_compile
from ..compiler.cuda_images import LoadedImages
from ..compiler.cuda_program import build_program, compile_tasks
from ..compiler.numba_adapter import is_compile_error
from ..driver.device import capturing, stream_handle
from ..errors import FallbackWarning
from ..graph_cache import GraphCache
from ..graphs import host_fallback
from ..lang.cpu.codegen import counted_loops
from ..lang.flat.view import flat_name
from ..lang.front.interchange import InterchangedTask, checked_pairs, for_launch
from ..lang.front.regions import RepeatLoop, control_regions, is_root_loop
from ..lang.front.temporal_tiling import TiledTask, tiled, tiled_pairs
from ..lang.front.writes import written_params
from ..lang.options import KernelOptions
from ..runtime import DeviceState
from ..runtime.call_hooks import BoundCall
from ..runtime.cancel import CancelWord, cancelled_error
from . import cuda_call
from .checks import check_signature, compile_error, flag_params, flag_shape_error, host_bounds
from .cuda_runners import GraphRunner, HostLoopRunner, Runner
from .cuda_spec import DeviceKernel, EagerRunner, Specialisation, overlap_check
from .debug_report import DeviceRecord, check_failure
from .extent_checks import extent_check

_WARNED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # kernel -> generation its fallback was warned in


class CudaLauncher:
    """Runs a kernel's calls on the CUDA device of the current runtime."""

    def __init__(self, kernel, state, target: DeviceState, options: KernelOptions) -> None:
        self.kernel = kernel
        # elementwise repeat loops interchanged, stencil repeat loops given their tiled task
        self.src = src = tiled(for_launch(kernel.source, options), options)
        self.stats = kernel.stats
        self.target = target
        self.device = target.device
        self.lifetimes = target.lifetimes
        self.settings = state.settings
        self.generation = state.generation
        self.code_cache = target.code_cache
        self.options = options  # resolved once (Kernel.options_now)
        self._bounds = host_bounds(src)
        self._specs: dict[tuple, Runner] = {}  # signature -> the runner of its specialisation
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
        interchanged = [t for t in src.tasks if isinstance(t, InterchangedTask)]  # each a kernel looping alone
        # kernel.cancel(), Ctrl-C (runtime.cancel)
        self._cancel = CancelWord(target, (src.name, interchanged[0]) if interchanged else None) \
            if regions or interchanged else None
        self._stoppable = loops[0] if loops else interchanged[0] if interchanged else None  # a cancel's error names it
        self._compiling, self._compile_cancelled = 0, False  # calls compiling now; a cancel() came meanwhile
        # what every specialisation here shares, and builds its graphs with
        self._shared = DeviceKernel(target, src.body, src.name, self._bounds, options, self._record,
                                    self.while_mode == "device", state.settings.programmatic_edges,
                                    self._cancel.device_pointer if regions else 0,
                                    self._cancel.abi if interchanged else b"")
        self.stats.used_graph = False
        self.stats.graph_nodes = 0
        self.stats.host_loop = False
        self.stats.cache_size = 0
        self.stats.iteration_counts = self._iterations if loops else None
        self.written = tuple(written_params(src))  # the arrays it writes, by position (Ndarray.version)
        self.again = [cuda_call.forgotten(len(src.param_names))]  # the same-arguments fast path's memory
        self._extents = extent_check(kernel.source, src, options.debug)  # arrays shorter than their loops
        self.launch = cuda_call.launch_function(self)
        self._strict = None  # strict_launch(), made when a call is first routed here
        self._resolve = None  # resolve(a0, ..., an) -> key, generated for compile()
        self._overlap = overlap_check(src, checked_pairs(src), tiled_pairs(src))  # None without such loops

    def resolve(self, args: tuple) -> tuple[tuple, tuple]:
        """(signature, parameter bytes) of a call with every parameter given by `args` (launcher.bind)."""
        if self._resolve is None:
            self._resolve = cuda_call.resolve_function(self)
        return self._resolve(*args)

    def run_bound(self, call: BoundCall) -> None:
        """Run a resolved call the plain way (launcher.dispatch): what the generated launch does after its
        fast paths and its hook, a step a line; tests/test_launcher.py holds the two equal."""
        key, args, packs = call.key, call.args, call.packs
        if self._extents is not None:
            self._extents.check(key, args)
        for k in self._flags:
            if packs[k][FlagKind.shape_field] not in FlagKind.SHAPE_OK:
                raise self._flag_error(k, packs[k])
        self.device.make_current()
        with self.target.lock:  # calls from several threads must not interleave node updates and launches
            self.again[0] = cuda_call.forgotten(len(self.src.param_names))
            stream = self.device.stream_handle if call.stream is None else stream_handle(call.stream)
            if capturing(stream):  # another library captures this stream: the tasks join its graph
                return self._capture.record(call._replace(stream=stream))
            runner = self._specs.get(key) or self._specialise(key, args)
            if runner is not self._last[0]:
                self._switch(runner)
            self.lifetimes.hold(stream, args)  # the arguments live until the queued work completes
            runner.run(args, packs, stream)
            if self.options.debug:  # a debug call waits and reads the record of the checks
                found = self._record.read(stream)
                if found is not None:
                    self._check_failed(runner, found)

    def call_parts(self) -> dict:
        """What the generated launch (backends.cuda_call) calls of this launcher, named in one place."""
        return {"specs": self._specs, "specialise": self._specialise, "switch": self._switch, "last": self._last,
                "flag_error": self._flag_error, "flags": self._flags, "capture": self._capture.record,
                "debug_record": self._record, "check_failed": self._check_failed, "extents": self._extents}

    def generated_functions(self) -> dict:
        """The host functions generated for this launcher so far (kernel.inspect's report)."""
        return {"launch": self.launch, "argument resolution": self._resolve, "loop bounds": self._bounds}

    def compile(self, args: tuple, every_form: bool = False) -> tuple[str, ...]:
        """Compile (or load from the disk cache) the signature of `args` and load its module, without
        running it; its graph is built by its first call. A CUDA signature has one form (`every_form`:
        the CPU's)."""
        if self._resolve is None:
            self._resolve = cuda_call.resolve_function(self)
        key, _ = self._resolve(*args)
        self.specialisation(key, args)
        return key

    def inspect(self, args: tuple):
        """The code of the signature of `args` (backends.inspection): compiled afresh, since the PTX
        exists only in a compile; nothing runs and nothing is registered."""
        from . import inspection

        if self._resolve is None:
            self._resolve = cuda_call.resolve_function(self)
        key, _ = self._resolve(*args)
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
        """Task index -> the driver's attributes of its function, from the program's cubins loaded for the purpose."""
        from .inspection import function_resources

        if not program.entries:
            return {}
        loaded = LoadedImages(self.device, program.images)
        try:
            return {task.index: function_resources(loaded.function(entry))
                    for task, entry in zip(program.codes.tasks, program.entries)}
        finally:
            loaded.unload()

    # ------------------------------------------------------------------ the call path

    def strict_launch(self):
        """The launch of calls routed here from another device's launcher: it routes no further
        (arguments of two devices raise in Kernel._route instead of bouncing)."""
        if self._strict is None:
            self._strict = cuda_call.launch_function(self, strict=True)
        return self._strict

    def _iterations(self) -> tuple[int, ...]:
        """stats.iterations: passes of each device loop in the last call (waits for it)."""
        runner = self._last[0]
        return () if runner is None else runner.iterations(self.device.synchronize)

    def _guard(self) -> tuple:
        root = next((loop for loop in self._loops if getattr(loop, "flag", None) == self._root_flag), None)
        return (self.options.max_iterations, self.src.name, root)

    def _flag_error(self, index: int, flag_bytes: bytes) -> TypeError:
        return flag_shape_error(self.src, index, FlagKind.shape_of(flag_bytes))

    def _check_failed(self, runner: Runner, words: list[int]) -> None:
        raise check_failure(self.src, runner.spec.sites, words)

    def switch_to(self, spec: Specialisation) -> None:
        """Make `spec` the last call's specialisation (its stats, stats.iterations) unless it is."""
        runner = self._specs[spec.key]
        if runner is not self._last[0]:
            self._switch(runner)

    def adopt_last(self, other: CudaLauncher) -> None:
        """The last call ran as `other`'s (a tape's recording of it): stats.iterations reports that call
        (the next call of this launcher switches back to its own specialisation)."""
        runner = other.last_runner()
        if runner is not None:
            self._last[0] = runner
            self.stats.used_graph, self.stats.host_loop = runner.uses_graph, runner.host_loop

    def last_runner(self) -> Runner | None:
        """The runner of the last call's specialisation, or None."""
        return self._last[0]

    def _switch(self, runner: Runner) -> None:
        self._last[0] = runner
        stats = self.stats
        stats.used_graph = runner.uses_graph
        stats.graph_nodes = runner.nodes
        stats.host_loop = runner.host_loop
        stats.num_tasks = sum(not isinstance(tk.task, TiledTask) for tk in runner.spec.kernels)  # as written
        if runner.graph is not None:
            self.graphs.touch(runner.spec.key)

    # ------------------------------------------------------------------ specialisation

    def specialisation(self, key: tuple, args: tuple) -> Specialisation:
        """The specialisation of signature `key`, compiled now from `args` if new (a step's call
        is recorded, not run: its graph is built from compiled tasks)."""
        runner = self._specs.get(key)
        if runner is None:
            with self.target.lock:
                runner = self._specs.get(key)
                if runner is None:
                    runner = self._specialise(key, args)
        return runner.spec

    def compiled(self, key: tuple) -> Specialisation | None:
        """The specialisation of signature `key` if a call compiled it already."""
        runner = self._specs.get(key)
        return None if runner is None else runner.spec

    def specialisations(self) -> tuple[tuple[Specialisation, Runner], ...]:
        """(specialisation, its runner) of every signature compiled here."""
        return tuple((runner.spec, runner) for runner in self._specs.values())

    def _specialise(self, key: tuple, args: tuple) -> Runner:
        src = self.src
        flat = check_signature(src, key, args, self._bounds, self.options)  # the same checks as on the CPU
        self._compiling += 1
        try:
            with interruptible_compile(src.name):
                kernels, debug, from_cache = compile_tasks(src, key, self.device, self.code_cache, self.options, flat)
        except Exception as e:
            if is_compile_error(e):
                raise compile_error(src, key, e, getattr(e, "qgraph_task", None)) from e
            raise
        finally:
            self._compiling -= 1
        names = [r.count if isinstance(r, RepeatLoop) else r.flag for r in control_regions(src.body)]
        flags = {name: flat.slots[flat.src.param_names.index(flat_name(name))] for name in names}
        spec = Specialisation(key, kernels, flags, debug.sites if debug is not None else [], self._shared,
                              self._overlap)  # graphs check overlaps where their arguments change, others each call
        runner = self._specs[key] = self._runner_for(spec)
        self.stats.specialisations += 1
        self.stats.cache_loads += from_cache
        if self._compile_cancelled:  # kernel.cancel() while it compiled: the call stops before its first pass
            self._compile_cancelled = False
            self._cancel.clear()
            raise cancelled_error(self.src.name, self._stoppable, 0)
        return runner

    def _runner_for(self, spec: Specialisation) -> Runner:
        """Choose, once, how this specialisation runs (backends.cuda_runners); graphs are built on its first call."""
        name = self.src.name
        host = self.while_mode == "host"
        if host:
            self._warn_fallback()
            if self._root_flag is None:  # regions: walked on the host, tasks launched one by one
                runs = {tk.task.index: EagerRunner([tk], self._bounds, name).run for tk in spec.kernels}
                return HostLoopRunner(spec, host_fallback.HostTree(self.target, self.src.body, runs, spec.flags,
                                                                   self._loops, self.options.max_iterations, name,
                                                                   self._cancel))
        if not self.use_graphs:
            if host:
                return HostLoopRunner(spec, self._host_loop(spec, spec.eager().run, None))
            return Runner(spec)
        return GraphRunner(spec, self.stats, self.graphs,
                           (lambda replay, graph: self._host_loop(spec, replay, graph)) if host else None)

    def _host_loop(self, spec: Specialisation, run, graph) -> host_fallback.HostLoop:
        """The host do-while loop around the whole body: `run` (a graph's replay or eager launches) per pass."""
        return host_fallback.HostLoop(self.target, run, graph, spec.flags[self._root_flag], self._guard(),
                                      self._cancel)

    def use_cancel_word(self, address: int) -> None:
        """Device loops built from now on watch the word at `address` (0: none) instead of this launcher's
        own (bench/watching.py measures what the check costs)."""
        self._shared = dataclasses.replace(self._shared, cancel_word=address)

    def cancel(self) -> None:
        """kernel.cancel(): the running device loops end after their current pass (runtime.cancel); a
        call still compiling raises LoopCancelled once compiled, before it runs (its loops would clear
        the word as they start)."""
        if self._cancel is not None:
            if self._compiling:
                self._compile_cancelled = True
            self._cancel.set()

    def loop_passes(self) -> int:
        """The outermost device loop's passes so far, for progress bars (runtime.cancel)."""
        return self._cancel.passes() if self._cancel is not None else 0

    def _evicted(self, key: tuple) -> None:
        runner = self._specs.get(key)
        if runner is not None:
            runner.evicted()
        self.stats.cache_size = len(self.graphs)

    def _warn_fallback(self) -> None:
        generation = self.generation
        if _WARNED.get(self.kernel) == generation:  # once per kernel and runtime generation, whichever device
            return
        _WARNED[self.kernel] = generation
        warnings.warn(f"qgraph kernel {self.src.name}: graph_while runs as a host do-while loop because "
                      f"{self.while_reason}", FallbackWarning, stacklevel=6)

    def close(self) -> None:
        """Destroy graphs, then unload the specialisations' modules (after the device is idle)."""
        self.graphs.clear()
        modules = {module for runner in self._specs.values() for tk in runner.spec.kernels for module in tk.modules}
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

