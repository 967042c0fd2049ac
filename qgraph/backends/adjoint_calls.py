"""kernel.grad(...): the adjoint of one call, run like any kernel call.

The adjoint of a kernel is a kernel too (lang.adjoint): one per set of arrays with
gradients, made on first use and kept by the primal kernel, so it is compiled, cached,
graphed and captured like any other (qgraph.Tape runs them in reverse).
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass, field

from ..args.kinds import arg_type
from ..errors import QgraphError
from ..lang.adjoint import LoopStates, adjoint_source, recording_source
from ..lang.adjoint.loops import loop_title
from ..lang.flat.view import flat_source
from ..lang.front.regions import DeviceLoop, IfRegion, RepeatLoop, control_regions, leaf_tasks
from ..runtime import state as runtime
from ..runtime.arrays import Ndarray
from .checks import _written_names, written_params
from .gradient_args import scan_args, written_aliases


def adjoint_kernel(kernel, grads: tuple[str, ...], states: LoopStates | None = None):
    """The adjoint Kernel of `kernel` for gradients of the array parameters `grads` (made once);
    `states`: the one keeping its device loop's checkpoints (lang.adjoint.loops)."""
    key = grads if states is None else (grads, states)
    found = kernel._adjoints.get(key)
    if found is None:  # a Kernel of the adjoint source, with the forward pass's options
        found = kernel._sibling(adjoint_source(kernel._source, grads, states))
        kernel._adjoints[key] = found
    return found


def recording_kernel(kernel, states: LoopStates):
    """The forward pass that keeps the checkpoints of `states` (a tape runs it for the call)."""
    found = kernel._adjoints.get(("recording", states))
    if found is None:
        found = kernel._adjoints[("recording", states)] = kernel._sibling(recording_source(kernel._source, states))
    return found


def launch_adjoint(kernel, values: tuple, grads: dict[str, Ndarray], stream=None, states: LoopStates | None = None,
                   hidden: tuple = ()) -> None:
    """Run the adjoint of `kernel` on a call's `values` with the gradient arrays `grads` (by name);
    `hidden`: the loop's buffers, counters and sizes after them, where `states` is given."""
    names = tuple(p.name for p in kernel._source.params if p.name in grads)
    adjoint = adjoint_kernel(kernel, names, states)
    if adjoint._generation != runtime.STATE.generation:
        adjoint._attach()
    adjoint._launch(*values, *(grads[n] for n in names), *hidden, stream)


def run_adjoint(kernel, values: tuple) -> None:
    """kernel.grad(...): the adjoint of one call, with the `.grad` of its array arguments."""
    src = kernel._source
    who = f"kernel {src.name}.grad"
    _, keys = scan_args(src, values, who)  # raises for a struct holding an array with a gradient
    grads = {p.name: g for p, v in zip(src.params, values) for g in [_gradient_of(v)] if g is not None}
    if not grads:
        raise QgraphError(f"kernel {kernel._source.name}.grad: no argument has a gradient; make the arrays to "
                          "differentiate with qgraph.ndarray(..., requires_grad=True) or set a.requires_grad = True")
    facts = kernel_facts(kernel)
    for k, j in written_aliases(src, keys, facts.written, who).items():
        if {src.params[k].name, src.params[j].name} & grads.keys():
            raise QgraphError(f"{who}: the call passes one array as both '{src.params[j].name}' and "
                              f"'{src.params[k].name}', whose gradients would be added up by the same threads "
                              "without synchronisation; pass a copy as one of them, or record the call on a "
                              "qgraph.Tape (which gives each its own gradient and adds them)")
    for k in _passed_between_tasks(src, facts):  # no .grad of its own, but the gradient flows through it
        if src.params[k].name not in grads and isinstance(values[k], Ndarray) and values[k].dtype.kind == "f":
            grads[src.params[k].name] = values[k].zeros_like()
    key = kernel._compile(*values)
    states = loop_states(kernel, key)
    if states is not None:
        kept = dict(states.kept).get(states.loop)
        what = (f"the arrays the loop overwrites ({', '.join(kept)}) as each pass left them" if kept and states.stored
                else "the branch taken" if isinstance(states.loop, IfRegion) else "the number of passes it ran")
        raise QgraphError(f"kernel {src.name}.grad: the gradient of its {loop_title(states.loop)} (line "
                          f"{states.loop.lineno}) needs {what}; record the call under qgraph.Tape, which keeps "
                          "them, and call tape.backward")
    for name, when in adjoint_reads(kernel, key).items():
        k = src.param_names.index(name) if name in src.param_names else None  # a struct leaf: not checked
        if when == "before" and k in facts.written:
            raise QgraphError(f"kernel {src.name}.grad: its adjoint needs '{name}' as it was before the call, which "
                              f"the call overwrote (line {facts.written[k]}); record the call under "
                              "qgraph.Tape, which keeps a copy, and call tape.backward")
    launch_adjoint(kernel, values, grads)


