"""@qgraph.kernel and @qgraph.func: the user-facing objects and the call entry point.

A kernel call is a pipeline (as in Triton's jit): bind arguments (a generated function
with the kernel's own signature) -> the arch's launcher, which resolves the arguments to a
specialisation key, looks the specialisation up, and launches it.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType

from . import launcher, runtime  # launcher: registers what init("cuda") loads (launcher.load_cuda_backend)
from .args.binder import bind_class
from .dtypes import float_precision
from .errors import QgraphError
from .lang import roles
from .lang.front import builtins as lang
from .lang.front import globals_used, reports
from .lang.front import parse as frontend
from .lang.front.regions import control_regions
from .lang.options import USE_ENVIRONMENT, KernelOptions, ResolvedOptions
from .runtime.history import History, Reports
from .runtime.random_state import rng_state
from .runtime.settings import debug_mode
from .tracebacks import entry_point


@dataclass(slots=True)  # the fast paths count replays: a slot is the cheapest attribute to bump
class KernelStats:
    """What a kernel did: graphs built and replayed, and the shape of its last call."""

    builds: int = 0  # CUDA graphs built, total
    replays: int = 0  # graph launches, total
    cache_size: int = 0  # graphs cached now
    used_graph: bool = False  # the last call ran a graph
    graph_nodes: int = 0  # kernel nodes in the last call's graph (0 if none)
    num_tasks: int = 0  # offloaded tasks of the last compiled specialisation
    host_loop: bool = False  # the last call ran the host do-while fallback
    specialisations: int = 0  # argument type signatures compiled, total
    cache_loads: int = 0  # of those, loaded from the disk compile cache instead of compiled
    parallel_forms: int = 0  # CPU: signatures compiled in their parallel form (lang.cpu.serial_form)
    node_updates: int = 0  # in-place kernel-node parameter updates, total
    build_seconds: float = 0.0  # wall time of the last graph build (compile excluded)
    iteration_counts: object = field(default=None, repr=False, compare=False)  # the launcher sets it: () -> passes

    @property
    def iterations(self) -> tuple[int, ...]:
        """Passes of each device loop in the last call (outermost first; nested loops: all their
        entries together). Read when asked: on CUDA this waits for the call to finish."""
        return self.iteration_counts() if self.iteration_counts is not None else ()


class Func:
    """A helper callable from kernels (inlined by the backend compiler) and from Python."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn  # the Python function: called from Python, its defaults read by the flattener
        self.source = frontend.parse_func(fn)
        functools.update_wrapper(self, fn)
        self.custom_adjoint: Func | None = None  # set by `.adjoint`; the adjoint generator calls it

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    @entry_point  # a misfit adjoint's error ends at the user's decoration
    def adjoint(self, fn: Callable) -> Func:
        """Decorator giving this helper its adjoint, used instead of differentiating the body (a closed
        form, a stabilised or straight-through gradient): `fn(*inputs, adj_ret)` returns one adjoint per
        input (docs/differentiable.md#custom-adjoints). Returns the adjoint as a Func."""
        from .autodiff.adjoint_calls import forget_adjoints
        from .lang.adjoint.custom import custom_adjoint

        self.custom_adjoint = custom_adjoint(self, fn, Func)
        forget_adjoints()  # gradients made before it differentiated the body: remade on next use
        return self.custom_adjoint

    def __repr__(self) -> str:
        return f"<qgraph.func {self.__qualname__}>"


