"""Per-arch execution of a kernel call.

`for_kernel` gives each kernel a launcher for the current arch. A launcher resolves the
call's arguments to a specialisation key, finds (or builds) the specialisation and runs
it: on CPU the numba runner; on CUDA eager task launches, a cached graph, a device WHILE
graph or the host do-while fallback.
"""

from __future__ import annotations

import ast
import os
import re

from .arguments import arg_type, resolver_lines, scalar_annotation
from .errors import QgraphError, QgraphSyntaxError
from .frontend import _UNRESOLVED, KernelSource, syntax_error

FLAG_SIGS = ("int32[0d]", "int32[1d]", "int32[1d,strided]")


def for_kernel(kernel, state):
    if state.arch == "cpu":
        return CpuLauncher(kernel, state)
    from .cuda_launcher import CudaLauncher

    return CudaLauncher(kernel, state)


def fixed_scalar_types(src: KernelSource) -> tuple[str | None, ...]:
    """Scalar types fixed by parameter annotations (`dt: float`, `n: qgraph.i32`)."""
    fixed = []
    for p in src.params:
        ann = None
        if p.annotation is not None:
            obj = src.resolve(p.annotation)
            ann = scalar_annotation(obj) if obj is not _UNRESOLVED else None
        fixed.append(ann)
    return tuple(fixed)


def check_flag_type(src: KernelSource, key: tuple[str, ...]) -> int:
    """The flag's position; TypeError unless it is an int32 array of ndim 0 or 1."""
    index = src.param_names.index(src.graph_while)
    if key[index] not in FLAG_SIGS:
        got = key[index]
        raise TypeError(f"graph_while flag '{src.graph_while}' must be an int32 array of shape () or (1,), "
                        f"got {got}; create it with qgraph.ndarray(qgraph.i32, ())")
    return index


def flag_shape_error(src: KernelSource, shape) -> TypeError:
    return TypeError(f"graph_while flag '{src.graph_while}' must be an int32 array of shape () or (1,), "
                     f"got shape {tuple(shape)}")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def compile_error(src: KernelSource, key: tuple[str, ...], error: Exception, task=None) -> QgraphSyntaxError:
    """A numba compile failure as a QgraphSyntaxError naming the user's source line."""
    text = _ANSI.sub("", str(error))
    lines = [ln for ln in text.splitlines() if ln.strip()]
    summary = lines[0] if lines else type(error).__name__
    for ln in lines:  # numba puts the useful sentence after a header line
        if not ln.startswith(("Failed in", "During:", "File", "-", "Use of", "[1]", "No implementation")):
            summary = ln.strip()
            break
    from ._numba_adapter import error_locations

    found = error_locations(error)
    target = os.path.abspath(src.filename)
    last = max((getattr(n, "end_lineno", 0) or 0) for n in ast.walk(src.fn_def))
    # numba lists the failing statement, then the enclosing task and runner lines: in the
    # kernel's own span, the deepest (largest) line is the statement itself.
    user = [n for f, n in found if os.path.abspath(f) == target and src.lineno <= n <= last]
    lineno = max(user) if user else (task.lineno if task is not None else src.lineno)
    signature = ", ".join(f"{n}: {t}" for n, t in zip(src.param_names, key))
    where = f"task {task.index} of kernel {src.name}" if task is not None else f"kernel {src.name}"
    message = (f"cannot compile {where} for ({signature}): {summary}\n"
               f"(compiler said:)\n{text}")
    return syntax_error(message, src.filename, lineno)


def check_bounds(src, key: tuple, bounds, args: tuple) -> None:
    """Evaluate the loop bounds once per specialisation; a failure names the loop's line."""
    if not any(t.parallel for t in src.tasks):
        return
    try:
        bounds(*args)
    except Exception as e:
        lineno = src.lineno
        tb = e.__traceback__
        while tb is not None:  # the bounds function carries the user's file and line numbers
            if tb.tb_frame.f_code.co_name == "_qg_bounds":
                lineno = tb.tb_lineno
            tb = tb.tb_next
        signature = ", ".join(f"{n}: {t}" for n, t in zip(src.param_names, key))
        raise syntax_error(f"kernel {src.name}: a parallel loop's bounds cannot be evaluated for ({signature}): "
                           f"{type(e).__name__}: {e}", src.filename, lineno) from e


