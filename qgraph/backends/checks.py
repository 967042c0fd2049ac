"""Checks and error translation both backends' launchers share (flag, bounds, compile errors)."""

from __future__ import annotations

import ast
import os

import numpy as np

from ..args.kinds import FlagKind, arg_type
from ..args.resolve import type_annotation
from ..compiler.compile_depth import room_to_recurse
from ..errors import QgraphSyntaxError
from ..lang.flat.view import FlatSource, flat_source
from ..lang.front.parse import UNRESOLVED, KernelSource, syntax_error
from ..lang.front.regions import RepeatLoop, control_regions, flags_of
from ..lang.front.writes import written_names
from ..lang.options import KernelOptions
from ..lang.types.vector_types import is_vector_value


def fixed_scalar_types(src: KernelSource) -> tuple[str | None, ...]:
    """Types fixed by parameter annotations: scalars (`dt: float`, `n: qgraph.i32`) and
    vectors passed by value (`g: qgraph.vec2`)."""
    fixed = []
    for p in src.params:
        ann = None
        if p.annotation is not None:
            obj = src.resolve(p.annotation)
            ann = type_annotation(obj) if obj is not UNRESOLVED else None
        fixed.append(ann)
    return tuple(fixed)


def display_names(src: KernelSource) -> tuple[str, ...]:
    """Parameter names for error messages: implicit ones (module-level arrays) say so."""
    return tuple(p.name if p.source is None else f"global {p.name}" for p in src.params)


def element_annotations(src: KernelSource) -> tuple | None:
    """(element extents, ndim, dtype) of each parameter annotated `qgraph.vec3[:]` & co, or None."""
    from ..lang.types.vector_types import ArrayType

    found = []
    for p in src.params:
        obj = None
        ann = p.annotation
        if isinstance(ann, ast.Subscript):  # qgraph.vec3[:] / qgraph.vec3[:, :], read without running it
            dims = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            element = src.resolve(ann.value)
            if all(isinstance(d, ast.Slice) for d in dims) and hasattr(element, "__getitem__") \
                    and element is not UNRESOLVED:
                try:
                    obj = element[(slice(None),) * len(dims)]
                except TypeError:
                    obj = None
        found.append((obj.element.shape, obj.ndim, obj.element.dtype) if isinstance(obj, ArrayType) else None)
    return tuple(found) if any(f is not None for f in found) else None


def flag_params(src: KernelSource) -> tuple[int, ...]:
    """Positions of the parameters that are device-loop or branch flags, in tree order, each once."""
    return tuple(src.param_names.index(flag) for flag in flags_of(src.body)
                 if flag in src.param_names)  # a struct's field: checked per signature (flat view)


def check_repeat_counts(src: KernelSource, key: tuple[str, ...]) -> None:
    """TypeError unless every qgraph.repeat count is an integer scalar."""
    counts = [r.count for r in control_regions(src.body) if isinstance(r, RepeatLoop)]
    counts += [t.count for t in src.tasks if getattr(t, "count", None)]  # interchanged loops (lang.front.interchange)
    for count in counts:
        if count in src.param_names:
            kind = arg_type(key[src.param_names.index(count)])
            if kind.is_array or kind.dtype.kind not in "iu" or getattr(kind, "is_struct", False):
                raise TypeError(f"qgraph.repeat count '{count.replace('__', '.')}' must be an integer "
                                f"scalar, got {kind.sig}; pass an int")


def check_flag_types(src: KernelSource, key: tuple[str, ...]) -> None:
    """TypeError unless every flag is an int32 array of ndim 0 or 1."""
    for index in flag_params(src):
        if not FlagKind.accepts(key[index]):
            name = src.param_names[index].replace("__", ".")
            raise TypeError(f"flag '{name}' must be an int32 array of shape () or (1,), "
                            f"got {key[index]}; create it with qgraph.ndarray(qgraph.i32, ())")


def flag_shape_error(src: KernelSource, index: int, shape) -> TypeError:
    return TypeError(f"flag '{src.param_names[index]}' must be an int32 array of shape () or (1,), "
                     f"got shape {tuple(shape)}")


def compile_error(src: KernelSource, key: tuple[str, ...], error: Exception, task=None) -> QgraphSyntaxError:
    """A numba compile failure as a QgraphSyntaxError naming the user's source line."""
    from ..compiler.numba_adapter import error_locations, error_summary
    from .numba_errors import explain

    summary, text = error_summary(error)
    summary = explain(summary) or summary
    found = error_locations(error)
    target = os.path.abspath(src.filename)
    last = max((getattr(n, "end_lineno", 0) or 0) for n in ast.walk(src.fn_def))
    # numba lists the failing statement, then the enclosing task and runner lines: in the
    # kernel's own span, the deepest (largest) line is the statement itself.
    user = [n for f, n in found if os.path.abspath(f) == target and src.lineno <= n <= last]
    lineno = max(user) if user else (task.lineno if task is not None else src.lineno)
    signature = ", ".join(f"{n}: {t}" for n, t in zip(src.param_names, key))
    where = f"task {task.index} of kernel {src.name}" if task is not None else f"kernel {src.name}"
    message = (f"cannot compile {where} for ({signature}): {summary}\n"
               f"(compiler said:)\n{text}")
    return syntax_error(message, src.filename, lineno)


