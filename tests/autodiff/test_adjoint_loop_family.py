"""Gradients through device loops of a generated family: one nonlinear update (through a
@qgraph.func helper with an early return, reading a @qgraph.struct's array and number) placed in
every loop context that keeps states (a top-level repeat loop, a repeat loop nested in another
counted by a struct's field, a loop beside tasks that write what it carries), applied to a 0-d
target and a vector array,
in float64 and float32 (Python float literals), checked against central differences under the
tape on both backends. Few kernels: each costs a compile of its recording and adjoint."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from helpers.generated import generated_module
from helpers.gradients import check_gradients

BODY = ["x[i] += p.dt * fam_step(x[i], w[0]) * p.c[i]", "{apply}"]

CONTEXTS = {
    "repeat": ["for _ in qgraph.repeat(steps):", "    for i in range(x.shape[0]):"],
    "nested": ["for _ in qgraph.repeat(p.outer):", "    for _ in qgraph.repeat(steps):",
               "        for i in range(x.shape[0]):"],
    "beside": ["for i in range(x.shape[0]):", "    x[i] = x[i] * w[0] + 0.25",
               "for _ in qgraph.repeat(steps):", "    for i in range(x.shape[0]):"],
}

TARGETS = {  # (parameter, the update, its NumPy argument)
    "zero_d": ("total", "total[()] += 0.5 * x[i] * x[i]", lambda n, dt: np.zeros((), dt)),
    "vector": ("vout: V3[:]", "vout[i] += V3(x[i], x[i] * x[i], 1.0)", lambda n, dt: np.zeros((n, 3))),
}

HEADER = '''import math

import qgraph

V3 = qgraph.vector(3, qgraph.f64)


@qgraph.struct
class FamParams:
    c: object
    dt: float
    outer: int


@qgraph.func
def fam_step(a, b):  # continuous at 0.6, so differences that step across it stay close
    if a > 0.6:
        return math.sin(a) * b
    return (0.5646424733950354 + (a - 0.6) * a) * b
'''

CASES = [(c, t, "f8") for c in CONTEXTS for t in TARGETS] + [("nested", "zero_d", "f4")]


def _source() -> str:
    parts = [HEADER]
    for context, lines in CONTEXTS.items():
        for target, (param, apply, _) in TARGETS.items():
            depth = " " * (len(lines[-1]) - len(lines[-1].lstrip()) + 4)
            body = [f"    {line}\n" for line in lines] + [f"    {depth}{b.format(apply=apply)}\n" for b in BODY]
            parts.append(f"\n\n@qgraph.kernel\ndef fam_{context}_{target}(x, w, p: FamParams, {param}, steps: int):\n"
                         + "".join(body))
    return "".join(parts)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return generated_module(tmp_path_factory, "qgraph_adjoint_loop_family", _source())


@pytest.mark.parametrize("context,target,dtype", CASES, ids=[f"{c}-{t}-{d}" for c, t, d in CASES])
def test_loop_gradient_in_every_context(arch, family, context, target, dtype):
    import qgraph

    kernel = getattr(family, f"fam_{context}_{target}")
    dt = np.dtype(dtype)
    rng = np.random.default_rng(zlib.crc32(f"{context}-{target}-{dtype}".encode()))
    n = 4
    x, w, c = (rng.uniform(0.2, 0.9, size).astype(dt) for size in (n, 1, n))
    p = family.FamParams(qgraph.from_numpy(c), 0.3, 2)
    out = TARGETS[target][2](n, dt)
    if dt == np.float32:  # float32 arithmetic: differences of a larger step, a looser match
        check_gradients(kernel, x, w, p, out, 3, tape=True, rtol=3e-3, atol=3e-3, eps=1e-3)
    else:
        check_gradients(kernel, x, w, p, out, 3, tape=True, rtol=1e-6, atol=1e-8)
