"""Gradients of a generated family: one differentiable update placed in every context a user
writes it in (directly in the parallel loop, in a serial loop, in nested serial loops, after
an inner accumulating loop, through a @qgraph.func helper with an early return, in a branch)
and applied to every kind of target (an element at the loop index, a 0-d reduction target,
a vector array, float32 arrays with Python float literals), checked against central
differences on both backends. Failures users find are combinations; each construct alone is
tested in test_adjoint.py."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
from helpers.generated import generated_module
from helpers.gradients import check_gradients

EXPR = "math.sin(x[i]) * w[0] + 0.5 * x[i] * x[i]"

CONTEXTS = {
    "top": ["val = {e}", "{apply}"],
    "serial": ["for k in range(3):", "    val = ({e}) * (k + 1)", "    {apply}"],
    "nested": ["for k in range(2):", "    for m in range(2):", "        val = ({e}) * (k + m + 1)",
               "        {apply}"],
    "after_inner": ["s = 0.0", "for k in range(3):", "    s += w[0] * x[i] * (k + 1)", "val = {e} + s * s",
                    "{apply}"],
    "helper": ["val = fam_helper(x[i], w[0])", "{apply}"],
    "branch": ["if x[i] > 0.5:", "    val = {e}", "else:", "    val = 2.0 * ({e})", "{apply}"],
}

TARGETS = {  # (parameters after x, w; the update; how to make its NumPy argument; tolerance)
    "element": ("out", "out[i] += val", lambda n, dt: np.zeros(n, dt)),
    "zero_d": ("total", "total[()] += val", lambda n, dt: np.zeros((), dt)),
    "vector": ("vout: V3[:]", "vout[i] += qgraph.vector(3, qgraph.f64)(val, 2.0 * val, val * val)",
               lambda n, dt: np.zeros((n, 3), np.float64)),
}

HEADER = '''import math

import numpy as np

import qgraph

V3 = qgraph.vector(3, qgraph.f64)


@qgraph.func
def fam_helper(a, b):
    if a > 0.5:
        return math.sin(a) * b + 0.5 * a * a
    return a * b + 0.25
'''

CASES = [(c, t, dt) for c, t in itertools.product(CONTEXTS, TARGETS) for dt in ("f8", "f4")
         if not (t == "vector" and dt == "f4")]


def _source() -> str:
    parts = [HEADER]
    for context, target in itertools.product(CONTEXTS, TARGETS):
        param, apply, _ = TARGETS[target]
        body = [line.format(e=EXPR, apply=apply) for line in CONTEXTS[context]]
        parts.append(f"\n\n@qgraph.kernel\ndef fam_{context}_{target}(x, w, {param}):\n"
                     "    for i in range(x.shape[0]):\n" + "".join(f"        {line}\n" for line in body))
    return "".join(parts)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return generated_module(tmp_path_factory, "qgraph_adjoint_family", _source())


@pytest.mark.parametrize("context,target,dtype", CASES, ids=[f"{c}-{t}-{d}" for c, t, d in CASES])
def test_gradient_of_an_update_in_every_context(arch, family, context, target, dtype):
    kernel = getattr(family, f"fam_{context}_{target}")
    dt = np.dtype(dtype)
    rng = np.random.default_rng(zlib.crc32(f"{context}-{target}-{dtype}".encode()))
    n = 4
    x = rng.uniform(0.2, 0.8, n).astype(dt)
    w = rng.uniform(0.2, 0.8, 1).astype(dt)
    out = TARGETS[target][2](n, dt)
    if dt == np.float32:  # float32 arithmetic: differences of a larger step, a looser match
        check_gradients(kernel, x, w, out, rtol=3e-3, atol=3e-3, eps=1e-2)
    else:
        check_gradients(kernel, x, w, out)


def _sig(target: str, dtype: str) -> tuple:
    from qgraph.args.kinds import array_sig

    f = np.dtype(dtype)
    third = {"element": array_sig(f, 1, True), "zero_d": array_sig(f, 0, True),
             "vector": array_sig(np.dtype("f8"), 2, True, element=(3,))}[target]
    return array_sig(f, 1, True), array_sig(f, 1, True), third


@pytest.mark.parametrize("context,target,dtype", CASES, ids=[f"{c}-{t}-{d}" for c, t, d in CASES])
def test_the_family_compiles_for_cuda(cuda_compiler, monkeypatch, family, context, target, dtype):
    """Each family member's adjoint compiles to PTX for sm_90 without a GPU, one entry per task."""
    from types import SimpleNamespace

    import numba.cuda.dispatcher as dispatcher
    from helpers.cuda_offline import compile_offline

    from qgraph.lang.adjoint import adjoint_source

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=(9, 0)))
    src = getattr(family, f"fam_{context}_{target}").source
    key = _sig(target, dtype)
    full = key + key
    ptx, entries, sizes = compile_offline(SimpleNamespace(source=adjoint_source(src, tuple(src.param_names))), full)
    assert len(entries) == len(src.tasks) and all(size > 0 for size in sizes)
