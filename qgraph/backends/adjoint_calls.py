"""kernel.grad(...): the adjoint of one call, run like any kernel call.

The adjoint of a kernel is a kernel too (lang.adjoint): one per set of arrays with
gradients, made on first use and kept by the primal kernel, so it is compiled, cached,
graphed and captured like any other (qgraph.Tape runs them in reverse).
"""

from __future__ import annotations

from ..errors import QgraphError
from ..lang.adjoint import adjoint_source
from ..runtime import state as runtime
from ..runtime.arrays import Ndarray


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
    grads = {p.name: v.grad for p, v in zip(kernel._source.params, values)
             if isinstance(v, Ndarray) and v.grad is not None}
    if not grads:
        raise QgraphError(f"kernel {kernel._source.name}.grad: no argument has a gradient; make the arrays to "
                          "differentiate with qgraph.ndarray(..., requires_grad=True) or set a.requires_grad = True")
    launch_adjoint(kernel, values, grads)
