"""Struct arguments: `@qgraph.struct` dataclasses of arrays, scalars and other structs.

A struct is one argument for the caller and its leaf fields for the kernel: its kind's key
text names the class and every field's kind, its value is the tuple of its leaves' values
(CPU: arrays and numbers; CUDA: parameter bytes) in field order, nested structs inlined.
The kernel takes each leaf as a parameter of its own (lang.flat.view), so a field that
points to another array on a later call changes parameter bytes (a graph node update),
never the specialisation.

Each struct class gets a resolver per backend, generated once from the same per-argument
fast paths a kernel's own parameters use (args.resolve).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .kinds import KINDS, ArgKind


class StructKind(ArgKind):
    """A struct argument: `fields` are (name, kind) in declaration order."""

    is_struct = True

    def __init__(self, cls: type, fields: tuple[tuple[str, ArgKind], ...]) -> None:
        self.cls = cls
        self.name = cls.__name__
        self.fields = fields
        self.dtype = np.dtype(np.uint8)
        self.sig = struct_text(cls, tuple(k.sig for _, k in fields))

    @property
    def param_sizes(self) -> list[int]:
        return [size for _, k in self.fields for size in k.param_sizes]

    def __repr__(self) -> str:
        return f"StructKind({self.sig})"


def struct_text(cls: type, field_sigs: tuple[str, ...]) -> str:
    names = [f.name for f in dataclasses.fields(cls)]
    return f"{cls.__module__}.{cls.__qualname__}{{{', '.join(f'{n}: {s}' for n, s in zip(names, field_sigs))}}}"


def struct_sig(cls: type, field_sigs: tuple[str, ...]) -> str:
    """The interned key text of a struct whose fields have these key texts."""
    sig = struct_text(cls, field_sigs)
    if sig not in KINDS:
        from .kinds import arg_type

        KINDS[sig] = StructKind(cls, tuple((f.name, arg_type(s)) for f, s in zip(dataclasses.fields(cls), field_sigs)))
    return sig


def is_struct_class(tp: type) -> bool:
    return getattr(tp, "_qgraph_struct", False)


def struct(cls: type | None = None, **dataclass_options):
    """Make a class a kernel argument type: a dataclass whose fields are arrays, numbers
    or other structs. Pass one object; in the kernel, `s.x[i]` reads its field `x`.

    Field annotations work as on kernel parameters: `dt: float`, `n: qgraph.i32`, `x:
    qgraph.vec3[:]`; unannotated (or `object`) fields take their type from the value."""

    def wrap(c: type) -> type:
        if not isinstance(c, type):
            raise TypeError(f"@qgraph.struct decorates a class, got {c!r}")
        if not dataclasses.is_dataclass(c):
            c = dataclasses.dataclass(c, **dataclass_options)
        if not dataclasses.fields(c):
            raise TypeError(f"@qgraph.struct {c.__name__} has no fields")
        for f in dataclasses.fields(c):
            if f.name.startswith("_") or "__" in f.name:
                raise TypeError(f"@qgraph.struct {c.__name__}: field name '{f.name}' may not start with '_' or "
                                "contain '__' (qgraph names the kernel's parameters after them)")
        c._qgraph_struct = True
        _track_changes(c)
        return c

    return wrap if cls is None else wrap(cls)


# Resolving a struct (its leaves' key texts and values) is cached on the object, as
# RESOLVED_ATTR[arch] = (epoch, (key text, values), the CudaDevice whose launcher checked that its
# arrays live there or None), when every leaf is immutable (qgraph arrays,
# numbers, cached structs). Any assignment to any struct's attribute bumps STRUCT_EPOCH, which
# invalidates every cache at once: nested structs need no parent links, and a swapped field
# costs one full resolution, as it did before caching.
STRUCT_EPOCH = [0]
RESOLVED_ATTR = {"cpu": "_qg_resolved_cpu", "cuda": "_qg_resolved_cuda"}
STRUCT_RESOLVERS: dict[str, dict] = {"cpu": {}, "cuda": {}}  # per backend: struct class -> resolver (args.resolve)


def cached_resolution(value: object, attr: str, epoch: int) -> bool:
    """Whether `value` is a struct whose resolution was cached in this epoch."""
    c = getattr(value, attr, None)
    return c is not None and c[0] == epoch


def _track_changes(c: type) -> None:
    """Make assignments to `c`'s attributes bump STRUCT_EPOCH, and keep the caches out of copies
    and pickles; a class with __slots__ or its own __getstate__ is resolved on every call."""
    for attr in RESOLVED_ATTR.values():
        setattr(c, attr, None)  # read through getattr: None = no cache
    if "__slots__" in vars(c) or "__getstate__" in vars(c):
        return
    assign = c.__setattr__
    epoch = STRUCT_EPOCH

    def __setattr__(self, name: str, value) -> None:
        assign(self, name, value)
        epoch[0] += 1

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_qg_resolved_")}

    __setattr__.__qualname__ = f"{c.__qualname__}.__setattr__"
    __getstate__.__qualname__ = f"{c.__qualname__}.__getstate__"
    c.__setattr__ = __setattr__
    c.__getstate__ = __getstate__
    c._qg_cacheable = True
