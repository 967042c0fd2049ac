"""Implicit parameters: module-level values a kernel reads, and its random-number state.

numba freezes globals into the compiled code, so a module-level array written by the host
after compilation would be read stale, silently. Instead:
- a module-level array (NumPy, qgraph, CuPy/PyTorch) or @qgraph.struct object a kernel
  reads becomes an implicit parameter: each call passes what the name holds then, so the
  kernel sees (and writes) the current array;
- a module-level number, or one read from the enclosing function, stays a compile-time
  constant (it folds into the code), and every call checks that its name (closure cell)
  still holds the value it was compiled with; a change raises QgraphError naming the
  number (as Triton does). A vector or matrix read the same way
  (`GRAVITY = qgraph.vec2(0.0, -9.8)`) is the same: lang.flat.flatten compiles its components
  in, and every call checks its value (rebound, or changed in place).

A kernel that draws random numbers gets the implicit array parameter `_qg_rng` ([seed,
epoch], runtime.State.rng_state) and a last serial task advancing the epoch, so every call
(and every pass of a device loop) draws fresh numbers from the same graph.
"""

from __future__ import annotations

import ast
import builtins

import numpy as np

from .. import roles
from ..roles import role_of
from ..types.vector_types import is_vector_value
from . import builtins as lang
from .parse import UNRESOLVED, KernelSource, Param, collect_names
from .regions import DeviceLoop, Region, RepeatLoop, Sequence, Task, control_regions, leaf_tasks, with_bodies

RNG_STATE = "_qg_rng"  # the implicit parameter of kernels that draw random numbers


def is_array_value(value: object) -> bool:
    if is_vector_value(value):  # qgraph.vec2(...): a constant, compiled in as its components
        return False
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


def outside_values(src: KernelSource):
    """(owner, holder, name, value, line) of every value the kernel and the @qgraph.funcs it
    calls read from their module (holder: the module dict) or enclosing function (holder: the
    closure cell); `owner` is the source that reads it, first at `line`. Funcs are followed."""
    pending = [(src.fn_def.body, src)]
    visited_funcs: set[int] = set()
    while pending:
        body, owner = pending.pop()
        names = collect_names(body)
        for name, line in names.loaded.items():
            if name in names.stored or name in owner.param_names:
                continue
            if name in owner.closure:
                holder, value = owner.closure.cell(name), owner.closure[name]
            elif name in owner.globals:
                holder, value = owner.globals, owner.globals[name]
            else:
                continue
            if role_of(value) == roles.FUNC and id(value) not in visited_funcs:
                visited_funcs.add(id(value))
                pending.append((value.source.fn_def.body, value.source))
            yield owner, holder, name, value, line


def frozen_numbers(src: KernelSource) -> tuple[tuple[object, str, object], ...]:
    """(holder, name, value) of every number and vector (`qgraph.vec2(...)`) read from outside
    (see `outside_values`): compile-time constants, checked at each call."""
    seen: set[tuple[int, str]] = set()
    out: list[tuple[object, str, object]] = []
    for _, holder, name, value, _ in outside_values(src):
        if (is_number_value(value) or is_vector_value(value)) and (id(holder), name) not in seen \
                and not hasattr(builtins, name):
            seen.add((id(holder), name))
            out.append((holder, name, value))
    return tuple(out)


UNUSABLE_CONTAINERS = (list, dict, set, frozenset, bytearray)  # numba cannot freeze them into code


def unusable_globals(src: KernelSource) -> list[tuple[KernelSource, str, str, int]]:
    """(owner, name, type name, line) of the lists, dicts and sets read from outside the kernel
    (numba rejects them with its own words, differently per backend, and in loop bounds, which
    its runner holds too, without naming the line)."""
    return [(owner, name, type(value).__name__, line) for owner, _, name, value, line in outside_values(src)
            if isinstance(value, UNUSABLE_CONTAINERS)]


def func_array_globals(src: KernelSource) -> list[str]:
    """Module-level arrays a @qgraph.func body reads (not supported: pass them in)."""
    names = collect_names(src.fn_def.body)
    return [n for n in names.loaded if n not in names.stored and n not in src.param_names
            and is_array_value(src.globals.get(n, src.closure.get(n)))]


def with_implicit(fn, src: KernelSource) -> KernelSource:
    """`src` with its implicit parameters, the epoch task, and its frozen numbers."""
    import dataclasses

    params = src.params + implicit_arrays(fn, src)
    tasks, body = src.tasks, src.body
    if uses_random(src):
        _check_draws_outside_region_loops(src)
        params += (Param(RNG_STATE, None, False, "_qg_rng_state()"),)
        epoch = _epoch_task(len(tasks), src.fn_def)
        tasks = tasks + (epoch,)
        body = _append(body, epoch)
    frozen = tuple((g, n) for g, n, _ in frozen_numbers(src))
    return dataclasses.replace(src, params=params, tasks=tasks, body=body, frozen=frozen)


def uses_random(src: KernelSource, tasks=None) -> bool:
    randoms = tuple(lang.RANDOM.values())
    for task in src.tasks if tasks is None else tasks:
        for stmt in task.body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and src.resolve(node.func) in randoms:
                    return True
    return False


def _check_draws_outside_region_loops(src: KernelSource) -> None:
    """Random numbers are fresh per call and per pass of the loop around the body, not per pass of
    a qgraph.loop/qgraph.repeat region: a draw there would repeat, so it is an error."""
    for region in control_regions(src.body):
        if (isinstance(region, RepeatLoop) or (isinstance(region, DeviceLoop) and region.test_first)) \
                and uses_random(src, list(leaf_tasks(region))):
            raise src.error("random numbers inside a qgraph.loop or qgraph.repeat region would repeat from pass to "
                            "pass; draw them in a task outside the region (into an array), or use graph_while= "
                            "for the loop around the whole body, whose passes draw fresh numbers", region.lineno)


def _epoch_task(index: int, at: ast.AST) -> Task:
    """`_qg_rng[1] = _qg_rng[1] + uint64(1)`: the next call's (or pass's) random numbers."""
    line = max((getattr(n, "end_lineno", 0) or 0) for n in ast.walk(at))
    code = f"{RNG_STATE}[1] = {RNG_STATE}[1] + _qg_np.uint64(1)"
    stmt = ast.parse(code).body[0]
    for node in ast.walk(stmt):
        node.lineno, node.end_lineno, node.col_offset, node.end_col_offset = line, line, 0, 0
    return Task(index, False, line, [stmt], stored=frozenset(), loaded={RNG_STATE: line, "_qg_np": line})


def _append(region: Region, task: Task) -> Region:
    """`region` with `task` at the end of its last sequence (inside a loop around the body)."""
    if isinstance(region, DeviceLoop):
        return with_bodies(region, lambda body: _append(body, task))
    children = region.children
    if children and isinstance(children[-1], DeviceLoop) and len(children) == 1:
        return Sequence(children[:-1] + (_append(children[-1], task),))
    return Sequence(children + (task,))
