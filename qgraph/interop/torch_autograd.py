"""qgraph.torch_op(kernel, functional=True): a kernel as a functional PyTorch operator with a backward pass.

The operator copies the tensors the kernel writes, runs the kernel on the copies and returns
them; its autograd formula runs the kernel's adjoint (backends/adjoint_calls): the returned
tensors' gradients seed the gradients of the written parameters, every other float tensor
parameter's gradient starts at zero, and after the adjoint each holds the gradient with
respect to that argument (for a written one, with respect to its value before the call).
Where the adjoint reads an array the kernel writes, it is given the version it needs: the
argument (before the call) or the returned copy (after it).
"""

from __future__ import annotations

from ..autodiff.adjoint_calls import launch_adjoint, plan_for
from ..errors import QgraphError


def functional_op(torch, kernel, op_name: str, params: list, annotations: str, tensors: list[str],
                  written: list[str]):
    """The functional custom operator `qgraph::<op_name>` of `kernel`, with its autograd formula."""
    src = kernel.source
    if not written:
        raise TypeError(f"kernel {src.name} writes none of its tensors: a functional operator returns what it "
                        "writes, so it would return nothing")
    names = [p.name for p in params]
    one = len(written) == 1
    result = "torch.Tensor" if one else f"tuple[{', '.join(['torch.Tensor'] * len(written))}]"
    copies = "".join(f"    {w} = {w}.clone()\n" for w in written)
    returned = written[0] if one else f"({', '.join(written)},)"
    namespace = {"torch": torch, "_run": _runner(torch, kernel, names)}
    source = (f"def {op_name}({annotations}) -> {result}:\n{copies}"
              f"    _run(({', '.join(names)},))\n"
              f"    return {returned}\n")
    exec(compile(source, f"<qgraph: functional torch operator {op_name}>", "exec"), namespace)
    op = torch.library.custom_op(f"qgraph::{op_name}", namespace[op_name], mutates_args=())

    @op.register_fake
    def _fake(*args):
        outs = [torch.empty_like(args[names.index(w)]) for w in written]
        return outs[0] if one else tuple(outs)

    floats = tensors  # dtypes are known at the call: integer tensors get no gradient there
    adjoint = _adjoint_op(torch, kernel, op_name, names, annotations, tensors, written, floats)

    def setup_context(ctx, inputs, output):
        outs = (output,) if one else tuple(output)
        ctx.save_for_backward(*[inputs[names.index(t)] for t in tensors], *outs)
        ctx.scalars = [v for n, v in zip(names, inputs) if n not in tensors]

    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        outs = saved[len(tensors):]
        seeds = [torch.zeros_like(o) if g is None else g for g, o in zip(grads, outs)]
        found = adjoint(*seeds, *saved, *ctx.scalars)
        found = (found,) if len(floats) == 1 else found
        by_name = {t: g for t, g, b in zip(floats, found, saved) if b.is_floating_point()}
        return tuple(by_name.get(n) for n in names)

    op.register_autograd(backward, setup_context=setup_context)
    return op


def _adjoint_op(torch, kernel, op_name: str, names: list[str], annotations: str, tensors: list[str],
                written: list[str], floats: list[str]):
    """`qgraph::<op_name>_adjoint`: the kernel's adjoint as an operator of its own, so the
    backward pass is opaque to torch.compile's tracing as the forward is."""
    scalars = [a for a in annotations.split(", ") if a.split(":")[0] not in tensors]
    params = ([f"g_{w}: torch.Tensor" for w in written] + [f"b_{t}: torch.Tensor" for t in tensors]
              + [f"a_{w}: torch.Tensor" for w in written] + scalars)
    result = "torch.Tensor" if len(floats) == 1 else f"tuple[{', '.join(['torch.Tensor'] * len(floats))}]"
    namespace = {"torch": torch, "_grads": _adjoint_grads(torch, kernel, names, tensors, written, floats)}
    scalar_names = [a.split(":")[0] for a in scalars]
    source = (f"def {op_name}_adjoint({', '.join(params)}) -> {result}:\n"
              f"    return _grads(({''.join(f'g_{w}, ' for w in written)}), ({''.join(f'b_{t}, ' for t in tensors)}), "
              f"({''.join(f'a_{w}, ' for w in written)}), ({''.join(n + ', ' for n in scalar_names)}))\n")
    exec(compile(source, f"<qgraph: adjoint torch operator {op_name}>", "exec"), namespace)
    op = torch.library.custom_op(f"qgraph::{op_name}_adjoint", namespace[f"{op_name}_adjoint"], mutates_args=())

    @op.register_fake
    def _fake(*args):
        before = dict(zip(tensors, args[len(written):len(written) + len(tensors)]))
        outs = [torch.empty_like(before[t]) for t in floats]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return op


def _adjoint_grads(torch, kernel, names: list[str], tensors: list[str], written: list[str], floats: list[str]):
    """The adjoint operator's body: seeds in, the float tensors' gradients out."""
    def grads(seeds: tuple, before: tuple, after: tuple, scalars: tuple):
        before = dict(zip(tensors, before))
        values = dict(zip([n for n in names if n not in tensors], scalars))
        values.update(before)
        adjoints = {}
        for t in floats:
            if not before[t].is_floating_point():
                continue
            if t in written:
                adjoints[t] = seeds[written.index(t)].detach().clone()
            else:
                adjoints[t] = torch.zeros_like(before[t])
        key = kernel.compile_values(*_host([values[n] for n in names], torch))
        plan = plan_for(kernel, key)
        states = plan.states
        if states is not None:  # the passes' states exist only where a qgraph.Tape recorded the call
            raise QgraphError(f"torch_op({kernel.source.name}): the gradient of its device loop (line "
                              f"{states.loop.lineno}) needs the states of its passes, which only qgraph.Tape keeps; "
                              "differentiate the kernel with qgraph.Tape instead")
        for name, when in plan.reads.items():
            if when == "after" and name in written:
                values[name] = after[written.index(name)]
        _adjoint(torch, kernel, [values[n] for n in names], adjoints)
        out = [adjoints[t] if t in adjoints else torch.zeros_like(before[t]) for t in floats]
        return out[0] if len(out) == 1 else tuple(out)
    return grads


def _runner(torch, kernel, names: list[str]):
    def run(values: tuple) -> None:
        first = next(v for v in values if isinstance(v, torch.Tensor))
        if first.is_cuda:  # on PyTorch's stream: ordered with its work, captured with it
            kernel(*_host(list(values), torch), stream=torch.cuda.current_stream().cuda_stream)
        else:
            kernel(*_host(list(values), torch))
    return run


def _adjoint(torch, kernel, values: list, adjoints: dict) -> None:
    if not adjoints:
        raise QgraphError(f"kernel {kernel.source.name}: no float tensor to take a gradient for")
    first = next(v for v in values if isinstance(v, torch.Tensor))
    if first.is_cuda:
        launch_adjoint(kernel, tuple(_host(values, torch)), {n: a.detach() for n, a in adjoints.items()},
                       stream=torch.cuda.current_stream().cuda_stream)
    else:
        view = {n: a.numpy() for n, a in adjoints.items()}
        launch_adjoint(kernel, tuple(_host(values, torch)), view)


def _host(values: list, torch) -> list:
    """Tensors detached (the kernel reads and writes their memory): CPU ones as NumPy views (what
    the CPU backend takes), CUDA ones as tensors (read through __cuda_array_interface__)."""
    return [(v.detach() if v.is_cuda else v.detach().numpy()) if isinstance(v, torch.Tensor) else v for v in values]