def host_bounds(src: KernelSource):
    """The host function evaluating every parallel loop's bounds (codegen.bounds_function)."""
    from .codegen import bounds_function

    ns = dict(src.globals)
    ns.update(src.closure)
    return bounds_function(src, ns)


def is_compile_error(error: Exception) -> bool:
    mod = type(error).__module__ or ""
    return mod.startswith("numba") and not isinstance(error, (QgraphError,))


class CpuLauncher:
    """Runs a kernel's numba runner; numba compiles one overload per signature."""

    def __init__(self, kernel, state) -> None:
        self.kernel = kernel
        self.src = kernel._source
        self.stats = kernel.stats
        self._specs: dict[tuple, object] = {}
        self._programs: dict[frozenset, object] = {}  # by the set of 0-d array parameters
        self._bounds = None
        self._cache_dir = state.settings.cache_dir
        self._flag = None if self.src.graph_while is None else self.src.param_names.index(self.src.graph_while)
        stats = self.stats
        stats.used_graph = False
        stats.graph_nodes = 0
        stats.host_loop = False
        stats.cache_size = 0
        self.launch = self._generate_launch()

    def _generate_launch(self):
        """launch(a0, ..., stream): resolve inline, look the runner up, call it."""
        src = self.src
        n = len(src.param_names)
        ns: dict = {"_get": self._specs.get, "_first_call": self._first_call, "_flag_error": flag_shape_error,
                    "_src": src}
        comma = "," if n == 1 else ""
        values = ", ".join(f"v{k}" for k in range(n))
        lines = resolver_lines(src.param_names, fixed_scalar_types(src), "cpu", ns)
        lines += [f"    key = ({', '.join(f's{k}' for k in range(n))}{comma})",
                  "    runner = _get(key)",
                  "    if runner is None:",
                  f"        return _first_call(key, ({values}{comma}))"]
        if self._flag is not None:
            lines += [f"    if v{self._flag}.shape not in ((), (1,)):",
                      f"        raise _flag_error(_src, v{self._flag}.shape)"]
        lines.append(f"    runner({values})")
        args = ", ".join(f"a{k}" for k in range(n))
        source = f"def launch({args}{', ' if n else ''}stream):\n" + "\n".join(lines) + "\n"
        exec(source, ns)
        return ns["launch"]

    def _first_call(self, key: tuple, values: tuple) -> None:
        if self._flag is not None:
            check_flag_type(self.src, key)
            if values[self._flag].shape not in ((), (1,)):
                raise flag_shape_error(self.src, values[self._flag].shape)
        if self._bounds is None:
            self._bounds = host_bounds(self.src)
        check_bounds(self.src, key, self._bounds, values)  # the same errors as on CUDA
        zero_d = [k for k, sig in enumerate(key) if arg_type(sig).ndim == 0]
        names = frozenset(self.src.param_names[k] for k in zero_d)
        program = self._programs.get(names)
        if program is None:
            from .cpu_backend import CpuProgram

            program = self._programs[names] = CpuProgram(self.src, self._cache_dir, names)
        runner = program.runner
        try:
            runner(*values)
        except Exception as e:
            if is_compile_error(e) and _is_typing_stage(e):
                raise compile_error(self.src, key, e) from e
            raise
        self._specs[key] = runner
        self.stats.specialisations += 1
        self.stats.num_tasks = len(self.src.tasks)

    def close(self) -> None:
        self._specs.clear()
        self._programs.clear()


def _is_typing_stage(error: Exception) -> bool:
    from numba.core import errors

    return isinstance(error, (errors.TypingError, errors.UnsupportedError, errors.LoweringError,
                              errors.NotDefinedError, errors.UnsupportedParforsError,
                              errors.CompilerError))

