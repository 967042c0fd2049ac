"""Module-level values a kernel reads: arrays are read at call time, numbers are checked.

numba freezes globals into the compiled code, so a module-level array written by the host
after compilation would be read stale, silently. Instead:
- a module-level array (NumPy, qgraph, CuPy/PyTorch) or @qgraph.struct object a kernel
  reads becomes an implicit parameter: each call passes what the name holds then, so the
  kernel sees (and writes) the current array;
- a module-level number stays a compile-time constant (it folds into the code), and every
  call checks that it still holds the value it was compiled with; a change raises
  QgraphError naming the number (as Triton does).
"""

from __future__ import annotations

import ast
import builtins

import numpy as np

from .frontend import UNRESOLVED, KernelSource, Param, collect_names

RNG_STATE = "_qg_rng"  # the implicit parameter of kernels that draw random numbers


def is_array_value(value: object) -> bool:
    return isinstance(value, np.ndarray) or getattr(type(value), "_qgraph_array", False) \
        or hasattr(value, "__cuda_array_interface__") or getattr(type(value), "_qgraph_struct", False) \
        or (hasattr(value, "__dlpack__") and not isinstance(value, np.generic))


def is_number_value(value: object) -> bool:
    return isinstance(value, (bool, int, float, np.number, np.bool_)) and not isinstance(value, complex)


def _source_of(fn, name: str) -> str | None:
    """How the binder reads `name` at call time: a global or a closure cell."""
    if fn.__closure__ and name in fn.__code__.co_freevars:
        return f"_qg_cells[{fn.__code__.co_freevars.index(name)}].cell_contents"
    if name in fn.__globals__:
        return f"_qg_globals[{name!r}]"
    return None


def implicit_arrays(fn, src: KernelSource) -> tuple[Param, ...]:
    """Parameters for the module-level (or closure) arrays and structs the tasks read."""
    params = set(src.param_names)
    stored = {n for t in src.tasks for n in t.stored}
    found: list[Param] = []
    for task in src.tasks:
        for name in list(task.loaded) + sorted(task.bound_names):
            if name in params or name in stored or any(p.name == name for p in found):
                continue
            value = src.resolve(ast.Name(name, ast.Load()))
            if value is UNRESOLVED or not is_array_value(value):
                continue
            source = _source_of(fn, name)
            if source is not None:
                found.append(Param(name, None, False, source))
    return tuple(found)


def frozen_numbers(src: KernelSource) -> tuple[tuple[dict, str, object], ...]:
    """(module dict, name, value) of every module-level number the kernel and the
    @qgraph.funcs it calls read: compile-time constants, checked at each call."""
    seen: set[tuple[int, str]] = set()
    out: list[tuple[dict, str, object]] = []
    pending = [(src.fn_def.body, src)]
    visited_funcs: set[int] = set()
    while pending:
        body, owner = pending.pop()
        names = collect_names(body)
        for name in names.loaded:
            if name in names.stored or name in owner.param_names or name in owner.closure:
                continue
            if name not in owner.globals:
                continue
            value = owner.globals[name]
            if getattr(value, "_qgraph_kind", None) == "func" and id(value) not in visited_funcs:
                visited_funcs.add(id(value))
                pending.append((value._source.fn_def.body, value._source))
            elif is_number_value(value) and (id(owner.globals), name) not in seen and not hasattr(builtins, name):
                seen.add((id(owner.globals), name))
                out.append((owner.globals, name, value))
    return tuple(out)


def func_array_globals(src: KernelSource) -> list[str]:
    """Module-level arrays a @qgraph.func body reads (not supported: pass them in)."""
    names = collect_names(src.fn_def.body)
    return [n for n in names.loaded if n not in names.stored and n not in src.param_names
            and is_array_value(src.globals.get(n, src.closure.get(n)))]