class Kernel:
    """A compiled-on-first-call kernel. Call it like the function; add `stream=` on CUDA."""

    def __init__(self, fn: Callable, source: frontend.KernelSource, options: KernelOptions) -> None:
        self._fn = fn
        self.source = source
        self.options = options  # as decorated: USE_ENVIRONMENT where the environment decides
        self._options_now = ResolvedOptions(options)
        self.stats = KernelStats(num_tasks=len(self.source.tasks))
        self._launchers: dict[str, object] = {}  # per target ("cpu", "cuda:0", ...)
        self._strict: dict = {}  # CudaDevice -> its launcher's strict launch (hop)
        # kernels running this one's calls for it (a tape's recording copy, the adjoint): cancel() reaches them
        self._derived: weakref.WeakSet = weakref.WeakSet()
        names = [p.name for p in source.params]
        self._rng_at = names.index(globals_used.RNG_STATE) if globals_used.RNG_STATE in names else None
        self._reports = Reports(source.qualname, source.reports) if source.reports is not None else None
        functools.update_wrapper(self, fn)
        # (after the function's __dict__ is copied) what the binder (args.binder) reads on every call:
        # the attached target's launch, and the runtime generation it was attached in (init()/reset()
        # bump it: the next call attaches again)
        self.launch = None
        self.generation = -1
        runtime.STATE.kernels.add(self)

    @property
    def cuda_graph(self) -> bool:
        """Whether calls run a cached CUDA graph (as decorated; QGRAPH_GRAPHS=0 still turns graphs off)."""
        return self.options.cuda_graph

    @property
    def graph_while(self) -> str | None:
        """The parameter `graph_while=` names, or None."""
        return self.source.graph_while

    # the decorator's settings as docs/api.md names them: None where the environment decides
    graph_cache_size = property(lambda self: _given(self.options.graph_cache_size))
    deterministic = property(lambda self: _given(self.options.deterministic))
    fast_math = property(lambda self: _given(self.options.fast_math))
    default_float = property(lambda self: _given(self.options.default_float))
    max_iterations = property(lambda self: self.options.max_iterations)  # USE_ENVIRONMENT, None or an int
    debug = property(lambda self: None if self.options.debug is USE_ENVIRONMENT
                     else self.options.debug or False)  # "bounds", "nan", False (off) or None

    def options_now(self, state=None) -> KernelOptions:
        """The options with the environment's defaults filled in: resolved once per runtime generation."""
        return self._options_now(runtime.STATE if state is None else state)

    @property
    def history(self) -> History:
        """What the last call's qgraph.report statements wrote: `history["residual"]` is an array of
        (pass, value) rows, read live while a device loop runs (docs/watching.md)."""
        return History(self.source.qualname, self._reports)

    def launch_watched(self, progress, args: tuple, stream) -> None:
        """A call with a progress bar or callback (the binder's `progress=`; runtime.progress)."""
        from .runtime.progress import watch_call

        watch_call(self, progress, args, stream)

    def cancel(self) -> None:
        """Stop this kernel's running device loops at the end of their current pass, from any thread:
        the call's sync raises qgraph.LoopCancelled naming the loop and pass (CUDA; docs/watching.md)."""
        for found in list(self._launchers.values()):
            stop = getattr(found, "cancel", None)
            if stop is not None:
                stop()
        for derived in list(self._derived):
            derived.cancel()

    def loop_passes(self) -> int:
        """The passes so far of the running call's outermost device loop (progress bars), its own or
        those of a kernel running the call for it (a tape's recording copy)."""
        found = [launcher.loop_passes() for launcher in list(self._launchers.values())
                 if hasattr(launcher, "loop_passes")]
        found += [derived.loop_passes() for derived in list(self._derived)]
        return max(found, default=0)

    @property
    def tasks(self) -> tuple[frontend.Task, ...]:
        """The offloaded tasks, in launch order."""
        return self.source.tasks

    def attach(self) -> None:
        """Bind to the current runtime generation: the launcher of this thread's current target
        (once, whichever thread calls first; calls with arrays elsewhere are routed, see route)."""
        with _ATTACH_LOCK:
            state = runtime.ensure_init()
            if self.generation == state.generation and self.launch is not None:
                return
            if self.generation != state.generation:
                self._close_launchers()
            self.launch = self._launcher_on(state.current()).launch
            self.generation = state.generation

    def _launcher_on(self, target):
        """The launcher of `target` (a runtime DeviceState or CpuState), made on first use."""
        found = self._launchers.get(target.key)
        if found is None:
            with _ATTACH_LOCK:
                found = self._launchers.get(target.key)
                if found is None:
                    state = runtime.STATE
                    found = self._launchers[target.key] = launcher.for_kernel(self, state, target,
                                                                              self.options_now(state))
        return found

    def _call_target(self, args: tuple):
        """(target, args) of a call: the device all its arrays live on (ValueError naming them
        when they disagree), else this thread's current one; the implicit random-number state
        is that device's."""
        from .args.devices import call_devices
        from .backends.checks import display_names

        state = runtime.STATE
        src = self.source
        rng = self._rng_at
        ordinal = call_devices(display_names(src), args, rng, f"kernel {src.qualname}")
        target = state.current() if ordinal is None else state.target_for(ordinal)
        if rng is not None and args[rng] is not rng_state(target):
            args = args[:rng] + (rng_state(target),) + args[rng + 1:]
        return target, args

    @property
    def launchers(self) -> MappingProxyType:
        """This kernel's launchers by target key ("cpu", "cuda:0", ...), made on first use (read-only)."""
        return MappingProxyType(self._launchers)

    def launch_values(self, *values):
        """A call with every parameter given by position, implicit ones included, then the stream: the
        launch path without the binder (the adjoint's and the tape's own calls, watched calls)."""
        if self.generation != runtime.STATE.generation:
            self.attach()
        return self.launch(*values)

    def hop(self, device):
        """The strict launch on CudaDevice `device`: where a call goes whose first array lives
        there while the bound launcher is another device's (one dict lookup after the first)."""
        launch = self._strict.get(device)
        if launch is None:
            target = runtime.STATE.target_for(device.info.ordinal)
            launch = self._strict[device] = self._launcher_on(target).strict_launch()
        return launch

    def route(self, args: tuple, stream, strict: bool = False):
        """A call with an argument on another device than its launcher's (a foreign array, a
        struct, the random-number state of another device): find the one device of all its
        arrays and run it there. From a strict launch the arguments must have changed (the
        random-number state): anything else would bounce, so it is a bug, said as one."""
        target, routed = self._call_target(args)
        if strict and routed is args:
            raise QgraphError(f"kernel {self.source.qualname}: a call routed to {target.key} found an argument "
                              "on another device that the checks did not see (a qgraph bug; please report it)")
        return self._launcher_on(target).strict_launch()(*routed, stream)

    def compile_values(self, *args) -> tuple[str, ...]:
        """The signature of `args`, compiled by the launcher of their device as a call needs it (the
        adjoint's and the interop's plans ask it of kernels they run)."""
        launcher, args = self.launcher_for(args)
        return launcher.compile(args)

    def precompile_values(self, *args) -> tuple[str, ...]:
        """compile(): as compile_values, and every form a later call of the signature may run (the CPU's
        parallel form too, also after a call with small arrays compiled the serial form alone)."""
        launcher, args = self.launcher_for(args)
        return launcher.compile(args, every_form=True)

    def inspect_values(self, *args):
        """inspect(): the launcher of the arguments' device reports the code of their signature."""
        launcher, args = self.launcher_for(args)
        return launcher.inspect(args)

    def grad_values(self, *args):
        """grad(): the adjoint kernel of the arrays with gradients among `args`, run on them."""
        from .autodiff.adjoint_calls import run_adjoint

        run_adjoint(self, args)

    @entry_point
    def adjoint(self, fn: Callable | None = None):
        """Custom adjoints are for helpers: raises, saying so (a kernel's adjoint is generated)."""
        raise QgraphError(f"kernel {self.__name__}: .adjoint gives a @qgraph.func helper its custom adjoint; a "
                          "kernel's adjoint is generated (kernel.grad, qgraph.Tape). Move the code whose gradient you "
                          "give into a @qgraph.func, decorate its adjoint with @<helper>.adjoint and call the helper "
                          "from the kernel")

    def with_source(self, source: frontend.KernelSource) -> Kernel:
        """A kernel of another source with this one's options (the adjoint, lang.adjoint)."""
        derived = Kernel(self._fn, source, self.options)
        self._derived.add(derived)
        return derived

    def launcher_for(self, args: tuple) -> tuple:
        """(launcher, args) of a call with `args` made outside the call path (compile, inspect)."""
        self.attach()
        if runtime.STATE.arch != "cuda":
            return self._launcher_on(runtime.STATE.target), args
        target, args = self._call_target(args)
        return self._launcher_on(target), args

    def _close_launchers(self) -> None:
        for found in self._launchers.values():
            found.close()
        self._launchers.clear()
        self._strict.clear()

    def variant(self, **changes) -> Kernel:
        """The same kernel with some options changed (graphs on or off, for side-by-side benchmarks)."""
        return type(self)(self._fn, self.source, dataclasses.replace(self.options, **changes))

    def release(self) -> None:
        """Free compiled code, graphs and buffers (init/reset)."""
        self._close_launchers()
        self.launch = None
        self.generation = -1
        self.stats = KernelStats(num_tasks=len(self.source.tasks))

    def __repr__(self) -> str:
        mode = f"graph_while={self.graph_while!r}" if self.graph_while else f"cuda_graph={self.options.cuda_graph}"
        return f"<qgraph.kernel {self.__qualname__} ({len(self.tasks)} tasks, {mode})>"