def _passed_between_tasks(src, facts) -> list[int]:
    """Positions of the arrays a task of the kernel writes and a later task reads: the gradient of
    one call flows through them, whether or not the user gave them a `.grad`."""
    found = []
    for k, name in enumerate(src.param_names):
        writers = [t for t, names in enumerate(facts.written_by_task) if name in names]
        if writers and any(name in task.loaded for task in src.tasks[min(writers) + 1:]):
            found.append(k)
    return found


def _gradient_of(value):
    """The gradient array of an argument: a qgraph array's `.grad`; a PyTorch tensor with
    requires_grad, its `.grad` (made zero-filled when it has none yet, as autograd would)."""
    if isinstance(value, Ndarray):
        return value.grad
    if getattr(value, "requires_grad", False) and type(value).__module__.startswith("torch"):
        if value.grad is None:
            import torch

            value.grad = torch.zeros_like(value)
        return value.grad
    return None


@dataclass(frozen=True)
class _Facts:
    """What the tape and kernel.grad ask of a kernel, found once per kernel."""

    written: dict[int, int]  # parameter position -> first line writing that array (checks.written_params)
    written_by_task: tuple[frozenset[str], ...]  # per task, in launch order: the arrays it writes
    reads: dict = field(default_factory=dict)  # signature -> adjoint_reads' answer
    states: dict = field(default_factory=dict)  # signature -> loop_states' answer


_FACTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # kernel -> its _Facts


def kernel_facts(kernel) -> _Facts:
    found = _FACTS.get(kernel)
    if found is None:
        src = kernel._source
        by_task = tuple(frozenset(_written_names(src, [n for s in t.body for n in ast.walk(s)], frozenset()))
                        for t in src.tasks)
        found = _FACTS[kernel] = _Facts(written_params(src), by_task)
    return found


def adjoint_reads(kernel, key: tuple) -> dict[str, str]:
    """Array parameter -> "before" (its value before the call) or "after" (after it), for the
    arrays the adjoint of a call of signature `key` reads (every float array differentiated:
    a superset). A loop that keeps states (loop_states) serves the arrays it carries itself."""
    facts = kernel_facts(kernel)
    if key not in facts.reads:
        _analyse(kernel, key)
    return facts.reads[key]


def loop_states(kernel, key: tuple) -> LoopStates | None:
    """What the kernel's device loop keeps for the gradient of a call of signature `key`, or
    None when nothing needs keeping (a repeat loop of linear updates, see _states)."""
    facts = kernel_facts(kernel)
    if key not in facts.states:
        _analyse(kernel, key)
    return facts.states[key]


def _analyse(kernel, key: tuple) -> None:
    src = kernel._source
    facts = kernel_facts(kernel)
    kinds = [arg_type(sig) for sig in key]
    grads = tuple(p.name for p, kind in zip(src.params, kinds)  # implicit ones (report rings) carry none
                  if getattr(kind, "is_array", False) and kind.dtype.kind == "f" and p.source is None)
    adjoint = adjoint_source(src, grads, analysis=True)
    flat = flat_source(adjoint, kinds + [kinds[src.param_names.index(g)] for g in grads],
                       kernel._options_now(runtime.STATE).default_float)
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
    facts.reads[key] = found
    facts.states[key] = states


def _read_around(loop, per_task: dict, carried: frozenset) -> bool:
    """Whether adjoints of tasks before and after `loop` read an array it carries (as it entered
    the loop and as it left it: only kept states give both)."""
    inside = [t.index for t in leaf_tasks(loop.body)]
    before = {n for t, reads in per_task.items() if t < min(inside) for n in reads}
    after = {n for t, reads in per_task.items() if t > max(inside) for n in reads}
    return bool(before & after & carried)


def _states(src, facts: _Facts, kinds: list, per_task: dict) -> LoopStates | None:
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
