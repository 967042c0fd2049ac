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
    if type(a) is Ndarray:
        return a.address
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
    if type(a) is Ndarray:
        return a.address, a.nbytes
    nbytes = a.nbytes if hasattr(a, "nbytes") else a.numel() * a.element_size()
    return address(a), int(nbytes)  # one address space for host and devices (CUDA's unified addressing)


def is_array(a) -> bool:
    return type(a) is Ndarray or isinstance(a, np.ndarray) or (
        not isinstance(a, (int, float)) and (hasattr(a, "__cuda_array_interface__") or
                                             (type(a).__module__.startswith("torch") and hasattr(a, "data_ptr"))))


def is_float_array(a) -> bool:
    return is_array(a) and np.dtype(str(a.dtype).replace("torch.", "")).kind == "f"


def scan_args(src, args: tuple, who: str) -> tuple[dict[int, object], dict[int, tuple]]:
    """A recorded call's array arguments by position, and their identities, in one pass over the
    arguments. Arrays inside a @qgraph.struct get no gradient: a struct holding one with a gradient
    raises (never a silent zero)."""
    arrays: dict[int, object] = {}
    keys: dict[int, tuple] = {}
    for k, a in enumerate(args):
        t = type(a)
        if t is Ndarray:
            if src.params[k].source is None:
                arrays[k], keys[k] = a, (a.address, a.nbytes)
        elif t is float or t is int or t is bool:
            continue
        elif getattr(t, "_qgraph_struct", False):
            _no_gradient_in(src.params[k].name, a, who)
        elif src.params[k].source is None and is_array(a):
            arrays[k], keys[k] = a, identity(a)
    return arrays, keys


def _no_gradient_in(name: str, struct, who: str) -> None:
    for f in struct.__dataclass_fields__:
        a = getattr(struct, f)
        if isinstance(a, Ndarray) and a.grad is not None:
            raise QgraphError(f"{who}: the struct argument '{name}' holds an array with a gradient; arrays "
                              "inside a @qgraph.struct get none. Pass that array as an argument of its own to "
                              "differentiate it")


def written_aliases(src, keys: dict[int, tuple], written, who: str) -> dict[int, int]:
    """Position -> the earlier position passing the same memory (`keys`: each array argument's
    identity). Raises where the kernel writes one of them: the adjoint is made for distinct
    arrays, so its gradient would be wrong."""
    first: dict[tuple, int] = {}
    aliases = {}
    for k, key in keys.items():
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


def has_struct_accesses(src) -> bool:
    """Whether the kernel indexes an array inside a struct argument (or passes one to an atomic)."""
    return bool(_accesses(src))


def _accesses(src) -> tuple[tuple[str, bool], ...]:
    found = _STRUCT_PATHS.get(id(src))
    if found is None:
        found = _STRUCT_PATHS[id(src)] = (src, _struct_accesses(src))
    return found[1]


def struct_arrays(src, args: tuple) -> tuple[dict[str, object], dict[str, object]]:
    """The float qgraph arrays inside struct arguments that the kernel writes and reads, by path
    (`s.a`): a tape follows no gradient through them, so it refuses what would need one."""
    written: dict[str, object] = {}
    read: dict[str, object] = {}
    for path, store in _accesses(src):
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
