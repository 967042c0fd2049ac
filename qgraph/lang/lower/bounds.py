"""The host bounds function: every parallel loop's bounds from a call's arguments.

It gives each task's packed bound parameters, iteration count and per-dimension counts
(the CUDA launch parameters); on both backends it also checks the bounds once per
specialisation. A multi-dimensional loop packs its starts, then every dimension's count,
then the total.
"""

from __future__ import annotations

import ast
import operator
import struct

from .. import generated
from ..front.parse import KernelSource
from .lowering import assign, binop, call, function_def, module_of, name_node

_PACK_Q = {n: struct.Struct(f"<{n}q").pack for n in range(1, 2 * 8 + 2)}


def _line(lineno: int) -> ast.AST:
    node = ast.Pass()
    node.lineno = node.end_lineno = lineno
    node.col_offset = node.end_col_offset = 0
    return node


def bounds_function(src: KernelSource):
    """A host function: args -> (packed bound params per parallel task, iteration counts,
    per-dimension counts: a tuple for a multi-dimensional loop, the count for a 1-d one).

    Tasks whose loops have the same bound expressions share one evaluation.
    """
    body: list[ast.stmt] = []
    packed: list[ast.expr] = []
    totals: list[ast.expr] = []
    extents: list[ast.expr] = []
    seen: dict[tuple, tuple[str, str, str]] = {}

    def idx(e: ast.expr) -> ast.expr:
        return call("_qg_index", [e], e)

    for task in src.tasks:
        if not task.parallel:
            continue
        k = task.index
        at = _line(task.lineno)  # errors evaluating these bounds name the loop's line
        signature = tuple(None if e is None else ast.dump(e) for d in task.dims for e in (d.start, d.stop, d.step))
        if signature in seen:
            pack_name, count_name, extent_name = seen[signature]
            packed.append(name_node(pack_name, at))
            totals.append(name_node(count_name, at))
            extents.append(name_node(extent_name, at))
            continue
        if len(task.dims) == 1:
            dim = task.dims[0]
            step = dim.step if dim.step is not None else ast.copy_location(ast.Constant(1), at)
            s, e, d, n = f"_qg_s_{k}", f"_qg_e_{k}", f"_qg_d_{k}", f"_qg_n_{k}"
            body += [assign(s, idx(dim.start), at), assign(e, idx(dim.stop), at), assign(d, idx(step), at),
                     assign(n, call("_qg_len", [call("_qg_range", [name_node(s, at), name_node(e, at),
                                                                     name_node(d, at)], at)], at), at)]
            pieces = [s, d, n]
            extent = n
        else:
            starts, counts = [], []
            for j, dim in enumerate(task.dims):
                s, c = f"_qg_s{j}_{k}", f"_qg_c{j}_{k}"
                count = call("_qg_max", [ast.copy_location(ast.Constant(0), at),
                                         binop(idx(dim.stop), ast.Sub(), name_node(s, at), at)], at)
                body += [assign(s, idx(dim.start), at), assign(c, count, at)]
                starts.append(s)
                counts.append(c)
            n = f"_qg_n_{k}"
            total = name_node(counts[0], at)
            for c in counts[1:]:
                total = binop(total, ast.Mult(), name_node(c, at), at)
            body.append(assign(n, total, at))
            pieces = starts + counts + [n]
            extent = f"_qg_x_{k}"
            body.append(assign(extent, ast.copy_location(ast.Tuple([name_node(c, at) for c in counts], ast.Load()),
                                                         at), at))
        pack_name = f"_qg_b_{k}"
        body.append(assign(pack_name, call(f"_qg_pack{len(pieces)}", [name_node(p, at) for p in pieces], at), at))
        seen[signature] = (pack_name, n, extent)
        packed.append(name_node(pack_name, at))
        totals.append(name_node(n, at))
        extents.append(name_node(extent, at))
    result = ast.Tuple([ast.Tuple(packed, ast.Load()), ast.Tuple(totals, ast.Load()),
                        ast.Tuple(extents, ast.Load())], ast.Load())
    body.append(ast.copy_location(ast.Return(result), src.fn_def))
    fdef = function_def("_qg_bounds", list(src.param_names), body, src.lineno)
    tree = module_of([fdef])
    helpers = {"_qg_index": operator.index, "_qg_len": len, "_qg_range": range, "_qg_max": max}
    helpers.update({f"_qg_pack{n}": pack for n, pack in _PACK_Q.items()})
    ns = generated.namespace(tree, src.globals, src.closure, helpers)
    return generated.tree_function(tree, src.filename, f"bounds of {src.qualname}", ns, "_qg_bounds")
