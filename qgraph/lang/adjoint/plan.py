"""A call's gradient plan, from its kernel's source and signature alone: what the adjoint reads
(and whether as the call found it or as it left it), what a device loop keeps for it, what the
kernel writes. The tape, kernel.grad and the PyTorch op are clients of it (qgraph.autodiff)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from types import MappingProxyType

from ...errors import QgraphError
from ..flat.view import flat_source
from ..front.parse import KernelSource
from ..front.regions import DeviceLoop, IfRegion, RepeatLoop, control_regions, leaf_tasks
from ..front.writes import written_names, written_params
from . import adjoint_source
from .loops import LoopStates, loop_title


@dataclass(frozen=True)
class KernelWrites:
    """What a kernel writes, found once per source."""

    written: dict[int, int]  # parameter position -> first line writing that array (lang.front.writes)
    written_by_task: tuple[frozenset[str], ...]  # per task, in launch order: the arrays it writes
    passed_between_tasks: tuple[int, ...]  # arrays a task writes and a later one reads: the gradient flows there


@dataclass(frozen=True)
class GradientPlan:
    """The gradient of a call of one signature: `grads`, the arrays differentiated (float arrays the
    user passes); `reads`, array -> "before" (its value before the call) or "after" (after it), for
    the arrays the adjoint reads (a superset); `states`, what the device loops keep (None: nothing)."""

    writes: KernelWrites
    grads: tuple[str, ...]
    reads: MappingProxyType
    states: LoopStates | None


def kernel_writes(src: KernelSource) -> KernelWrites:
    """What a kernel writes, from its source alone (its signature does not change it)."""
    by_task = tuple(frozenset(written_names(src, [n for s in t.body for n in ast.walk(s)], frozenset()))
                    for t in src.tasks)
    return KernelWrites(written_params(src), by_task, _passed_between_tasks(src, by_task))


def gradient_plan(src: KernelSource, kinds: list, default_float, writes: KernelWrites | None = None) -> GradientPlan:
    """The GradientPlan of a call of `src` whose parameters have the argument kinds `kinds` (the
    signature's, args.kinds), computed in `default_float` where nothing else decides; raises
    QgraphError naming the line where no plan can be right (the tape's copies could not help)."""
    facts = kernel_writes(src) if writes is None else writes
    grads = tuple(p.name for p, kind in zip(src.params, kinds)  # implicit ones (report rings) carry none
                  if getattr(kind, "is_array", False) and kind.dtype.kind == "f" and p.source is None)
    adjoint = adjoint_source(src, grads, analysis=True)
    flat = flat_source(adjoint, kinds + [kinds[src.param_names.index(g)] for g in grads], default_float)
    per_task = {adjoint.adjoint.primal_of[a]: reads for a, reads in flat.adjoint_reads.items()}
    states = _states(src, facts, kinds, per_task)
    skip = frozenset(n for n, _ in states.carried) if states else frozenset()
    found = {}
    n = len(src.tasks)
    for t, reads in per_task.items():
        for name, clobbered in reads.items():  # clobbered: task t itself may overwrite what it read
            if name in skip:
                continue
            later = clobbered or any(name in facts.written_by_task[u] for u in range(t + 1, n))
            earlier = any(name in facts.written_by_task[u] for u in range(t))
            if later and earlier:
                raise QgraphError(f"kernel {src.name}: the gradient of the task at line {src.tasks[t].lineno} needs "
                                  f"`{name}` as the tasks before it left it, and a later task of the same kernel "
                                  f"overwrites it; split the kernel there (a tape copies arrays between calls)")
            when = "before" if later else "after"
            if found.get(name, when) != when:
                raise QgraphError(f"kernel {src.name}: its tasks' gradients need `{name}` both before and after "
                                  "the kernel writes it; split the kernel")
            found[name] = when
    for region in control_regions(src.body):  # a branch's flag is read again by the adjoint
        if isinstance(region, IfRegion) and region.flag not in skip:
            found.setdefault(region.flag, "after")
    return GradientPlan(facts, grads, MappingProxyType(found), states)




def _read_around(loop, per_task: dict, carried: frozenset) -> bool:
    """Whether adjoints of tasks before and after `loop` read an array it carries (as it entered
    the loop and as it left it: only kept states give both)."""
    inside = [t.index for t in leaf_tasks(loop.body)]
    before = {n for t, reads in per_task.items() if t < min(inside) for n in reads}
    after = {n for t, reads in per_task.items() if t > max(inside) for n in reads}
    return bool(before & after & carried)


def _states(src: KernelSource, facts: KernelWrites, kinds: list, per_task: dict) -> LoopStates | None:
    """The LoopStates of a kernel that must keep states, or None: a loop whose adjoints read an
    array it overwrites, a flag loop (whose pass count the tape records), a loop whose arrays the
    adjoints around it read as it got and as it left them, a branch on a flag the kernel writes."""
    loops = [r for r in control_regions(src.body) if isinstance(r, (RepeatLoop, DeviceLoop))]
    arrays = {p.name for p, kind in zip(src.params, kinds) if getattr(kind, "is_array", False)}
    written = frozenset().union(*facts.written_by_task) & arrays
    inside = {loop: [t.index for t in leaf_tasks(loop.body)] for loop in loops}
    own = {loop: frozenset().union(*(facts.written_by_task[t] for t in inside[loop])) for loop in loops}
    branches = tuple(r for r in control_regions(src.body) if isinstance(r, IfRegion) and r.flag in written)
    for loop in reversed(loops):  # a struct's arrays are not followed from pass to pass (outermost last)
        for t in inside[loop]:
            _no_struct_writes(src, src.tasks[t], f"inside the {loop_title(loop)} at line {loop.lineno} ")
    if not branches and not any(isinstance(loop, DeviceLoop) or _read_around(loop, per_task, own[loop])
                                or any(set(per_task.get(t, ())) & own[loop] for t in inside[loop]) for loop in loops):
        return None
    for task in src.tasks:
        _no_struct_writes(src, task, "of a kernel whose gradient keeps states (device loops, written branch flags) ")
    stored = {t: tuple(sorted(set(reads) & written)) for t, reads in per_task.items() if t is not None}
    stored = {t: names for t, names in stored.items() if names}
    kept = []
    for loop in loops:
        if any(t in stored for t in inside[loop]) or any(isinstance(r, DeviceLoop) or r in branches
                                                          for r in control_regions(loop)):  # itself included
            touched = {n.id for t in inside[loop] for s in src.tasks[t].body for n in ast.walk(s)
                       if isinstance(n, ast.Name)}
            touched |= {r.flag for r in control_regions(loop) if not isinstance(r, RepeatLoop)}
            kept.append((loop, tuple(sorted(touched & written))))
    ranks = []
    for name in sorted(written):
        kind = kinds[src.param_names.index(name)]
        ranks.append((name, kind.ndim - len(kind.element)))
    named = kept[0][0] if kept else branches[0] if branches else loops[0]
    return LoopStates(src.body, named, tuple(ranks), tuple(sorted(stored.items())), tuple(kept), branches)


def _no_struct_writes(src, task, where: str) -> None:
    """A task whose writes the kept states must follow writes no array inside a struct."""
    for node in (n for stmt in task.body for n in ast.walk(stmt)):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Attribute):
            raise QgraphError(f"kernel {src.name}: the task at line {task.lineno} {where}writes "
                              f"`{ast.unparse(node.value)}`, an array inside a struct; a loop's gradient follows only "
                              "arrays passed as arguments of their own: pass that array as one")


def _passed_between_tasks(src: KernelSource, written_by_task: tuple) -> tuple[int, ...]:
    """Positions of the arrays a task of the kernel writes and a later task reads: the gradient of
    one call flows through them, whether or not the user gave them a `.grad`."""
    found = []
    for k, name in enumerate(src.param_names):
        writers = [t for t, names in enumerate(written_by_task) if name in names]
        if writers and any(name in task.loaded for task in src.tasks[min(writers) + 1:]):
            found.append(k)
    return tuple(found)
