"""A kernel's parameters seen as a framework operator's (PyTorch's custom operators, JAX's FFI calls):
which are arrays (those the kernel indexes or asks the shape of), which are numbers and of what
Python type, and which arrays the kernel writes. One reading for every framework."""

from __future__ import annotations

import ast

from ..args.resolve import scalar_annotation
from ..lang.front.parse import UNRESOLVED

_INT_SCALARS = {"bool": "bool", "int": "int", "i8": "int", "i16": "int", "i32": "int", "i64": "int", "u8": "int",
                "u16": "int", "u32": "int", "u64": "int"}
_INDEXING_CALLS = ("atomic_add", "atomic_sub", "atomic_min", "atomic_max", "len")


def array_params(src) -> set[str]:
    """Parameters the kernel indexes, asks the shape of or updates atomically: the operator's arrays."""
    names = set(src.param_names)
    found = set()
    for node in ast.walk(src.fn_def):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in names:
            found.add(node.value.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names \
                and node.attr in ("shape", "size", "ndim"):
            found.add(node.value.id)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name) \
                and node.args[0].id in names and getattr(node.func, "attr", getattr(node.func, "id", "")) \
                in _INDEXING_CALLS:
            found.add(node.args[0].id)
    return found


def scalar_type(src, param) -> str:
    """The Python type of a number parameter, "bool", "int" or "float", from its annotation."""
    if param.annotation is None:
        return "float"
    obj = src.resolve(param.annotation)
    text = scalar_annotation(obj) if obj is not UNRESOLVED else None
    if text is None:
        return "float"
    return _INT_SCALARS.get(text, "int" if "int" in text else "float")
