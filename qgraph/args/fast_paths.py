"""The fast paths of argument resolution, as structured pieces: one `ArgPath` per way an argument resolves.

A path is a guard (a test on `t`, the argument's type, and on the argument `a<k>` itself), the
statements it runs first, and its key-text and value parts; `args.resolve` chains an argument's
paths into `if / elif / else`, the slow path last. A kind's path is composed, never patched:
what a caller needs differently (a mutable flag, a read-only check, another device) is a field.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..dtypes import as_dtype
from ..lang.generated import Lines
from .kinds import I64, INT_RANGES, SCALAR_KINDS, WEAK_FLOAT, WEAK_INT, arg_type, array_sig
from .structs import RESOLVED_ATTR, STRUCT_EPOCH, STRUCT_RESOLVERS, cached_resolution
from .vectors import CONVERTERS, as_elements, element_sig

Hop = Callable[[str], str]  # an argument's name -> the statement sending the call to the device it lives on


@dataclass(frozen=True)
class ArgPath:
    """Where `guard` holds (None: always, as the slow path's `else:`), run `setup`, then
    `s<k>, v<k> = key, value` (or `= pair`, one expression giving both), then `checks`.
    `unstable`: whether the result may change without an assignment (the resolver's mutable
    flag then goes False), or the condition under which it may. `leave`: a statement run
    instead of resolving."""

    guard: str | None
    key: str = ""
    value: str = ""
    pair: str = ""
    setup: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()
    unstable: bool | str = False
    leave: str = ""

    def emit(self, out: Lines, k: int, flag: str) -> None:
        out.line(*self.setup)
        if self.leave:
            out.line(self.leave)
            return
        out.line(f"s{k}, v{k} = {self.pair or f'{self.key}, {self.value}'}", *self.checks)
        if flag and self.unstable is True:
            out.line(f"{flag} = False")
        elif flag and self.unstable:
            with out.block(f"if {self.unstable}:"):
                out.line(f"{flag} = False")


def emit_chain(out: Lines, paths: list[ArgPath], k: int, flag: str) -> None:
    """`if / elif / else` over an argument's paths (a single unguarded path: its statements alone)."""
    for i, path in enumerate(paths):
        if path.guard is None and i == 0:
            path.emit(out, k, flag)
            continue
        with out.block("else:" if path.guard is None else f"{'elif' if i else 'if'} {path.guard}:"):
            path.emit(out, k, flag)


# --------------------------------------------------------------------------- the pieces


def array_paths(k: int, a: str, arch: str, ns: dict, on_device: bool = False, hop: Hop | None = None,
                written_line: int | None = None) -> list[ArgPath]:
    """A qgraph array (key text and values precomputed on the array), or a NumPy array on cpu.
    `on_device`: only a cuda array on the launcher's device `_dev`; one on another device runs
    `hop(a)` (the statement sending the call there) where given, else takes the slow path.
    `written_line`: the kernel writes the array there, so a read-only NumPy array raises."""
    field = "_host" if arch == "cpu" else "_abi"
    test = f"{a}._device is _dev" if on_device else f"{a}.{field} is not None"
    paths = [ArgPath(f"t is _Ndarray and {test}", f"{a}._sig", f"{a}.{field}")]
    if on_device and hop:
        paths.append(ArgPath(f"t is _Ndarray and {a}._device is not None", leave=hop(a)))
    if arch == "cpu":
        ns["_numpy_sig"], ns["_np_ndarray"] = numpy_sig, np.ndarray
        checks = ()
        if written_line is not None:
            ns["_read_only"] = read_only_error
            checks = (f"if not {a}.flags.writeable: raise _read_only(_names[{k}], {written_line})",)
        paths.append(ArgPath("t is _np_ndarray", f"_numpy_sig({a}, _names[{k}])", a, checks=checks, unstable=True))
    return paths


def free_scalar_paths(k: int, a: str, arch: str, ns: dict) -> list[ArgPath]:
    """An unannotated Python float/int or NumPy scalar: its own type decides the kind."""
    lo, hi = INT_RANGES[I64]
    ns.update({"_np_scalars": _NUMPY_SCALARS[arch], "_WF": WEAK_FLOAT, "_WI": WEAK_INT})
    if arch == "cpu":
        return [ArgPath("t is float", "_WF", a), ArgPath(f"t is int and {lo} <= {a} <= {hi}", "_WI", a),
                ArgPath("t in _np_scalars", "_np_scalars[t]", a)]
    ns["_pack_d"], ns["_pack_q"] = arg_type(WEAK_FLOAT).pack, arg_type(WEAK_INT).pack
    return [ArgPath("t is float", "_WF", f"_pack_d({a})"),
            ArgPath(f"t is int and {lo} <= {a} <= {hi}", "_WI", f"_pack_q({a})"),
            ArgPath("t in _np_scalars", pair=f"_np_scalars[t]({a})")]


def struct_path(k: int, a: str, arch: str, ns: dict, on_device: bool = False) -> ArgPath:
    """A struct of a class seen before (the slow path adds classes): its resolution cached on it
    (args.structs), else resolved; on a device, the cache also says which device it was checked for."""
    attr = RESOLVED_ATTR[arch]
    ns.update({"_structs": STRUCT_RESOLVERS[arch], "_epoch": STRUCT_EPOCH, "_cached": cached_resolution})
    fresh = "c is not None and c[0] == _epoch[0]" + (" and c[2] is _dev" if on_device else "")
    resolve = f"_struct_on({a})" if on_device else f"_structs[t]({a})"
    # a nested struct is stable if it cached its own resolution
    return ArgPath("t in _structs", pair=f"c[1] if {fresh} else {resolve}", setup=(f"c = {a}.{attr}",),
                   unstable=f"not _cached({a}, '{attr}', _epoch[0])")


def fixed_scalar_test(k: int, a: str, kind, ns: dict) -> str:
    """When (on `t = type(a)`) a Python number converts to an annotated scalar kind on a fast path;
    the rest (out of range, inf, nan, a float for an int) goes to the slow path, which names it."""
    if kind.dtype.kind == "f":
        ns[f"_fmax{k}"] = float(np.finfo(kind.dtype).max)
        return f"(t is float or t is int) and -_fmax{k} <= {a} <= _fmax{k}"
    return "t is bool" if kind.dtype.kind == "b" else f"t is int and {kind.int_range[0]} <= {a} <= {kind.int_range[1]}"


def fixed_scalar_path(k: int, a: str, fix: str, arch: str, ns: dict) -> ArgPath:
    """An annotated scalar: Python numbers that fit convert to the fixed kind, and a NumPy scalar
    of the annotated type itself always fits (np.float32(1.0) for `a: qgraph.f32`)."""
    kind = arg_type(fix)
    ns[f"_fix{k}"], ns[f"_own{k}"] = fix, kind.dtype.type
    ns[f"_conv{k}"] = kind.dtype.type if arch == "cpu" else kind.pack
    return ArgPath(f"{fixed_scalar_test(k, a, kind, ns)} or t is _own{k}", f"_fix{k}", f"_conv{k}({a})")


def vector_path(k: int, a: str, fix: str, arch: str, ns: dict) -> ArgPath:
    """`g: qgraph.vec2`: its components, converted on every call (a tuple or array may change in place)."""
    ns[f"_fix{k}"], ns[f"_vec{k}"] = fix, functools.partial(CONVERTERS[arch], arg_type(fix))
    return ArgPath(None, f"_fix{k}", f"_vec{k}({a}, _names[{k}])", unstable=True)


def slow_path(k: int, a: str) -> ArgPath:
    return ArgPath(None, pair=f"_slow({a}, _names[{k}], _fixed[{k}])", unstable=True)


def element_check(k: int, element: tuple, ns: dict) -> Lines:
    """After resolution: a plain array passed for `x: qgraph.vec3[:]` is read as an array of vectors."""
    ns.update({f"_want{k}": element_sig(element), f"_elem{k}": element, "_as_elements": as_elements})
    out = Lines()
    with out.block(f"if s{k} is not _want{k}:"):
        out.line(f"s{k} = _as_elements(s{k}, v{k}, _names[{k}], _elem{k})")
    return out


# --------------------------------------------------------------------------- what the pieces call

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
