"""Argument resolution: a call's arguments -> (specialisation key, backend values).

Each launcher inlines the lines of `resolver_lines` into its generated call path:
straight-line fast paths, one per argument, composed from the kinds (qgraph arrays,
NumPy arrays on cpu, Python and NumPy scalars); everything else (CuPy, PyTorch, numba and
DLPack arrays) goes through the slow path here.

Backend values: on CPU, what the numba runner takes (NumPy arrays, scalars); on CUDA, the
argument's by-value kernel parameter bytes in numba's flattened layout (see kinds).
"""

from __future__ import annotations

import functools

import numpy as np

from ..dtypes import as_dtype
from .interop import device_reader, is_device_dlpack
from .kinds import BOOL, I64, INT_RANGES, SCALAR_KINDS, WEAK_FLOAT, WEAK_INT, arg_type, array_sig, scalar_sig
from .structs import RESOLVED_ATTR, STRUCT_EPOCH, is_struct_class, struct_sig
from .vectors import CONVERTERS, as_elements, element_sig, is_vector_value, value_sig, vector_annotation

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

_NUMPY_SIGS: dict[tuple, str] = {}


def numpy_sig(value: np.ndarray, name: str) -> str:
    """The key text of a NumPy array argument (cached per dtype, ndim and layout)."""
    key = (value.dtype, value.ndim, value.flags.c_contiguous)
    sig = _NUMPY_SIGS.get(key)
    if sig is None:
        if not value.dtype.isnative:
            raise TypeError(f"argument '{name}' has non-native byte order ({value.dtype.str}); convert it first: "
                            f"{name}.astype({name}.dtype.newbyteorder('='))")
        dtype = as_dtype(value.dtype, f"argument '{name}'")
        sig = _NUMPY_SIGS[key] = array_sig(dtype, value.ndim, value.flags.c_contiguous)
    return sig


def cpu_slow(value: object, name: str, fixed: str | None) -> tuple[str, object]:
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


# --------------------------------------------------------------------------- fast paths


def _array_fast_path(k: int, a: str, arch: str, on_device: bool = False, hop: str = "") -> list[str]:
    """A qgraph array (key text and values precomputed on the array), or a NumPy array on cpu.
    `on_device`: only a cuda array on the launcher's device `_dev`; one on another device runs
    `hop` (a line with `{a}` for the argument) where given, else takes the slow path."""
    field = "_host" if arch == "cpu" else "_abi"
    test = f"{a}._device is _dev" if on_device else f"{a}.{field} is not None"
    lines = [f"if t is _Ndarray and {test}:", f"    s{k} = {a}._sig; v{k} = {a}.{field}"]
    if on_device and hop:
        lines += [f"elif t is _Ndarray and {a}._device is not None:", "    " + hop.format(a=a)]
    if arch == "cpu":
        lines += ["elif t is _np_ndarray:", f"    s{k} = _numpy_sig({a}, _names[{k}]); v{k} = {a}"]
    return lines


def _free_scalar_fast_path(k: int, a: str, arch: str, ns: dict) -> list[str]:
    """An unannotated Python float/int or NumPy scalar: its own type decides the kind."""
    lo, hi = INT_RANGES[I64]
    ns["_np_scalars"] = _NUMPY_SCALARS[arch]
    if arch == "cpu":
        return [f"elif t is float: s{k} = _WF; v{k} = {a}",
                f"elif t is int and {lo} <= {a} <= {hi}: s{k} = _WI; v{k} = {a}",
                f"elif t in _np_scalars: s{k} = _np_scalars[t]; v{k} = {a}"]
    ns["_pack_d"] = arg_type(WEAK_FLOAT).pack
    ns["_pack_q"] = arg_type(WEAK_INT).pack
    return [f"elif t is float: s{k} = _WF; v{k} = _pack_d({a})",
            f"elif t is int and {lo} <= {a} <= {hi}: s{k} = _WI; v{k} = _pack_q({a})",
            f"elif t in _np_scalars: s{k}, v{k} = _np_scalars[t]({a})"]


