"""Argument resolution: a call's arguments -> (specialisation key, backend values).

Each launcher adds `resolution` (a lang.generated.Lines piece) to its generated call path:
per argument, straight-line fast paths chained from the kinds' pieces (args.fast_paths:
qgraph arrays, NumPy arrays on cpu, Python and NumPy scalars, structs); everything else
(CuPy, PyTorch, numba and DLPack arrays) goes through the slow path here.

Backend values: on CPU, what the numba runner takes (NumPy arrays, scalars); on CUDA, the
argument's by-value kernel parameter bytes in numba's flattened layout (see kinds).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..dtypes import as_dtype
from ..lang.generated import Lines
from ..lang.types.vector_types import is_vector_value
from .fast_paths import (
    ArgPath,
    Hop,
    array_paths,
    element_check,
    emit_chain,
    fixed_scalar_path,
    free_scalar_paths,
    numpy_sig,
    slow_path,
    struct_path,
    vector_path,
)
from .interop import device_reader, is_device_dlpack
from .kinds import BOOL, WEAK_FLOAT, WEAK_INT, arg_type, scalar_sig
from .structs import RESOLVED_ATTR, STRUCT_EPOCH, STRUCT_RESOLVERS, is_struct_class, struct_sig
from .vectors import CONVERTERS, value_sig, vector_annotation

# --------------------------------------------------------------------------- scalars


def scalar_annotation(annotation: object) -> str | None:
    """The scalar type an annotation fixes (float, int, bool, qgraph.f32, ...), or None."""
    if annotation is float:
        return WEAK_FLOAT
    if annotation is int:
        return WEAK_INT
    if annotation is bool:
        return BOOL
    try:
        dt = np.dtype(annotation) if isinstance(annotation, type) and issubclass(annotation, np.generic) else None
    except TypeError:
        dt = None
    if dt is not None:
        return scalar_sig(as_dtype(dt))
    return None


def type_annotation(annotation: object) -> str | None:
    """The type an annotation fixes: a scalar (`dt: float`) or a vector (`g: qgraph.vec2`), or None."""
    return scalar_annotation(annotation) or vector_annotation(annotation)


def scalar_value(value: object, name: str, fixed: str | None) -> tuple[str, object]:
    """(key text, Python/NumPy value) of a scalar argument, or raise TypeError."""
    if fixed is not None:
        dtype = arg_type(fixed).dtype
        if isinstance(value, (bool, int, float, np.generic)) and not isinstance(value, (complex, np.complexfloating)):
            if dtype.kind in "iu" and isinstance(value, (float, np.floating)):
                raise TypeError(f"argument '{name}': expected an integer ({fixed}), got {type(value).__name__}")
            if dtype.kind in "iu":
                lo, hi = arg_type(fixed).int_range
                if not lo <= int(value) <= hi:
                    raise TypeError(f"argument '{name}': {value} does not fit in {dtype.name}")
            if dtype.kind == "f":
                return fixed, _float_value(value, name, dtype)
            return fixed, dtype.type(value)
        kind = "an array" if _is_array_like(value) else type(value).__name__
        raise TypeError(f"argument '{name}': expected a {fixed} scalar, got {kind}")
    if isinstance(value, (bool, np.bool_)):
        return BOOL, bool(value)
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise TypeError(f"argument '{name}': {value} does not fit in int64")
        return WEAK_INT, value
    if isinstance(value, float):
        return WEAK_FLOAT, value
    if isinstance(value, np.generic) and value.dtype.kind in "iuf":
        return scalar_sig(as_dtype(value.dtype, f"argument '{name}'")), value
    raise TypeError(f"argument '{name}': {type(value).__name__} is not a supported kernel argument; "
                    "pass a qgraph/NumPy/device array, an int, float or bool, or a vector (qgraph.vec3(...))")


def _float_value(value, name: str, dtype: np.dtype):
    """`value` as `dtype`, or TypeError where a finite number would overflow to inf."""
    finite = float(np.finfo(dtype).max)
    try:
        big = abs(float(value)) > finite and np.isfinite(float(value))
    except OverflowError:  # an int beyond float64
        big = True
    if big:
        shown = f"{value:.4g}" if isinstance(value, float) else f"{str(value)[:12]}... ({len(str(value))} digits)"
        raise TypeError(f"argument '{name}': {shown} does not fit in {dtype.name} (it would become inf); "
                        f"pass a value within +-{finite:.4g}")
    return dtype.type(value)


def is_qgraph_array(value: object) -> bool:
    """A qgraph.Ndarray (defined in the runtime, above this layer)."""
    return getattr(type(value), "_qgraph_array", False)


def _is_array_like(value: object) -> bool:
    return is_qgraph_array(value) or isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__") \
        or hasattr(value, "__dlpack__")


# --------------------------------------------------------------------------- slow paths

def _traced_number(value: object) -> bool:
    """A number of a traced @qgraph.graph run (capture.tracing.Traced): resolved as its value."""
    return getattr(type(value), "_qgraph_traced", False)


def cpu_slow(value: object, name: str, fixed: str | None) -> tuple[str, object]:
    if _traced_number(value):
        value = value.value
    if is_struct_class(type(value)):
        return struct_resolver(type(value), "cpu")(value)
    if fixed is not None or is_vector_value(value):
        return _typed_value(value, name, fixed, "cpu")
    if is_qgraph_array(value):
        raise TypeError(f"argument '{name}' is a qgraph array in CUDA device memory but qgraph runs on "
                        "cpu; create arrays after qgraph.init(), or copy with qgraph.from_numpy(a.to_numpy())")
    if isinstance(value, np.ndarray):
        return numpy_sig(value, name), value
    if hasattr(value, "__cuda_array_interface__") or is_device_dlpack(value):
        raise TypeError(f"argument '{name}' is a CUDA device array but qgraph runs on cpu; pass a NumPy "
                        "array or a qgraph.ndarray, or call qgraph.init('cuda')")
    return scalar_value(value, name, fixed)


def _typed_value(value: object, name: str, fixed: str | None, arch: str) -> tuple[str, object]:
    """(key text, backend value) of an annotated scalar or vector argument, or of a vector value."""
    sig = value_sig(value, name) if fixed is None else fixed
    if getattr(arg_type(sig), "is_vector", False):
        return sig, CONVERTERS[arch](arg_type(sig), value, name)
    sig, scalar = scalar_value(value, name, fixed)
    return sig, scalar if arch == "cpu" else arg_type(sig).pack(scalar)


def cuda_slow(value: object, name: str, fixed: str | None) -> tuple[str, bytes, object]:
    """(key text, parameter bytes, owner to keep alive) for anything but the fast paths."""
    if _traced_number(value):
        value = value.value
    if is_struct_class(type(value)):
        sig, leaves = struct_resolver(type(value), "cuda")(value)
        return sig, leaves, value
    if fixed is not None or is_vector_value(value):
        return (*_typed_value(value, name, fixed, "cuda"), None)
    if is_qgraph_array(value):
        raise TypeError(f"argument '{name}' is a qgraph array in host memory (created on cpu) but qgraph "
                        "runs on cuda; create arrays after qgraph.init('cuda'), or copy it with "
                        "qgraph.from_numpy(a.to_numpy())")
    if isinstance(value, np.ndarray):
        if name.startswith("global "):  # a module-level array the kernel reads (lang.front.globals_used)
            name = name[len("global "):]
            raise TypeError(f"the kernel reads the module-level NumPy array '{name}', which is in host memory, but "
                            f"qgraph runs on cuda; make it a device array where it is defined ({name} = "
                            f"qgraph.from_numpy(...)), or pass it as an argument")
        raise TypeError(f"argument '{name}' is a host NumPy array but qgraph runs on cuda; copy it to the "
                        f"device first: {name} = qgraph.from_numpy({name})")
    reader = device_reader(type(value))
    if reader is not None:
        view = reader(value, name)
        return view.sig, view.abi, view.owner
    sig, scalar = scalar_value(value, name, fixed)
    return sig, arg_type(sig).pack(scalar), None


def _cuda_slow_value(value: object, name: str, fixed: str | None) -> tuple[str, bytes]:
    sig, abi, _owner = cuda_slow(value, name, fixed)
    return sig, abi


# --------------------------------------------------------------------------- resolution


def resolution(names: tuple[str, ...], fixed: tuple[str | None, ...], arch: str, ns: dict, array_type: type,
               elements: tuple | None = None, mutable_flag: str = "", written: dict | None = None,
               device_checks: dict | None = None, hop: Hop | None = None) -> Lines:
    """Straight-line code assigning s<k> (key text) and v<k> (value) from argument a<k>, each
    argument's fast paths (args.fast_paths) chained before its slow path.

    `array_type` is qgraph's Ndarray (its key text and values precomputed); `ns` receives
    the constants the lines use. `elements[k]`, when given, is (element extents, ndim,
    dtype) of a parameter annotated as an array of vectors (`x: qgraph.vec3[:]`): a plain
    array of that dtype and trailing shape passed for it is read as one. `mutable_flag`,
    when given, names a local set to False when an argument's key text or value may change
    without an assignment (a NumPy or foreign array, an uncached struct): see args.structs.
    `written` (cpu: parameter position -> line) are the arrays the kernel writes: a read-only
    NumPy array passed for one is a TypeError naming the line. `device_checks` (cuda:
    args.devices.device_checks) makes the lines raise OtherDevice for arrays on another device,
    except that a qgraph array there runs `hop(a<k>)`, a statement, where given.
    """
    ns.update({"_Ndarray": array_type, "_fixed": fixed, "_names": names,
               "_slow": cpu_slow if arch == "cpu" else _cuda_slow_value})
    ns.update(device_checks or {})
    out = Lines()
    for k, fix in enumerate(fixed):
        a = f"a{k}"
        if fix is not None and getattr(arg_type(fix), "is_vector", False):  # `g: qgraph.vec2`: its components
            paths = [vector_path(k, a, fix, arch, ns)]
        else:
            out.line(f"t = type({a})")
            paths = _argument_paths(k, a, fix, arch, ns, bool(device_checks), hop, (written or {}).get(k))
        emit_chain(out, paths, k, mutable_flag)
        if elements is not None and elements[k] is not None:
            out.add(element_check(k, elements[k], ns))
    return out


def _argument_paths(k: int, a: str, fix: str | None, arch: str, ns: dict, on_device: bool, hop: Hop | None,
                    written_line: int | None) -> list[ArgPath]:
    """An argument's fast paths, then its slow path: an annotated scalar is never an array."""
    if fix is not None:
        return [fixed_scalar_path(k, a, fix, arch, ns), slow_path(k, a)]
    return [*array_paths(k, a, arch, ns, on_device, hop, written_line), *free_scalar_paths(k, a, arch, ns),
            struct_path(k, a, arch, ns, on_device), slow_path(k, a)]


