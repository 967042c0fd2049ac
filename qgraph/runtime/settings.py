"""What the environment says, parsed in one place and read by `init()`.

Every switch is parsed by the same rules: case-insensitive, surrounding spaces ignored,
`1/true/on/yes` is on, `0/false/off/no` is off, unset or empty is the default, and anything
else raises (a typo must not turn a mode on). Changing a variable takes effect at the
next `qgraph.init()`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import QgraphError
from ..lang.options import DEFAULT_OPTIONS, USE_ENVIRONMENT
from ..tracebacks import check_mode as check_traceback_mode

__all__ = ["USE_ENVIRONMENT", "Settings", "debug_mode"]  # USE_ENVIRONMENT: kernel options left to the environment

ARCHES = ("cuda", "cpu")
ON = ("1", "true", "on", "yes")
OFF = ("0", "false", "off", "no")


def env_text(environ: Mapping[str, str], name: str, default: str = "") -> str:
    """A variable's value, stripped and lower-cased."""
    return environ.get(name, default).strip().lower()


def switch(environ: Mapping[str, str], name: str, default: bool = True) -> bool:
    """An on/off variable: unset or empty means `default`; 1/true/on/yes and 0/false/off/no
    mean on and off; anything else raises QgraphError naming the variable."""
    text = env_text(environ, name)
    if not text:
        return default
    if text in ON:
        return True
    if text in OFF:
        return False
    raise QgraphError(f"{name}={environ[name]!r}: expected {', '.join(ON)} (on) or {', '.join(OFF)} (off); "
                      f"unset means {'on' if default else 'off'}")


def arch_name(text: str | None, source: str) -> str | None:
    """'cuda' / 'cpu' from any spelling (' CPU ' included); None for unset; else QgraphError."""
    if text is None:
        return None
    name = text.strip().lower()
    if not name:
        return None
    if name not in ARCHES:
        raise QgraphError(f"{source}={text!r}: expected 'cuda' or 'cpu'")
    return name


@dataclass(frozen=True)
class Settings:
    """What the environment variables say, read by init(). The kernel options' defaults are
    lang.options.DEFAULT_OPTIONS (one place), which a kernel's own arguments override."""

    graphs: bool = True  # QGRAPH_GRAPHS=0 turns CUDA graphs off
    graph_while_host: bool = DEFAULT_OPTIONS.graph_while_host  # QGRAPH_GRAPH_WHILE=host forces the host do-while
    cache_dir: str | None = None  # QGRAPH_CACHE_DIR; None when the disk cache is off
    graph_cache_size: int = DEFAULT_OPTIONS.graph_cache_size  # QGRAPH_GRAPH_CACHE_SIZE: graphs per kernel (LRU)
    programmatic_edges: bool = True  # QGRAPH_PDL=0: plain edges between graph kernel nodes
    dump_dir: str | None = None  # QGRAPH_DUMP=<dir>: write every generated source there
    arch: str | None = None  # QGRAPH_ARCH, for init(arch=None)
    deterministic: bool = DEFAULT_OPTIONS.deterministic  # QGRAPH_DETERMINISTIC=1: bit-identical reductions
    fast_math: bool = DEFAULT_OPTIONS.fast_math  # QGRAPH_FAST_MATH=1: fast-math code generation
    default_float: str = DEFAULT_OPTIONS.default_float  # QGRAPH_DEFAULT_FLOAT=float32: where nothing decides
    max_iterations: int | None = DEFAULT_OPTIONS.max_iterations  # QGRAPH_MAX_ITERATIONS: the guard (0: none)
    debug: str | None = DEFAULT_OPTIONS.debug  # QGRAPH_DEBUG=1 ("bounds") or =nan: checked code
    unroll: int | None = DEFAULT_OPTIONS.unroll  # QGRAPH_UNROLL=<n>: device-loop body copies per pass (auto: chosen)
    interchange: bool = DEFAULT_OPTIONS.interchange  # QGRAPH_INTERCHANGE=0: elementwise repeat loops stay loops
    temporal_tiling: bool = DEFAULT_OPTIONS.temporal_tiling  # QGRAPH_TEMPORAL_TILING=0: a launch per stencil pass
    cpu_serial_below: int = DEFAULT_OPTIONS.cpu_serial_below  # QGRAPH_CPU_SERIAL_BELOW: elements (0: never serial)
    lanes: bool = DEFAULT_OPTIONS.lanes  # QGRAPH_LANES=0: one thread a body for every parallel loop (CUDA)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        check_traceback_mode(environ)  # QGRAPH_TRACEBACK: read when an error leaves qgraph, checked here
        mode = env_text(environ, "QGRAPH_GRAPH_WHILE", "auto")
        if mode not in ("auto", "host", "device", ""):
            raise QgraphError(f"QGRAPH_GRAPH_WHILE={mode!r}: expected 'host' (force the host loop) or 'auto'")
        size_text = environ.get("QGRAPH_GRAPH_CACHE_SIZE", "16")
        try:
            size = int(size_text)
            if size < 1:
                raise ValueError
        except ValueError:
            raise QgraphError(f"QGRAPH_GRAPH_CACHE_SIZE={size_text!r}: expected a positive integer") from None
        dump = environ.get("QGRAPH_DUMP", "").strip()
        precision = env_text(environ, "QGRAPH_DEFAULT_FLOAT") or "float64"
        if precision not in ("float32", "float64", "f32", "f64"):
            raise QgraphError(f"QGRAPH_DEFAULT_FLOAT={precision!r}: expected 'float32' or 'float64'")
        return cls(graphs=switch(environ, "QGRAPH_GRAPHS"), graph_while_host=mode == "host",
                   max_iterations=_max_iterations(environ.get("QGRAPH_MAX_ITERATIONS", "10000000")),
                   cache_dir=cache_directory(environ), graph_cache_size=size,
                   programmatic_edges=switch(environ, "QGRAPH_PDL"),
                   dump_dir=_dump_directory(dump),
                   arch=arch_name(environ.get("QGRAPH_ARCH"), "QGRAPH_ARCH"),
                   deterministic=switch(environ, "QGRAPH_DETERMINISTIC", default=False),
                   fast_math=switch(environ, "QGRAPH_FAST_MATH", default=False),
                   default_float="f32" if precision in ("float32", "f32") else "f64",
                   debug=_debug_setting(environ.get("QGRAPH_DEBUG", "")),
                   unroll=_unroll(env_text(environ, "QGRAPH_UNROLL", "auto")),
                   interchange=switch(environ, "QGRAPH_INTERCHANGE", default=DEFAULT_OPTIONS.interchange),
                   temporal_tiling=switch(environ, "QGRAPH_TEMPORAL_TILING", default=DEFAULT_OPTIONS.temporal_tiling),
                   cpu_serial_below=_cpu_serial_below(environ.get("QGRAPH_CPU_SERIAL_BELOW", "")),
                   lanes=switch(environ, "QGRAPH_LANES", default=DEFAULT_OPTIONS.lanes))