def fixed_scalar_test(k: int, a: str, kind, ns: dict) -> str:
    """When (on `t = type(a)`) a Python number converts to an annotated scalar kind on a fast path;
    the rest (out of range, inf, nan, a float for an int) goes to the slow path, which names it."""
    if kind.dtype.kind == "f":
        ns[f"_fmax{k}"] = float(np.finfo(kind.dtype).max)
        return f"(t is float or t is int) and -_fmax{k} <= {a} <= _fmax{k}"
    return "t is bool" if kind.dtype.kind == "b" else f"t is int and {kind.int_range[0]} <= {a} <= {kind.int_range[1]}"


def _fixed_scalar_fast_path(k: int, a: str, fix: str, arch: str, ns: dict) -> list[str]:
    """An annotated scalar: Python numbers convert to the fixed kind."""
    kind = arg_type(fix)
    ns[f"_fix{k}"] = fix
    ns[f"_conv{k}"] = kind.dtype.type if arch == "cpu" else kind.pack
    value = f"_conv{k}({a})"
    # a NumPy scalar of the annotated type itself always fits (np.float32(1.0) for `a: qgraph.f32`)
    ns[f"_own{k}"] = kind.dtype.type
    return [f"if {fixed_scalar_test(k, a, kind, ns)}: s{k} = _fix{k}; v{k} = {value}",
            f"elif t is _own{k}: s{k} = _fix{k}; v{k} = {value}"]


def resolver_lines(names: tuple[str, ...], fixed: tuple[str | None, ...], arch: str, ns: dict,
                   array_type: type, indent: str = "    ", elements: tuple | None = None,
                   mutable_flag: str = "", written: dict | None = None, device_checks: dict | None = None,
                   hop: str = "") -> list[str]:
    """Straight-line code assigning s<k> (key text) and v<k> (value) from argument a<k>.

    `array_type` is qgraph's Ndarray (its key text and values precomputed); `ns` receives
    the constants the lines use. `elements[k]`, when given, is (element extents, ndim,
    dtype) of a parameter annotated as an array of vectors (`x: qgraph.vec3[:]`): a plain
    array of that dtype and trailing shape passed for it is read as one. `mutable_flag`,
    when given, names a local set to False when an argument's key text or value may change
    without an assignment (a NumPy or foreign array, an uncached struct): see args.structs.
    `written` (cpu: parameter position -> line) are the arrays the kernel writes: a read-only
    NumPy array passed for one is a TypeError naming the line. `device_checks` (cuda:
    args.devices.device_checks) makes the lines raise OtherDevice for arrays on another device,
    except that a qgraph array there runs `hop` (a line; `{a}` names the argument) where given.
    """
    unstable = f"; {mutable_flag} = False" if mutable_flag else ""
    ns.update({"_Ndarray": array_type, "_WF": WEAK_FLOAT, "_WI": WEAK_INT, "_fixed": fixed, "_names": names,
               "_np_ndarray": np.ndarray, "_numpy_sig": numpy_sig,
               "_slow": cpu_slow if arch == "cpu" else _cuda_slow_value})
    if device_checks:
        ns.update(device_checks)
    lines = []
    for k, fix in enumerate(fixed):
        a = f"a{k}"
        if fix is not None and getattr(arg_type(fix), "is_vector", False):  # `g: qgraph.vec2`: its components
            ns[f"_fix{k}"], ns[f"_vec{k}"] = fix, functools.partial(CONVERTERS[arch], arg_type(fix))
            lines.append(f"s{k} = _fix{k}; v{k} = _vec{k}({a}, _names[{k}]){unstable}")
            continue
        lines.append(f"t = type({a})")
        if fix is None:
            array_lines = _array_fast_path(k, a, arch, bool(device_checks), hop)
            if arch == "cpu":  # the NumPy array on cpu
                array_lines[3] += unstable
                if written and k in written:
                    ns["_read_only"] = read_only_error
                    array_lines.insert(4, f"    if not {a}.flags.writeable: raise _read_only(_names[{k}], "
                                          f"{written[k]})")
            lines += array_lines + _free_scalar_fast_path(k, a, arch, ns)
            ns["_structs"] = STRUCT_RESOLVERS[arch]  # struct classes seen before (the slow path adds them)
            ns["_epoch"] = STRUCT_EPOCH
            attr = RESOLVED_ATTR[arch]
            lines += ["elif t in _structs:",  # its resolution cached on it (args.structs), else resolve
                      f"    c = {a}.{attr}"]
            if device_checks:  # the cache also says which device its arrays were checked for
                lines.append(f"    s{k}, v{k} = c[1] if c is not None and c[0] == _epoch[0] and c[2] is _dev "
                             f"else _struct_on({a})")
            else:
                lines.append(f"    s{k}, v{k} = c[1] if c is not None and c[0] == _epoch[0] else _structs[t]({a})")
            if mutable_flag:  # a nested struct: stable if it cached its own resolution
                ns["_cached"] = _cached_resolution
                lines.append(f"    if not _cached({a}, '{attr}', _epoch[0]){unstable}")
                lines[-1] = lines[-1].replace("; ", ": ", 1)
        else:  # an annotated parameter is a scalar: no array fast path
            lines += _fixed_scalar_fast_path(k, a, fix, arch, ns)
        lines.append("else:")
        lines.append(f"    s{k}, v{k} = _slow({a}, _names[{k}], _fixed[{k}]){unstable}")
        if elements is not None and elements[k] is not None:
            ns[f"_want{k}"] = element_sig(elements[k])
            ns[f"_elem{k}"] = elements[k]
            ns["_as_elements"] = as_elements
            lines.append(f"if s{k} is not _want{k}:")
            lines.append(f"    s{k} = _as_elements(s{k}, v{k}, _names[{k}], _elem{k})")
    return [indent + line for line in lines]