def check_outside_values(src: KernelSource, key: tuple[str, ...]) -> None:
    """A list, dict or set read from the module or the enclosing function is an error naming it
    and the line, the same on both backends (numba's own words differ per backend)."""
    from ..lang.front.globals_used import unusable_globals

    for owner, name, type_name, line in unusable_globals(src):
        signature = ", ".join(f"{n}: {t}" for n, t in zip(src.param_names, key))
        raise syntax_error(f"cannot compile kernel {src.name} for ({signature}): the global '{name}' is a "
                           f"{type_name}, which kernels cannot use: pass it as an argument (an array or a number)",
                           owner.filename, line)


def check_deterministic(src: KernelSource, key: tuple[str, ...]) -> None:
    """In deterministic mode a float scatter (an atomic whose target varies by iteration)
    would sum in a different order each run: reject it, naming the line."""
    from ..lang.lower.updates import task_updates

    for task in src.tasks:
        for target, op, lineno in task_updates(src, task)[1]:
            kind = arg_type(key[src.param_names.index(target)])
            if kind.dtype.kind == "f" and op in ("add", "sub"):
                raise src.error(
                    f"deterministic mode: '{target}' is updated with a float atomic {op} whose element depends on "
                    "the loop variables (a scatter), which cannot be made bit-identical cheaply; accumulate in an "
                    "integer array (fixed point), give each iteration its own element, or turn deterministic "
                    "mode off for this kernel", lineno)


def check_signature(src: KernelSource, key: tuple[str, ...], args: tuple, bounds, options: KernelOptions) -> FlatSource:
    """The checks of a new signature, the same on both backends and in this order, and its flat
    view (lang.flat.view): flag shapes, loop bounds (`bounds`, the host bounds function, run
    on `args`), outside values, flag types (struct fields included), qgraph.repeat counts,
    and with `options.deterministic` the float scatters it rejects."""
    for k in flag_params(src):
        shape = tuple(getattr(args[k], "shape", ()))  # not an array: check_flag_types says so
        if shape not in ((), (1,)):
            raise flag_shape_error(src, k, shape)
    check_flags_written(src)
    check_bounds(src, key, bounds, args)
    check_outside_values(src, key)
    with room_to_recurse():  # a chain of nested helpers flattens one level deeper each (compiler.compile_depth)
        flat = flat_source(src, [arg_type(sig) for sig in key], options.default_float)
    check_flag_types(flat.src, flat.key)
    check_repeat_counts(src, key)  # an interchanged loop's count (a task's now, lang.front.interchange)
    check_repeat_counts(flat.src, flat.key)
    if options.deterministic:
        check_deterministic(flat.src, flat.key)
    return flat


def check_flags_written(src: KernelSource) -> None:
    """A graph_while kernel that never writes its flag runs one pass (flag 0) or until the runaway
    guard (flag set), whatever the data: a mistake (the flag kept in a local), raised here."""
    flag = src.graph_while
    if flag is None or src.adjoint is not None:
        return
    nodes = [n for task in src.tasks for stmt in task.body for n in ast.walk(stmt)]
    root, _, field = flag.partition(".")
    written = root in written_names(src, nodes, frozenset()) if not field else any(
        isinstance(n, (ast.Assign, ast.AugAssign)) and any(
            isinstance(t, ast.Subscript) and ast.unparse(t.value) == flag
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])) for n in nodes)
    if not written:
        raise src.error(f"kernel {src.name}: graph_while={flag!r}, but the kernel never writes `{flag}`, so the "
                        "loop would run one pass or until the runaway guard, whatever the data; set the flag in "
                        f"the body (`{flag}[0] = 1 if change[0] > tol else 0`), not in a local variable", src.lineno)


def check_bounds(src, key: tuple, bounds, args: tuple) -> None:
    """Evaluate the loop bounds once per specialisation; a failure names the loop's line."""
    if not any(t.parallel for t in src.tasks):
        return
    try:
        bounds(*args)
    except Exception as e:
        lineno = src.lineno
        tb = e.__traceback__
        while tb is not None:  # the bounds function carries the user's file and line numbers
            if tb.tb_frame.f_code.co_name == "_qg_bounds":
                lineno = tb.tb_lineno
            tb = tb.tb_next
        signature = ", ".join(f"{n}: {t}" for n, t in zip(src.param_names, key))
        raise syntax_error(f"kernel {src.name}: a parallel loop's bounds cannot be evaluated for ({signature}): "
                           f"{type(e).__name__}: {e}", src.filename, lineno) from e