roles.mark(Func, roles.FUNC)
roles.mark(Kernel, roles.KERNEL)

def _given(value: object) -> object:
    """An option's value as decorated: None where it was left to the environment."""
    return None if value is USE_ENVIRONMENT else value
_ATTACH_LOCK = threading.RLock()  # kernels attach to the runtime once, whichever thread calls first


@entry_point
def kernel(fn: Callable | None = None, *, cuda_graph: bool = False, graph_while: str | None = None,
           graph_cache_size: int | None = None, deterministic: bool | None = None, fast_math: bool | None = None,
           default_float=None, max_iterations=USE_ENVIRONMENT, debug: bool | str | None = None,
           unroll=USE_ENVIRONMENT, interchange: bool | None = None, progress=False, temporal_tiling=None,
           cpu_serial_below: int | None = None, lanes: bool | None = None):
    """Compile a function's top-level statements into offloaded tasks.

    `cuda_graph=True` captures a call's tasks into a cached CUDA graph; `graph_while="flag"`
    (implies cuda_graph) repeats the body on the device while the int32 `flag` is non-zero.
    `graph_cache_size` bounds the graphs kept for this kernel (default QGRAPH_GRAPH_CACHE_SIZE).
    `deterministic=True` makes every loop-invariant reduction bit-identical from run to run (and
    rejects float scatters, which cannot be); the default is QGRAPH_DETERMINISTIC.
    `fast_math=True` allows approximate division and square roots, contraction and reassociation,
    and flushes float32 denormals on CUDA (QGRAPH_FAST_MATH).
    `default_float=qgraph.f32` computes in float32 where nothing else decides the precision
    (only Python numbers and integers meet); the default is QGRAPH_DEFAULT_FLOAT (float64).
    `max_iterations=n` raises QgraphError for a device loop n passes long with its flag still set
    (the runaway guard; None: off; QGRAPH_MAX_ITERATIONS).
    `debug=True` compiles a bounds-checked specialisation (an index out of bounds raises IndexError
    naming the line, array, index and shape when the call completes; on CUDA every call then waits
    for the device); `debug="nan"` also checks every float stored is finite. Default QGRAPH_DEBUG.
    `unroll=`, `interchange=`, `temporal_tiling=` (device and repeat loops), `progress=` (the calls'
    default), `cpu_serial_below=` (the CPU's serial form) and `lanes=` (CUDA: an inner sum of a small
    parallel loop on several threads a body): docs/api.md, with their QGRAPH_* defaults."""
    if graph_while is not None and not isinstance(graph_while, str):
        raise TypeError(f"graph_while must be a parameter name (str), got {graph_while!r}")
    precision = None if default_float is None else float_precision(default_float, "default_float")
    try:
        debug_setting = USE_ENVIRONMENT if debug is None else debug_mode(debug)
    except ValueError as e:
        raise ValueError(f"debug: {e}") from None
    given = {"deterministic": deterministic, "fast_math": fast_math, "default_float": precision,
             "graph_cache_size": graph_cache_size, "interchange": interchange, "temporal_tiling": temporal_tiling,
             "cpu_serial_below": cpu_serial_below, "lanes": lanes}
    # checked as it is made (KernelOptions names a bad value); None: the environment decides
    options = KernelOptions(**{name: USE_ENVIRONMENT if value is None else value for name, value in given.items()},
                            debug=debug_setting, max_iterations=max_iterations, cuda_graph=cuda_graph,
                            graph_while_host=USE_ENVIRONMENT, unroll=unroll, progress=progress)

    @entry_point
    def wrap(f: Callable) -> Kernel:
        if isinstance(f, (Kernel, Func)):
            raise TypeError(f"{f!r} is already decorated")
        if not callable(f) or not hasattr(f, "__code__"):
            raise TypeError(f"@qgraph.kernel decorates a Python function, got {f!r}")
        source = frontend.parse_kernel(f, graph_while, lang.ndrange)
        source = globals_used.with_implicit(f, source)
        source, _ = reports.with_reports(source, "_qg_self._reports.start()", "_qg_self._reports.state")
        regions = graph_while is not None or any(True for _ in control_regions(source.body))  # imply cuda_graph
        if progress and not regions:
            raise TypeError(f"kernel {source.qualname}: progress= shows the progress of device loops; it has none")
        cls = bind_class(Kernel, source, f, progress, {"_qg_state": runtime.STATE, "_qg_rng_state": rng_state})
        return cls(f, source, dataclasses.replace(options, cuda_graph=cuda_graph or regions))

    return wrap if fn is None else wrap(fn)


@entry_point
def compile(kernel: Kernel, *example_args, **example_kwargs) -> tuple[str, ...]:
    """Compile and cache `kernel` for the types of the example arguments (bound as in a call)
    without running it, so that a later process's first call loads it from the compile
    cache; returns the signature's type texts (as error messages print them)."""
    if not isinstance(kernel, Kernel):
        raise TypeError(f"qgraph.compile takes a @qgraph.kernel, got {kernel!r}")
    return kernel.compile(*example_args, **example_kwargs)


@entry_point
def func(fn: Callable) -> Func:
    """Mark a helper function callable from kernels (compiled inline for each backend)."""
    if not callable(fn) or not hasattr(fn, "__code__"):
        raise TypeError(f"@qgraph.func decorates a Python function, got {fn!r}")
    return Func(fn)