def read_only_error(name: str, line: int) -> TypeError:
    return TypeError(f"argument '{name}' is a read-only NumPy array, but the kernel writes into it (line {line}); "
                     f"pass a writable array (np.array({name}) copies it)")


def _numpy_scalar_table(arch: str) -> dict:
    """NumPy scalar type -> key text (cpu) or -> function giving (key text, bytes) (cuda)."""
    table: dict = {}
    for kind in SCALAR_KINDS:
        if arch == "cpu":
            table[kind.dtype.type] = kind.sig
        else:
            table[kind.dtype.type] = (lambda sig_, pack_: lambda v: (sig_, pack_(v)))(kind.sig, kind.pack)
    return table


_NUMPY_SCALARS = {"cpu": _numpy_scalar_table("cpu"), "cuda": _numpy_scalar_table("cuda")}


# --------------------------------------------------------------------------- structs


STRUCT_RESOLVERS: dict[str, dict] = {"cpu": {}, "cuda": {}}  # per backend: struct class -> resolver
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
    import dataclasses

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
    lines = [f"    c = obj.{attr}", "    if c is not None and c[0] == _epoch[0]:", "        return c[1]",
             "    stable = True"] if cacheable else []
    lines += [f"    a{k} = obj.{f.name}" for k, f in enumerate(fields)]
    lines += resolver_lines(names, tuple(fixed), arch, ns, ARRAY_TYPE[0],
                            elements=tuple(elements) if any(e is not None for e in elements) else None,
                            mutable_flag="stable" if cacheable else "")
    comma = "," if len(fields) == 1 else ""
    key = f"({', '.join(f's{k}' for k in range(len(fields)))}{comma})"
    values = f"({', '.join(f'v{k}' for k in range(len(fields)))}{comma})"
    lines += [f"    e = _sigs.get({key})",
              "    if e is None:",
              f"        e = _sigs[{key}] = _new(_cls, {key})",
              f"    r = (e[0], _flat({values})) if e[1] else (e[0], {values})"]
    if cacheable:  # every leaf immutable (nested structs: cached) -> remember it until any assignment
        lines += ["    if stable:", f"        obj.__dict__['{attr}'] = (_epoch[0], r, None)"]
    lines.append("    return r")
    source = "def resolve(obj):\n" + "\n".join(lines) + "\n"
    return generated.function(source, "resolve", f"resolver of struct {cls.__qualname__} ({arch})", ns)


def _cached_resolution(value: object, attr: str, epoch: int) -> bool:
    """Whether `value` is a struct whose resolution was cached in this epoch."""
    c = getattr(value, attr, None)
    return c is not None and c[0] == epoch


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
