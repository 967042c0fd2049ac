"""Reverse-mode adjoints of kernels, generated from each task's own flattened source.

The adjoint of a kernel is a kernel of its own kind (`adjoint_source`): the same parameters
plus one gradient array per differentiated array (`_qg_adj_<name>`, the same kind as the
array), its tasks in reverse order, each task's body replaced, per signature, by its
adjoint (`adjoint_task`, called by lang.flat.view once the task is scalars and arrays only).
So both backends compile it unchanged, with the forward pass's options, caches, graphs,
reductions and atomics.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

from ..front.globals_used import RNG_STATE
from ..front.parse import KernelSource, Param
from ..front.regions import Task, leaf_tasks
from ..types.weak_types import INT, Typer, infer_locals, param_type
from .checkpoints import checkpointed_regions, recording_source
from .custom import CustomAdjoints
from .ir import Let, render, walk
from .loops import LoopStates, hidden_adjoint_params, reversed_regions
from .reverse import adjoint_name, adjoint_statements
from .three_address import three_address


@dataclass(frozen=True)
class AdjointOf:
    """What makes a KernelSource an adjoint: the primal's array parameters with gradients."""

    grads: tuple[str, ...]
    primal_tasks: int  # the primal's task count
    primal_of: tuple[int | None, ...] = ()  # per adjoint task: the primal task it reverses (None: runs forward)
    writes: tuple[str, ...] = ()  # parameters besides the gradients it writes (a loop's working arrays, buffers)


def adjoint_source(src: KernelSource, grads: tuple[str, ...], states: LoopStates | None = None,
                   analysis: bool = False) -> KernelSource:
    """The adjoint kernel of `src` for gradients of the array parameters `grads`; `states`: its
    device loop keeps checkpoints (lang.adjoint.loops); `analysis`: only to find what it reads."""
    if RNG_STATE in src.param_names:
        raise src.error(f"kernel {src.name}: cannot differentiate a kernel that draws random numbers; "
                        "draw them in a kernel of their own and pass the array", src.lineno)
    by_name = {p.name: p for p in src.params}
    extra = tuple(Param(adjoint_name(name), by_name[name].annotation, False) for name in grads)
    order: list[int | None] = []
    if states is None:
        body, writes = reversed_regions(src, src.body, order, analysis), ()
    else:
        body = checkpointed_regions(src, states, order)
        extra += hidden_adjoint_params(src, states)
        writes = tuple(n for n, _ in states.carried) + tuple(p.name for p in hidden_adjoint_params(src, states))
    return dataclasses.replace(src, name=f"{src.name}_adjoint", qualname=f"{src.qualname}.adjoint",
                               params=src.params + extra, tasks=tuple(leaf_tasks(body)), body=body, graph_while=None,
                               adjoint=AdjointOf(tuple(grads), len(src.tasks), tuple(order), writes))


def adjoint_task(src: KernelSource, task: Task, kinds: dict, specs) -> tuple[Task, frozenset[str]]:
    """`task` (flattened, of the adjoint source `src`; `specs` its helpers, lang.flat.view.FuncSpecs)
    with its body replaced by its adjoint: (the task, the array parameters whose values the adjoint
    reads -> whether this task may have overwritten the elements read)."""
    grads = {name for name in src.adjoint.grads if name in kinds and kinds[name].dtype.kind == "f"}
    arrays = {name for name, kind in kinds.items() if kind.is_array}
    defs = {d.name: d for d, _, _ in specs.defs}
    prefix = f"t{task.index}_"
    body = three_address(src, task.body, arrays, defs, prefix, CustomAdjoints(specs))
    types = _types(src, body, kinds, task.loop_vars)
    stmts, reads = adjoint_statements(src, body, types, grads, src.resolve, prefix,
                                          task.loop_vars if task.parallel else ())
    for s in stmts:
        ast.fix_missing_locations(ast.copy_location(s, ast.Pass(lineno=task.lineno, col_offset=0)))
    return dataclasses.replace(task, body=stmts or [ast.Pass(lineno=task.lineno, col_offset=0)]), reads


def _types(src: KernelSource, body, kinds: dict, loop_vars: tuple[str, ...]) -> dict:
    env = {name: param_type(kind) for name, kind in kinds.items()}
    for v in loop_vars:
        env[v] = INT
    typer = Typer(src, env)
    stmts = render(body.stmts)
    lets = {t for s in walk(body.stmts) if isinstance(s, Let) for t in s.targets}
    infer_locals(typer, stmts, lets)
    return typer.env


__all__ = ["AdjointOf", "LoopStates", "adjoint_name", "adjoint_source", "adjoint_task", "hidden_adjoint_params",
           "recording_source"]
