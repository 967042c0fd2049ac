"""What kernel.grad and qgraph.Tape must know of the arrays a call passes: one identity per
block of memory whatever library holds it, the arguments that alias one another, and the
arguments whose gradient cannot be taken (arrays inside structs).

A gradient is never silently wrong: what the adjoint cannot follow raises here, before the
call runs, naming the arguments and the fix.
"""

from __future__ import annotations

import ast

import numpy as np

from ..errors import QgraphError
from ..runtime.arrays import Ndarray


def address(a) -> int | None:
    """The address of the first element of array argument `a` (None: not an array)."""
    if isinstance(a, Ndarray):
        return a._ptr if a._host is None else a._host.__array_interface__["data"][0]
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    if type(a).__module__.startswith("torch") and hasattr(a, "data_ptr"):
        return a.data_ptr()
    interface = getattr(a, "__cuda_array_interface__", None)
    if interface is not None:
        return interface["data"][0]
    return None


def identity(a) -> tuple:
    """The key of an array's memory: the same for every object (a qgraph array, a NumPy view, a
    PyTorch tensor) naming the same bytes, so a tape follows them as one array."""
    nbytes = a.nbytes if hasattr(a, "nbytes") else a.numel() * a.element_size()
    return address(a), int(nbytes)  # one address space for host and devices (CUDA's unified addressing)


def is_array(a) -> bool:
    return isinstance(a, (Ndarray, np.ndarray)) or hasattr(a, "__cuda_array_interface__") or \
        (type(a).__module__.startswith("torch") and hasattr(a, "data_ptr"))


def is_float_array(a) -> bool:
    return is_array(a) and np.dtype(str(a.dtype).replace("torch.", "")).kind == "f"


def arrays_of(src, args: tuple) -> dict[int, object]:
    """Position -> the array arguments of a call the user passed (implicit parameters left out)."""
    return {k: a for k, (p, a) in enumerate(zip(src.params, args)) if p.source is None and is_array(a)}


def no_struct_gradients(src, args: tuple, who: str) -> None:
    """Arrays inside a @qgraph.struct get no gradient: one that has one raises (never a silent zero)."""
    for p, v in zip(src.params, args):
        fields = getattr(v, "__dataclass_fields__", None)
        if fields and any(isinstance(getattr(v, f), Ndarray) and getattr(v, f).grad is not None for f in fields):
            raise QgraphError(f"{who}: the struct argument '{p.name}' holds an array with a gradient; arrays "
                              "inside a @qgraph.struct get none. Pass that array as an argument of its own to "
                              "differentiate it")


def written_aliases(src, arrays: dict[int, object], written, who: str) -> dict[int, int]:
    """Position -> the earlier position passing the same memory. Raises where the kernel writes one
    of them: the adjoint is made for distinct arrays, so its gradient would be wrong."""
    first: dict[tuple, int] = {}
    aliases = {}
    for k, a in arrays.items():
        key = identity(a)
        if key in first:
            j = first[key]
            if j in written or k in written:
                names = src.params[j].name, src.params[k].name
                raise QgraphError(f"{who}: the call passes one array as both '{names[0]}' and '{names[1]}', and the "
                                  f"kernel writes '{names[1] if k in written else names[0]}' (line "
                                  f"{written.get(k, written.get(j))}); its gradient would be wrong, as the adjoint "
                                  "is made for distinct arrays. Pass a copy as one of them "
                                  "(qgraph.from_numpy(x.to_numpy()))")
            aliases[k] = j
        else:
            first[key] = k
    return aliases


def check_seed(a, seed) -> None:
    """A seed names a float array and fits its shape (a number fits any)."""
    if not is_float_array(a):
        raise TypeError(f"Tape.backward: a seed is given for {shown(a)}, which is not a float array (a qgraph "
                        "array, or one the recorded calls passed); seed the float array the kernels wrote")
    if isinstance(seed, (int, float)) and not isinstance(seed, bool):
        return
    shape = np.shape(seed)
    try:
        np.broadcast_shapes(shape, tuple(a.shape))
        np.broadcast_to(np.empty(shape), tuple(a.shape))
    except ValueError:
        raise ValueError(f"Tape.backward: the seed for an array of shape {tuple(a.shape)} has shape {shape}; give "
                         "a number or an array of the array's shape") from None


def shown(a) -> str:
    text = repr(a)
    return text if len(text) < 60 else f"a {type(a).__module__}.{type(a).__name__}"


_STRUCT_PATHS: dict[int, tuple] = {}  # id(kernel source) -> (source, its struct field accesses)


def struct_arrays(src, args: tuple) -> tuple[dict[str, object], dict[str, object]]:
    """The float qgraph arrays inside struct arguments that the kernel writes and reads, by path
    (`s.a`): a tape follows no gradient through them, so it refuses what would need one."""
    found = _STRUCT_PATHS.get(id(src))
    if found is None:
        found = _STRUCT_PATHS[id(src)] = (src, _struct_accesses(src))
    written: dict[str, object] = {}
    read: dict[str, object] = {}
    for path, store in found[1]:
        root, *fields = path.split(".")
        value = args[src.param_names.index(root)]
        for name in fields:
            value = getattr(value, name, None)
        if isinstance(value, Ndarray) and value.dtype.kind == "f":
            (written if store else read)[path] = value
    return written, read


def _struct_accesses(src) -> tuple[tuple[str, bool], ...]:
    """(`s.a`, stored) for each struct field array a task indexes or passes to an atomic."""
    found = set()
    for node in (n for task in src.tasks for stmt in task.body for n in ast.walk(stmt)):
        target, store = None, False
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
            target, store = node.value, isinstance(node.ctx, ast.Store)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr.startswith("atomic_") and node.args and isinstance(node.args[0], ast.Attribute):
            target, store = node.args[0], True
        if target is not None:
            path = ast.unparse(target)
            if path.split(".")[0] in src.param_names:
                found.add((path, store))
    return tuple(sorted(found))