def _debug_setting(text: str) -> str | None:
    try:
        return debug_mode(text)
    except ValueError:
        raise QgraphError(f"QGRAPH_DEBUG={text!r}: expected 1 (bounds checks), nan (bounds and finiteness "
                          "checks) or 0") from None


def _unroll(text: str) -> int | None:
    if text in ("auto", ""):
        return None
    if not text.isdigit() or int(text) < 1:
        raise QgraphError(f"QGRAPH_UNROLL={text!r}: expected a positive integer (copies of a device loop's body "
                          "per device pass) or 'auto'")
    return int(text)


INT64_MAX = (1 << 63) - 1  # the compiled code's counters and sizes are 64-bit


def _non_negative(name: str, text: str, meaning: str) -> int:
    """A variable holding a non-negative integer that fits the compiled code's 64-bit words (`_`
    separators allowed); QgraphError naming it otherwise, at init rather than in every compile."""
    try:
        value = int(text.strip().replace("_", ""))
        if value < 0:
            raise ValueError
    except ValueError:
        raise QgraphError(f"{name}={text!r}: expected a non-negative integer ({meaning})") from None
    if value > INT64_MAX:
        raise QgraphError(f"{name}={text!r}: at most {INT64_MAX} (2**63 - 1), the compiled code's 64-bit "
                          f"counters ({meaning})")
    return value


def _dump_directory(text: str) -> str | None:
    """QGRAPH_DUMP: an absolute directory path (made when something is first written there), or None;
    a path that exists and is not a directory is refused at init, naming the variable."""
    if not text:
        return None
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.exists(path) and not os.path.isdir(path):
        raise QgraphError(f"QGRAPH_DUMP={text!r}: {path} exists and is not a directory; name a directory "
                          "(created when the first source is written)")
    return path


def _cpu_serial_below(text: str) -> int:
    if not text.strip():
        return DEFAULT_OPTIONS.cpu_serial_below
    return _non_negative("QGRAPH_CPU_SERIAL_BELOW", text,
                         "elements below which CPU calls run the kernel's serial form; 0: never")


def _max_iterations(text: str) -> int | None:
    return _non_negative("QGRAPH_MAX_ITERATIONS", text, "0 turns the guard off") or None


def cache_directory(environ: Mapping[str, str] = os.environ) -> str | None:
    """The compiled-code cache directory, or None when QGRAPH_CACHE=0 turns it off. QgraphError when
    it cannot be a directory, or when it (or its key) exists and another user owns or can write it."""
    if not switch(environ, "QGRAPH_CACHE"):
        return None
    from ..compiler.cache_keys import check_cache_directory
    from ..compiler.code_cache import check_directory

    explicit = environ.get("QGRAPH_CACHE_DIR")
    if explicit:
        path, source = os.path.abspath(os.path.expanduser(explicit)), f"QGRAPH_CACHE_DIR={explicit!r}"
    else:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        path, source = os.path.join(base, "qgraph"), "QGRAPH_CACHE_DIR is unset"
    check_directory(path, source)  # a file there: say so now, not as a damaged entry at each compile
    check_cache_directory(path, source)  # another user's, or writable by others: refused (compiler.cache_keys)
    return path


def debug_mode(value) -> str | None:
    """The canonical debug mode of a `debug=` option or QGRAPH_DEBUG text: None (off),
    "bounds" (index checks) or "nan" (index checks and finiteness checks)."""
    if value is None or value is False:
        return None
    if value is True:
        return "bounds"
    text = str(value).strip().lower()
    if text in ("",) + OFF:
        return None
    if text in ON + ("bounds",):
        return "bounds"
    if text in ("nan", "finite"):
        return "nan"
    raise ValueError(f"expected True, False, 'nan' (index and finiteness checks) or 0/1, got {value!r}")
