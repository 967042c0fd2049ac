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
from ..lang.adjoint import adjoint_source
from ..lang.flat.view import flat_source
from ..runtime import state as runtime
from ..runtime.arrays import Ndarray
from .checks import _written_names, written_params


def adjoint_kernel(kernel, grads: tuple[str, ...]):
    """The adjoint Kernel of `kernel` for gradients of the array parameters `grads` (made once)."""
    found = kernel._adjoints.get(grads)
    if found is None:  # a Kernel of the adjoint source, with the forward pass's options
        found = kernel._sibling(adjoint_source(kernel._source, grads))
        kernel._adjoints[grads] = found
    return found


def launch_adjoint(kernel, values: tuple, grads: dict[str, Ndarray], stream=None) -> None:
    """Run the adjoint of `kernel` on a call's `values` with the gradient arrays `grads` (by name)."""
    names = tuple(p.name for p in kernel._source.params if p.name in grads)
    adjoint = adjoint_kernel(kernel, names)
    if adjoint._generation != runtime.STATE.generation:
        adjoint._attach()
    adjoint._launch(*values, *(grads[n] for n in names), stream)


def run_adjoint(kernel, values: tuple) -> None:
    """kernel.grad(...): the adjoint of one call, with the `.grad` of its array arguments."""
    src = kernel._source
    for p, v in zip(src.params, values):
        fields = getattr(v, "__dataclass_fields__", None)
        if fields and any(isinstance(getattr(v, f), Ndarray) and getattr(v, f).grad is not None for f in fields):
            raise QgraphError(f"kernel {src.name}.grad: the struct argument '{p.name}' holds an array with a "
                              "gradient; arrays inside a @qgraph.struct get none. Pass that array as an argument "
                              "of its own to differentiate it")
    grads = {p.name: g for p, v in zip(src.params, values) for g in [_gradient_of(v)] if g is not None}
    if not grads:
        raise QgraphError(f"kernel {kernel._source.name}.grad: no argument has a gradient; make the arrays to "
                          "differentiate with qgraph.ndarray(..., requires_grad=True) or set a.requires_grad = True")
    facts = kernel_facts(kernel)
    for name, when in adjoint_reads(kernel, kernel._compile(*values)).items():
        k = src.param_names.index(name) if name in src.param_names else None  # a struct leaf: not checked
        if when == "before" and k in facts.written:
            raise QgraphError(f"kernel {src.name}.grad: its adjoint needs '{name}' as it was before the call, which "
                              f"the call overwrote (line {facts.written[k]}); record the call under "
                              "qgraph.Tape, which keeps a copy, and call tape.backward")
    launch_adjoint(kernel, values, grads)


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
    a superset)."""

    src = kernel._source
    facts = kernel_facts(kernel)
    found = facts.reads.get(key)
    if found is not None:
        return found
    kinds = [arg_type(sig) for sig in key]
    grads = tuple(p.name for p, kind in zip(src.params, kinds)
                  if getattr(kind, "is_array", False) and kind.dtype.kind == "f")
    flat = flat_source(adjoint_source(src, grads), kinds + [kinds[src.param_names.index(g)] for g in grads],
                       kernel._options_now(runtime.STATE).default_float)
    n = len(src.tasks)
    found = {}
    for adjoint_index, reads in flat.adjoint_reads.items():
        t = n - 1 - adjoint_index  # the primal task
        for name, clobbered in reads.items():  # clobbered: task t itself may overwrite what it read
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
    facts.reads[key] = found
    return found
