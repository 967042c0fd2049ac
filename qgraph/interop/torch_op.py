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

import ast
import keyword

from ..args.resolve import scalar_annotation
from ..lang.front.parse import UNRESOLVED
from ..lang.front.writes import written_params

_SCALARS = {"bool": "bool", "int": "int", "i8": "int", "i16": "int", "i32": "int", "i64": "int", "u8": "int",
            "u16": "int", "u32": "int", "u64": "int"}


def _array_params(src) -> set[str]:
    """Parameters the kernel indexes or asks the shape of: tensors for the operator."""
    names = set(src.param_names)
    found = set()
    for node in ast.walk(src.fn_def):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in names:
            found.add(node.value.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names \
                and node.attr in ("shape", "size", "ndim"):
            found.add(node.value.id)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name) \
                and node.args[0].id in names and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "atomic_add", "atomic_sub", "atomic_min", "atomic_max", "len"):
            found.add(node.args[0].id)
    return found


def _scalar_type(src, param) -> str:
    if param.annotation is None:
        return "float"
    obj = src.resolve(param.annotation)
    text = scalar_annotation(obj) if obj is not UNRESOLVED else None
    if text is None:
        return "float"
    return _SCALARS.get(text, "int" if "int" in text else "float")


def torch_op(kernel, name: str | None = None, functional: bool = False):
    """Register `kernel` as the PyTorch custom operator `qgraph::<name>` (default: the kernel's
    name) and return it (`torch.ops.qgraph.<name>`). Its tensor parameters are those the kernel
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
    arrays = _array_params(src)
    written = {src.param_names[k] for k in written_params(src)}
    op_name = name or src.name
    if not isinstance(op_name, str) or not op_name.isidentifier() or keyword.iskeyword(op_name):
        raise ValueError(f"torch_op name must be a Python identifier (the operator's name, qgraph::<name>), "
                         f"got {op_name!r}")
    annotations = ", ".join(f"{p.name}: {'torch.Tensor' if p.name in arrays else _scalar_type(src, p)}"
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

    return op


def _numpy_views(values: tuple) -> tuple:
    """CPU tensors as NumPy arrays sharing their memory (what the CPU backend takes)."""
    import torch

    return tuple(v.detach().numpy() if isinstance(v, torch.Tensor) else v for v in values)
