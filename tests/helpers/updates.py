"""The generated update kernels (test_updates.py; compiled to PTX by test_cuda_codegen.py): one per
(context, target shape), doing every update form into its own target."""

from __future__ import annotations

import functools
import linecache
from dataclasses import dataclass

import numpy as np

import qgraph

CONTEXTS = ("reduction", "deterministic", "atomic", "serial")
# form -> (the identifier of its targets, the operation it applies)
FORMS = {"+=": ("iadd", "add"), "-=": ("isub", "sub"), "atomic_add": ("add", "add"),
         "atomic_sub": ("sub", "sub"), "atomic_min": ("min", "min"), "atomic_max": ("max", "max")}
IDENTS = [ident for ident, _ in FORMS.values()]


@qgraph.struct
class Fields:
    """A 0-d field per form."""

    iadd: object
    isub: object
    add: object
    sub: object
    min: object
    max: object


@dataclass(frozen=True)
class Shape:
    """A kind of target: `params` are its kernel parameters, `target(ident, k, scatter)` gives
    the subscript (for `+=`) and the atomic's array and index arguments of form number k, or
    None when it has no index that can vary per iteration (scatter); `read(out, ident, k)`
    gives the updated element and the elements beside it that must keep their start value."""

    name: str
    params: tuple
    target: object
    read: object


def _beside(row: np.ndarray, k: int) -> np.ndarray:
    return np.delete(row.ravel(), k)


def _per_form(prefix: str) -> tuple:
    return tuple(f"{prefix}_{f}" for f in IDENTS)


SHAPES = (
    Shape("0-d", _per_form("z"), lambda f, k, scatter: None if scatter else (f"z_{f}[()]", f"z_{f}, ()"),
          lambda out, f, k: (out[f"z_{f}"][()], [])),
    Shape("1-element", _per_form("one"), lambda f, k, scatter: (f"one_{f}[{'zero[i]' if scatter else 0}]",
                                                                f"one_{f}, {'zero[i]' if scatter else 0}"),
          lambda out, f, k: (out[f"one_{f}"][0], [])),
    Shape("n-d", ("grid",), lambda f, k, scatter: (f"grid[{k}, {'zero[i] + 1' if scatter else 1}, 2]",
                                                   f"grid, ({k}, {'zero[i] + 1' if scatter else 1}, 2)"),
          lambda out, f, k: (out["grid"][k][1, 2], _beside(out["grid"][k], 5))),
    Shape("struct-field", ("s: Fields",), lambda f, k, scatter: None if scatter else (f"s.{f}[()]", f"s.{f}, ()"),
          lambda out, f, k: (out[f"s.{f}"][()], [])),
    Shape("vector-component", ("vc",), lambda f, k, scatter: (f"vc[{k}{' + zero[i]' if scatter else ''}].y",
                                                              f"vc, ({k}{' + zero[i]' if scatter else ''}, 1)"),
          lambda out, f, k: (out["vc"][k][1], _beside(out["vc"][k], 1))),
    Shape("0-d-vector-component", _per_form("vz"),
          lambda f, k, scatter: None if scatter else (f"vz_{f}[()].y", f"vz_{f}, 1"),
          lambda out, f, k: (out[f"vz_{f}"][1], _beside(out[f"vz_{f}"], 1))),
)


def update_statement(form: str, shape: Shape, context: str) -> str | None:
    """The update of form `form` into its target of `shape` in `context` (None: no such case)."""
    ident, _ = FORMS[form]
    k = IDENTS.index(ident)
    if form in ("+=", "-="):
        target = shape.target(ident, k, context == "atomic")
        return None if target is None else f"{target[0]} {form} v"
    call = f"qgraph.{form}({shape.target(ident, k, False)[1]}, v)"
    return f"seen[i, {k}] = {call}" if context == "atomic" else call


@functools.cache
def update_kernel(context: str, shape: Shape):
    """The generated kernel doing every form into `shape` targets in `context` (its source is
    registered with linecache, so errors and tracebacks show the line)."""
    loop = "qgraph.serial(range(x.shape[0]))" if context == "serial" else "range(x.shape[0])"
    name = f"updates_{context}_{shape.name.replace('-', '_')}"
    lines = [f"def {name}(x, zero, seen, {', '.join(shape.params)}):", f"    for i in {loop}:", "        v = x[i]"]
    lines += [f"        {stmt}" for stmt in (update_statement(form, shape, context) for form in FORMS) if stmt]
    source = "\n".join(lines) + "\n"
    filename = f"<test_updates: {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"qgraph": qgraph, "Fields": Fields}
    exec(compile(source, filename, "exec"), namespace)
    return qgraph.kernel(namespace[name], deterministic=context == "deterministic")