def host_bounds(src: KernelSource):
    """The host function evaluating every parallel loop's bounds (lang.lower.bounds.bounds_function)."""
    from ..lang.lower.bounds import bounds_function

    return bounds_function(src)


class _Missing:
    def __repr__(self) -> str:
        return "<deleted>"


MISSING = _Missing()


def frozen_number_lines(src: KernelSource, ns: dict) -> list[str]:
    """Launch lines raising when a number compiled into the kernel changed: a module-level
    one (holder: the module dict) or one read from the enclosing function (holder: its
    closure cell). Values as now: a launcher is created at the first call after init/reset."""
    lines = []
    ns["_fmiss"] = MISSING
    ns["_stale"] = lambda k, now: stale_number_error(src, k, now)
    for k, (holder, name) in enumerate(src.frozen):
        ns[f"_fg{k}"] = holder
        if isinstance(holder, dict):
            ns[f"_fv{k}"] = value = holder.get(name, MISSING)
            lines.append(f"    _fx = _fg{k}.get({name!r}, _fmiss)")
        else:
            ns[f"_fv{k}"] = value = _cell_value(holder)
            lines += ["    try:", f"        _fx = _fg{k}.cell_contents", "    except ValueError:",
                      "        _fx = _fmiss"]
        if is_vector_value(value):  # rebound to another value, or changed in place: its bytes differ
            ns["_vsame"] = same_vector
            ns["_vstale"] = lambda k, then, now: stale_vector_error(src, k, then, now)
            ns[f"_fb{k}"] = value.tobytes()
            lines += [f"    if _fx is not _fv{k} and not _vsame(_fx, _fv{k}) or _fx.tobytes() != _fb{k}:",
                      f"        raise _vstale({k}, _fv{k}, _fx)"]
        else:
            lines += [f"    if _fx is not _fv{k} and _fx != _fv{k}:",
                      f"        raise _stale({k}, _fx)"]
    return lines


def _cell_value(cell) -> object:
    try:
        return cell.cell_contents
    except ValueError:
        return MISSING


def same_vector(now: object, then) -> bool:
    """Whether a name rebound from the vector `then` holds an equal vector."""
    return is_vector_value(now) and now.dtype == then.dtype and now.shape == then.shape and \
        now.tobytes() == then.tobytes()


def _where(holder) -> tuple[str, str]:
    """('module-level ', '') for a module's name, ('', ' read from the enclosing function') for a closure's."""
    return ("module-level ", "") if isinstance(holder, dict) else ("", " read from the enclosing function")


def stale_number_error(src: KernelSource, k: int, now: object):
    from ..errors import QgraphError

    holder, name = src.frozen[k]
    where, origin = _where(holder)
    return QgraphError(f"kernel {src.name}: the {where}number {name}{origin} changed after the kernel was compiled "
                       f"with it (now {now!r}); numbers read from outside a kernel are compile-time constants. "
                       f"Pass it as an argument (def {src.name}(..., {name}: float)) to vary it per call, or call "
                       "qgraph.reset() to recompile with the new value")


def stale_vector_error(src: KernelSource, k: int, then, now: object):
    from ..errors import QgraphError
    from ..lang.types.vector_types import type_of_value

    holder, name = src.frozen[k]
    where, origin = _where(holder)
    shown = f"({', '.join(f'{c:.7g}' for c in now.reshape(-1).tolist())})" if is_vector_value(now) else repr(now)
    t = type_of_value(then).name
    return QgraphError(f"kernel {src.name}: the {where}{t} {name}{origin} changed after the kernel was compiled with "
                       f"it (now {shown}); vectors read from outside a kernel are compile-time constants. Pass it as "
                       f"an argument (def {src.name}(..., {name.lower()}: qgraph.{t})) to vary it per call, or call "
                       "qgraph.reset() to recompile with the new value")


def numpy_overlap_check(kernel: str, pairs: tuple, names: list[str]):
    """check(*arrays) for the NumPy arrays of `names`: raises lang.front.interchange.overlap_error
    when two of `pairs` share memory other than as the same view."""
    from ..lang.front.interchange import overlap_error

    index = {name: k for k, name in enumerate(names)}

    def check(*arrays) -> None:
        for a, b in pairs:
            x, y = arrays[index[a]], arrays[index[b]]
            if np.may_share_memory(x, y):
                views = {n: (v.__array_interface__["data"][0], v.shape, v.strides, v.itemsize)
                         for n, v in ((a, x), (b, y))}
                error = overlap_error(kernel, ((a, b),), views)
                if error is not None:
                    raise error
    return check
