"""Random draws in flattened code (for lang.flat.calls): each `qgraph.random()` becomes a
call of a Philox draw (lang.lower.random_bits) before its statement, with the task's per-iteration
random state set up by `random_prologue`."""

from __future__ import annotations

import ast

import numpy as np

from ...dtypes import float_precision
from ..front import builtins as lang
from . import vector_algebra as alg
from .values import Val, no_keywords

RANDOM_FUNCTIONS = {("random", "f32"): "_qg_rand_uniform_f32", ("random", "f64"): "_qg_rand_uniform_f64",
                    ("randn", "f32"): "_qg_rand_normal_f32", ("randn", "f64"): "_qg_rand_normal_f64",
                    ("randint", None): "_qg_rand_int"}


def draw(fl, fn, node: ast.Call) -> Val:
    """One draw: `_qg_vN = <philox function>(seed, stream, index, draw)` and the per-thread
    draw counter advanced, as statements before the one that uses the number."""
    if fl.task is None:
        raise fl.error(f"qgraph.{fn.__name__}() in a @qgraph.func: draw the number in the kernel and pass it in",
                       node)
    no_keywords(fl, node)
    dtype = None
    if fn is lang.randint:
        if len(node.args) != 2:
            raise fl.error("qgraph.randint(lo, hi) takes two integers", node)
        args = [fl.scalar(a) for a in node.args]
    else:
        if len(node.args) > 1:
            raise fl.error(f"qgraph.{fn.__name__}() takes at most a dtype (qgraph.f32 or qgraph.f64)", node)
        dtype = fl.default_float
        if node.args:
            try:
                dtype = float_precision(fl.src.resolve(node.args[0]), f"qgraph.{fn.__name__}(dtype)")
            except TypeError as e:
                raise fl.error(str(e), node) from None
        args = []
    fl.random_draws += 1
    state = [alg.name(n, node) for n in ("_qg_seed", "_qg_stream", "_qg_index", "_qg_draw")]
    call = alg.loc(ast.Call(alg.name(RANDOM_FUNCTIONS[fn.__name__, dtype], node), args + state, []), node)
    value = fl.temp(call)
    step = alg.binop(alg.name("_qg_draw", node), ast.Add(), alg.loc(ast.Call(
        alg.loc(ast.Attribute(alg.name(alg.NUMPY, node), "uint64", ast.Load()), node), [alg.const(1, node)], []),
        node), node)
    fl.pre.append(alg.loc(ast.Assign([alg.loc(ast.Name("_qg_draw", ast.Store()), node)], step), node))
    if dtype is None:
        return Val(None, [value])
    return Val(None, [alg.cast(np.dtype(np.float32 if dtype == "f32" else np.float64), value, node)])


def random_prologue(task, at: ast.AST) -> list[ast.stmt]:
    """The per-iteration random state of a task that draws: its key, stream and counter."""
    u = [f"_qg_np.uint64({v})" for v in task.loop_vars[:3]] or ["_qg_np.uint64(0)"]
    if len(u) == 1:  # as lang.lower.random_bits.loop_index
        index = u[0]
    elif len(u) == 2:
        index = f"({u[0]} << _qg_np.uint64(24)) | ({u[1]} & _qg_np.uint64(0xFFFFFF))"
    else:
        index = (f"({u[0]} << _qg_np.uint64(32)) | (({u[1]} & _qg_np.uint64(0xFFFF)) << _qg_np.uint64(16)) | "
                 f"({u[2]} & _qg_np.uint64(0xFFFF))")
    code = ("_qg_seed = _qg_rng[0]\n"
            f"_qg_stream = (_qg_rng[1] << _qg_np.uint64(16)) | _qg_np.uint64({task.index})\n"
            f"_qg_index = {index}\n"
            "_qg_draw = _qg_np.uint64(0)\n")
    stmts = ast.parse(code).body
    for stmt in stmts:
        for node in ast.walk(stmt):
            ast.copy_location(node, at)
    return stmts