def resolver_lines(names: tuple[str, ...], fixed: tuple[str | None, ...], arch: str, ns: dict,
                   array_type: type, **options) -> list[str]:
    """`resolution(...)` as the lines of a function body (for launchers still built from text)."""
    return resolution(names, fixed, arch, ns, array_type, **options).rendered(1)


# --------------------------------------------------------------------------- structs


ARRAY_TYPE: list = [None]  # qgraph.Ndarray, registered by the runtime (above this layer)


def struct_resolver(cls: type, arch: str):
    """`resolve(obj) -> (key text, leaf values)` for a @qgraph.struct class, generated once
    per backend from the same fast paths as kernel parameters (see args.structs)."""
    fn = STRUCT_RESOLVERS[arch].get(cls)
    if fn is None:
        fn = STRUCT_RESOLVERS[arch][cls] = _generate_struct_resolver(cls, arch)
    return fn


def _field_annotations(cls: type) -> dict:
    import typing

    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not evaluate: take types from the values
        return {}


def _generate_struct_resolver(cls: type, arch: str):
    from ..lang import generated

    fields = dataclasses.fields(cls)
    hints = _field_annotations(cls)
    fixed, elements = [], []
    for f in fields:
        ann = hints.get(f.name)
        fixed.append(type_annotation(ann) if ann is not None else None)
        element = getattr(ann, "element", None)
        elements.append((element.shape, ann.ndim, element.dtype) if element is not None else None)
    names = tuple(f"{cls.__name__}.{f.name}" for f in fields)
    attr = RESOLVED_ATTR[arch]
    ns: dict = {"_sigs": {}, "_new": _new_struct_entry, "_cls": cls, "_flat": _flat_leaves, "_epoch": STRUCT_EPOCH}
    cacheable = getattr(cls, "_qg_cacheable", False)
    out = Lines()
    if cacheable:  # its resolution remembered on it (args.structs) until any assignment
        out.line(f"c = obj.{attr}")
        with out.block("if c is not None and c[0] == _epoch[0]:"):
            out.line("return c[1]")
        out.line("stable = True")
    out.line(*(f"a{k} = obj.{f.name}" for k, f in enumerate(fields)))
    out.add(resolution(names, tuple(fixed), arch, ns, ARRAY_TYPE[0], mutable_flag="stable" if cacheable else "",
                       elements=tuple(elements) if any(e is not None for e in elements) else None))
    key, values = _tuple_of("s", len(fields)), _tuple_of("v", len(fields))
    out.line(f"e = _sigs.get({key})")
    with out.block("if e is None:"):
        out.line(f"e = _sigs[{key}] = _new(_cls, {key})")
    out.line(f"r = (e[0], _flat({values})) if e[1] else (e[0], {values})")
    if cacheable:  # every leaf immutable (nested structs: cached) -> remember it until any assignment
        with out.block("if stable:"):
            out.line(f"obj.__dict__['{attr}'] = (_epoch[0], r, None)")
    out.line("return r")
    return generated.function(out.function("resolve(obj)"), "resolve",
                              f"resolver of struct {cls.__qualname__} ({arch})", ns)


def _tuple_of(prefix: str, n: int) -> str:
    """`(s0, s1)`, `(s0,)`: the tuple display of n numbered locals."""
    return f"({', '.join(f'{prefix}{k}' for k in range(n))}{',' if n == 1 else ''})"


def _new_struct_entry(cls: type, field_sigs: tuple) -> tuple[str, bool]:
    """(interned key text, whether a field is a struct or a vector whose leaves must be inlined)."""
    sig = struct_sig(cls, field_sigs)
    return sig, any(getattr(arg_type(s), "is_struct", False) or getattr(arg_type(s), "is_vector", False)
                    for s in field_sigs)


def _flat_leaves(values: tuple) -> tuple:
    out: list = []
    for v in values:
        if type(v) is tuple:
            out.extend(v)
        else:
            out.append(v)
    return tuple(out)
