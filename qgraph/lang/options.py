"""A kernel's options as one value, resolved once: the decorator's argument, else the environment.

`@qgraph.kernel(...)` makes a `KernelOptions` in which every option not given is
`USE_ENVIRONMENT`; `resolved(settings)` fills those from the field of the same name of the
environment's `runtime.Settings`, once per kernel and runtime generation (`Kernel._options_now`).
The resolved value travels as one argument through code generation, compilation and both
launchers. Fields marked `code=True` change the generated code: `code_key()` names them in
every code-cache key. Adding an option: a field here (with `_code` if generated code depends on
it), a decorator argument, and a `Settings` field of the same name if an environment variable
sets its default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


class _UseEnvironment:
    """A kernel option left to its environment variable (shows as such in signatures)."""

    def __repr__(self) -> str:
        return "<from the environment>"


USE_ENVIRONMENT = _UseEnvironment()


def _code(default: object):
    """A field whose value changes the generated code, so it is part of the code-cache key."""
    return field(default=default, metadata={"code": True})


@dataclass(frozen=True)
class KernelOptions:
    """Every per-kernel option; the defaults are the environment's when no variable is set."""

    deterministic: bool = _code(False)  # bit-identical reductions; float scatters rejected
    fast_math: bool = _code(False)  # approximate division and square roots, contraction, FTZ on CUDA
    default_float: str = _code("f64")  # "f32"/"f64": the precision of floats nothing else decides
    debug: str | None = _code(None)  # "bounds" or "nan": a checked specialisation; None: off
    # CUDA: a small 1-D parallel loop summing over one inner loop runs that loop on several threads a
    # body (lang.cuda.lanes; sums in another order than the serial loop's); False: one thread a body
    lanes: bool = _code(True)
    # the runaway guard of device loops (None: none); the CPU runner's code holds it, and the
    # CPU fingerprint covers that code; CUDA reads it from the loop state block
    max_iterations: int | None = 10_000_000
    cuda_graph: bool = False  # calls replay a cached CUDA graph (QGRAPH_GRAPHS=0 still turns graphs off)
    graph_cache_size: int = 16  # graphs kept for the kernel per device (LRU)
    graph_while_host: bool = False  # device loops run as the host do-while even where conditional nodes exist
    # copies of a device loop's body per WHILE pass on CUDA (None: chosen per loop, graphs.unroll.unroll_factor);
    # a loop's own unroll= wins; graphs only, so not a code option
    unroll: int | None = None
    progress: object = False  # the calls' default progress=: True (a tqdm bar), a callback, or False (runtime.progress)
    # elementwise qgraph.repeat loops run as one task looping inside (lang.front.interchange); it changes
    # the tasks themselves, which the code's fingerprint covers, so not a code option
    interchange: bool = True
    # stencil qgraph.repeat loops on CUDA run S passes per launch in shared memory (lang.front.temporal_tiling):
    # True (S chosen, lang.cuda.tiling), an int S, or False; the tiled task's code carries S, so not a code option.
    # On by default: a graph tiles a loop only where its tiles fit one wave (graphs.unroll.MAX_TILED_WAVES),
    # where the fluids solve ran in 0.56x the hand-written graph on an H100 (docs/benchmarks.md, "Temporally tiled")
    temporal_tiling: bool | int = True
    # CPU calls whose arrays (and int arguments) are all smaller, or on one numba thread all under the
    # parallel form's first chunk, run the kernel's serial form (lang.cpu.serial_form): one numba
    # function, compiled several times faster; 0: never.
    # The serial runner's code holds it, which the CPU fingerprint covers, so not a code option
    cpu_serial_below: int = 4096

    def __post_init__(self) -> None:
        """A value no option takes raises here, naming the option, whichever way the options were made."""
        for name in ("deterministic", "fast_math", "graph_while_host", "interchange", "lanes"):
            _check(self, name, lambda v: isinstance(v, bool), TypeError, "True, False or None")
        if not isinstance(self.cuda_graph, bool):
            raise TypeError(f"cuda_graph must be True or False, got {self.cuda_graph!r}")
        _check(self, "max_iterations", lambda v: v is None or _positive(v), ValueError,
               "a positive int or None (no guard)")
        _check(self, "graph_cache_size", _positive, ValueError, "a positive int")
        _check(self, "unroll", lambda v: v is None or _positive(v), ValueError,
               "a positive int (copies of a device loop's body per pass) or None (chosen per loop)")
        _check(self, "temporal_tiling", lambda v: isinstance(v, bool) or _positive(v), TypeError,
               "True (passes per launch chosen), False or a positive int (passes per launch)")
        _check(self, "cpu_serial_below", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
               ValueError, "a non-negative int (elements; 0: the serial form never runs)")
        _check(self, "default_float", lambda v: v in ("f32", "f64"), ValueError, "'f32' or 'f64'")
        _check(self, "debug", lambda v: v in (None, "bounds", "nan"), ValueError, "None, 'bounds' or 'nan'")
        _check(self, "progress", lambda v: isinstance(v, bool) or callable(v), TypeError,
               "True (a progress bar), False or a callback fn(passes, values)")

    def resolved(self, settings) -> KernelOptions:
        """These options with every USE_ENVIRONMENT taken from `settings` (a runtime.Settings)."""
        unset = {f.name: getattr(settings, f.name) for f in dataclasses.fields(self)
                 if getattr(self, f.name) is USE_ENVIRONMENT}
        return dataclasses.replace(self, **unset) if unset else self

    def code_key(self) -> str:
        """The options that change generated code, as text for a code-cache key."""
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self) if f.metadata.get("code"))


class ResolvedOptions:
    """Options resolved from the runtime's settings once per runtime generation (init()/reset() start
    a new one): what a kernel's and a step's calls run with."""

    __slots__ = ("options", "_memo")

    def __init__(self, options: KernelOptions) -> None:
        self.options = options
        self._memo: tuple = (-1, None)  # (runtime generation, the options resolved for it): one value, for threads

    def __call__(self, state) -> KernelOptions:
        """The options for `state` (a runtime.State: its generation and settings)."""
        generation, resolved = self._memo
        if generation != state.generation or resolved is None:
            resolved = self.options.resolved(state.settings)
            self._memo = (state.generation, resolved)
        return resolved

def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check(options: KernelOptions, name: str, valid, error: type, expected: str) -> None:
    value = getattr(options, name)
    if value is not USE_ENVIRONMENT and not valid(value):
        raise error(f"{name} must be {expected}, got {value!r}")


DEFAULT_OPTIONS = KernelOptions()  # what a kernel gets with no argument and no environment variable
