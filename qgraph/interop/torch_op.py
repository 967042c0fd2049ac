"""qgraph.torch_op: a kernel as a PyTorch custom operator (torch.library), so that it runs inside
torch.compile'd code, including mode="reduce-overhead" (PyTorch's CUDA graphs).

The operator takes the kernel's parameters as tensors (the arrays the kernel indexes) and
numbers (the others, typed by their annotation: int, bool, else float), mutates the tensors
the kernel writes, and returns nothing; its fake (meta) implementation does nothing, since a
kernel changes no shape. Its CUDA implementation calls the kernel on PyTorch's current
stream, which under PyTorch's graph capture records the kernel into that graph
(backends/outer_capture.py); its CPU implementation passes the tensors' NumPy views.
"""

from __future__ import annotations

import keyword
import os

from ..errors import QgraphError
from ..lang.front.writes import written_params
from ..tracebacks import user_error
from .operator_params import array_params, scalar_type


def torch_op(kernel, name: str | None = None, functional: bool = False):
    """Register `kernel` as the PyTorch custom operator `qgraph::<name>` (default: the kernel's
    name) and return a call of it (`.op`: torch.ops.qgraph.<name>; a call under autograd with a tensor
    that requires grad raises, naming functional=True). Its tensor parameters are those the kernel
    indexes. By default those it writes are declared mutated. With `functional=True` the
    operator writes copies instead and returns them (one tensor, or a tuple in parameter
    order), and it takes part in torch.autograd: its backward pass runs the kernel's adjoint
    (lang.adjoint), so gradients flow into every float tensor argument, the written ones' initial
    values included. Needs PyTorch 2.4 or newer."""
    try:
        import torch
    except ImportError:
        raise ImportError("qgraph.torch_op needs PyTorch (pip install torch)") from None
    from ..decorator import Kernel

    if not isinstance(kernel, Kernel):
        raise TypeError(f"qgraph.torch_op takes a @qgraph.kernel, got {kernel!r}")
    src = kernel.source
    params = [p for p in src.params if p.source is None]
    if any(p.keyword_only for p in params):
        raise TypeError(f"kernel {src.name}: a custom operator takes positional parameters only")
    arrays = array_params(src)
    written = {src.param_names[k] for k in written_params(src)}
    op_name = name or src.name
    if not isinstance(op_name, str) or not op_name.isidentifier() or keyword.iskeyword(op_name):
        raise ValueError(f"torch_op name must be a Python identifier (the operator's name, qgraph::<name>), "
                         f"got {op_name!r}")
    annotations = ", ".join(f"{p.name}: {'torch.Tensor' if p.name in arrays else scalar_type(src, p)}"
                            for p in params)
    names = ", ".join(p.name for p in params)
    tensors = [p.name for p in params if p.name in arrays]
    if not tensors:
        raise TypeError(f"kernel {src.name} indexes none of its parameters: a custom operator needs a tensor")
    if functional:
        from .torch_autograd import functional_op

        return functional_op(torch, kernel, op_name, params, annotations, tensors,
                             [p.name for p in params if p.name in written and p.name in arrays])
    namespace = {"torch": torch, "_kernel": kernel, "_numpy": _numpy_views}
    source = (f"def {op_name}({annotations}) -> None:\n"
              f"    if {tensors[0]}.is_cuda:  # on PyTorch's stream: ordered with its work, captured with it\n"
              f"        _kernel({names}, stream=torch.cuda.current_stream().cuda_stream)\n"
              f"    else:\n"
              f"        _kernel(*_numpy(({names}{',' if len(params) == 1 else ''})))\n")
    exec(compile(source, f"<qgraph: torch operator {op_name}>", "exec"), namespace)
    impl = namespace[op_name]
    mutated = tuple(p.name for p in params if p.name in written and p.name in arrays)
    op = torch.library.custom_op(f"qgraph::{op_name}", impl, mutates_args=mutated)

    @op.register_fake
    def _fake(*args, **kwargs) -> None:  # a kernel changes no shape and returns nothing
        return None

    return MutatingOperator(torch, op, op_name, src.name, [p.name for p in params])


class MutatingOperator:
    """What `torch_op(kernel)` returns: a call of the operator (`.op`, torch.ops.qgraph.<name>, whose
    other attributes read through) that refuses to run under autograd with a tensor that requires
    grad. The operator writes in place and has no backward pass (PyTorch takes none for a custom
    operator that mutates), so what it writes would carry no gradient: torch says nothing then, and
    only a later `backward()` fails ("element 0 of tensors does not require grad"), or gives a
    gradient without this call's part. The error names the operator that has one: functional=True."""

    def __init__(self, torch, op, op_name: str, kernel_name: str, names: list[str]) -> None:
        self.op = op
        self._torch = torch
        self._op_name = op_name
        self._torch_frames = (os.path.dirname(torch.__file__) + os.sep,)
        self._kernel_name = kernel_name
        self._names = names

    def __call__(self, *args, **kwargs):
        try:  # an error for the user's mistake ends at the user's call (tracebacks.py)
            if self._torch.is_grad_enabled():
                wanting = [repr(name) for name, a in (*zip(self._names, args), *kwargs.items())
                           if isinstance(a, self._torch.Tensor) and a.requires_grad]
                if wanting:
                    raise QgraphError(
                        f"qgraph::{self._op_name}: qgraph.torch_op({self._kernel_name}) writes its tensors in place "
                        f"and has no backward pass, so what it writes would carry no gradient, but "
                        f"{', '.join(wanting)} require{'s' if len(wanting) == 1 else ''} grad: "
                        f"qgraph.torch_op({self._kernel_name}, "
                        "functional=True) gives an operator that returns what the kernel writes and takes part "
                        "in autograd (its backward runs the kernel's adjoint); if no gradient is wanted here, "
                        "call it under torch.no_grad() or pass .detach()ed tensors")
            return self.op(*args, **kwargs)
        except Exception as e:
            user_error(e, self._torch_frames)  # and the dispatcher's frames the call ran through
            raise

    def __getattr__(self, name: str):
        if name == "op":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.op, name)

    def __repr__(self) -> str:
        return f"<qgraph.torch_op of kernel {self._kernel_name}: {self.op}>"


def _numpy_views(values: tuple) -> tuple:
    """CPU tensors as NumPy arrays sharing their memory (what the CPU backend takes)."""
    import torch

    return tuple(v.detach().numpy() if isinstance(v, torch.Tensor) else v for v in values)
