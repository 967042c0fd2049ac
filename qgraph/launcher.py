"""Per-arch execution of a kernel call.

`for_kernel` gives each kernel a launcher for the current arch. A launcher resolves the
call's arguments to a specialisation key, finds (or builds) the specialisation and runs
it: on CPU the numba runner; on CUDA eager task launches, a cached graph, a device WHILE
graph or the host do-while fallback.
"""

from __future__ import annotations

import os
import re

import numpy as np

from .arguments import arg_type, make_resolver, scalar_annotation
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


_NUMBA_LOCATION = re.compile(r'File "([^"]+)", line (\d+)')


def compile_error(src: KernelSource, key: tuple[str, ...], error: Exception, task=None) -> QgraphSyntaxError:
    """A numba compile failure as a QgraphSyntaxError naming the user's source line."""
    text = str(error)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    summary = lines[0] if lines else type(error).__name__
    for ln in lines:  # numba puts the useful sentence after a header line
        if not ln.startswith(("Failed in", "During:", "File", "-", "Use of", "[1]", "No implementation")):
            summary = ln.strip()
            break
    found = _NUMBA_LOCATION.findall(text)
    target = os.path.abspath(src.filename)
    user = [int(n) for f, n in found if os.path.abspath(f) == target]  # innermost location first
    lineno = user[0] if user else (task.lineno if task is not None else src.lineno)
    signature = ", ".join(f"{n}: {t}" for n, t in zip(src.param_names, key))
    where = f"task {task.index}" if task is not None else src.name
    message = (f"cannot compile {where} of kernel {src.name} for ({signature}): {summary}\n"
               f"(compiler said:)\n{text}")
    return syntax_error(message, src.filename, lineno)


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
        self._program = None
        self._cache_dir = state.settings.cache_dir
        self._resolve = make_resolver(self.src.param_names, fixed_scalar_types(self.src), "cpu")
        self._flag = None if self.src.graph_while is None else self.src.param_names.index(self.src.graph_while)
        stats = self.stats
        stats.used_graph = False
        stats.graph_nodes = 0
        stats.host_loop = False
        stats.cache_size = 0

    def launch(self, args: tuple, stream) -> None:
        key, values = self._resolve(*args)
        runner = self._specs.get(key)
        if runner is None:
            self._first_call(key, values)
            return
        flag = self._flag
        if flag is not None and values[flag].shape not in ((), (1,)):
            raise flag_shape_error(self.src, values[flag].shape)
        runner(*values)

    def _first_call(self, key: tuple, values: tuple) -> None:
        runner = None
        if self._flag is not None:
            check_flag_type(self.src, key)
            if values[self._flag].shape not in ((), (1,)):
                raise flag_shape_error(self.src, values[self._flag].shape)
        if self._program is None:
            from .cpu_backend import CpuProgram

            self._program = CpuProgram(self.src, self._cache_dir)
        program = self._program
        runner = program.runner
        if self._flag is not None and arg_type(key[self._flag]).ndim == 0:
            runner = program.runner_0d
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
        self._program = None


def _is_typing_stage(error: Exception) -> bool:
    from numba.core import errors

    return isinstance(error, (errors.TypingError, errors.UnsupportedError, errors.LoweringError,
                              errors.NotDefinedError, errors.UnsupportedParforsError,
                              errors.CompilerError))


__all__ = ["for_kernel", "CpuLauncher", "np"]
