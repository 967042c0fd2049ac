"""The adjoint kernels' calls: each call's GradientPlan (lang.adjoint.plan) made once per kernel and
signature, the adjoint kernels made from it, and kernel.grad(...), the adjoint of one call.

The adjoint of a kernel is a kernel too (lang.adjoint): one per set of arrays with gradients,
made on first use and kept here per primal kernel, so it is compiled, cached, graphed and
captured like any other (qgraph.Tape runs them in reverse; the PyTorch op runs them as its backward).
"""

from __future__ import annotations

import weakref

from ..args.kinds import arg_type
from ..compiler.compile_depth import room_to_recurse
from ..errors import QgraphError
from ..lang.adjoint import LoopStates, adjoint_source, recording_source
from ..lang.adjoint.loops import loop_title
from ..lang.adjoint.plan import GradientPlan, KernelWrites, gradient_plan, kernel_writes
from ..lang.front.regions import IfRegion
from ..runtime.arrays import Ndarray
from .gradient_args import scan_args, written_aliases

_ADJOINTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # kernel -> {gradients: its adjoint Kernel}


def adjoint_kernel(kernel, grads: tuple[str, ...], states: LoopStates | None = None):
    """The adjoint Kernel of `kernel` for gradients of the array parameters `grads` (made once);
    `states`: the one keeping its device loop's checkpoints (lang.adjoint.loops)."""
    key = grads if states is None else (grads, states)
    made = _ADJOINTS.setdefault(kernel, {})
    found = made.get(key)
    if found is None:  # a Kernel of the adjoint source, with the forward pass's options
        with room_to_recurse():  # helpers inlined, one level deeper each (compiler.compile_depth)
            found = made[key] = kernel.with_source(adjoint_source(kernel.source, grads, states))
    return found


def adjoint_kernels(kernel) -> tuple:
    """The adjoint (and recording) kernels made for `kernel` so far."""
    return tuple(_ADJOINTS.get(kernel, {}).values())


def recording_kernel(kernel, states: LoopStates):
    """The forward pass that keeps the checkpoints of `states` (a tape runs it for the call)."""
    made = _ADJOINTS.setdefault(kernel, {})
    found = made.get(("recording", states))
    if found is None:
        with room_to_recurse():
            found = made[("recording", states)] = kernel.with_source(recording_source(kernel.source, states))
    return found


def launch_adjoint(kernel, values: tuple, grads: dict[str, Ndarray], stream=None, states: LoopStates | None = None,
                   hidden: tuple = ()) -> None:
    """Run the adjoint of `kernel` on a call's `values` with the gradient arrays `grads` (by name);
    `hidden`: the loop's buffers, counters and sizes after them, where `states` is given."""
    names = tuple(p.name for p in kernel.source.params if p.name in grads)
    adjoint = adjoint_kernel(kernel, names, states)
    adjoint.launch_values(*values, *(grads[n] for n in names), *hidden, stream)


def run_adjoint(kernel, values: tuple) -> None:
    """kernel.grad(...): the adjoint of one call, with the `.grad` of its array arguments."""
    src = kernel.source
    who = f"kernel {src.name}.grad"
    _, keys = scan_args(src, values, who)  # raises for a struct holding an array with a gradient
    grads = {p.name: g for p, v in zip(src.params, values) for g in [_gradient_of(v)] if g is not None}
    if not grads:
        raise QgraphError(f"kernel {kernel.source.name}.grad: no argument has a gradient; make the arrays to "
                          "differentiate with qgraph.ndarray(..., requires_grad=True) or set a.requires_grad = True")
    writes = writes_of(kernel)
    for k, j in written_aliases(src, keys, writes.written, who).items():
        if {src.params[k].name, src.params[j].name} & grads.keys():
            raise QgraphError(f"{who}: the call passes one array as both '{src.params[j].name}' and "
                              f"'{src.params[k].name}', whose gradients would be added up by the same threads "
                              "without synchronisation; pass a copy as one of them, or record the call on a "
                              "qgraph.Tape (which gives each its own gradient and adds them)")
    for k in writes.passed_between_tasks:  # no .grad of its own, but the gradient flows through it
        if src.params[k].name not in grads and isinstance(values[k], Ndarray) and values[k].dtype.kind == "f":
            grads[src.params[k].name] = values[k].zeros_like()
    plan = plan_for(kernel, kernel.compile_values(*values))
    states = plan.states
    if states is not None:
        kept = dict(states.kept).get(states.loop)
        what = (f"the arrays the loop overwrites ({', '.join(kept)}) as each pass left them" if kept and states.stored
                else "the branch taken" if isinstance(states.loop, IfRegion) else "the number of passes it ran")
        raise QgraphError(f"kernel {src.name}.grad: the gradient of its {loop_title(states.loop)} (line "
                          f"{states.loop.lineno}) needs {what}; record the call under qgraph.Tape, which keeps "
                          "them, and call tape.backward")
    for name, when in plan.reads.items():
        k = src.param_names.index(name) if name in src.param_names else None  # a struct leaf: not checked
        if when == "before" and k in writes.written:
            raise QgraphError(f"kernel {src.name}.grad: its adjoint needs '{name}' as it was before the call, which "
                              f"the call overwrote (line {writes.written[k]}); record the call under "
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


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # kernel -> (its KernelWrites, {key: plan})


def writes_of(kernel) -> KernelWrites:
    """What `kernel` writes (lang.adjoint.plan.kernel_writes), found once per kernel."""
    found = _PLANS.get(kernel)
    if found is None:
        found = _PLANS[kernel] = (kernel_writes(kernel.source), {})
    return found[0]


def forget_adjoints() -> None:
    """Drop every adjoint (and recording) kernel and gradient plan made so far: a helper was given its
    custom adjoint (`@f.adjoint`), which those made before would not call; the next gradient remakes them."""
    _ADJOINTS.clear()
    _PLANS.clear()


def plan_for(kernel, key: tuple) -> GradientPlan:
    """The GradientPlan of a call of `kernel` with signature `key` (lang.adjoint.plan), made once."""
    writes = writes_of(kernel)
    plans = _PLANS[kernel][1]
    found = plans.get(key)
    if found is None:
        kinds = [arg_type(sig) for sig in key]
        with room_to_recurse():
            found = plans[key] = gradient_plan(kernel.source, kinds, kernel.options_now().default_float, writes)
    return found
