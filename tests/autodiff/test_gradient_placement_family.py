"""Where break/continue sit, as a generated family: each control-flow construct of
test_gradient_family (continue, break, counting while, while True, a helper's early return,
nested breaks) placed inside a @qgraph.func's loop, after an inner loop of the task, inside
nested device loops (two repeat regions, under a tape), and storing into a 0-d target, a vector
target and float32 arrays; each gradient checked against central differences on both backends."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.generated import generated_module
from helpers.gradient_family import CONSTRUCTS, HEADER, W0, X0
from helpers.gradients import check_gradients

PLACEMENTS = {  # kernel source with {c} (the construct's name) and {body} (its lines, indented by {pad})
    "helper": ("@qgraph.func\ndef fam_h_{c}(a0, w):\n    v = a0 * 0.5\n    for q in range(2):\n"
               "        a = a0 + 0.1 * q\n{helper_body}        v += 0.5 * u\n    return v\n\n\n"
               "@qgraph.kernel\ndef {c}_helper(x, w, y):\n    for i in range(x.shape[0]):\n"
               "        y[i] = fam_h_{c}(x[i], w)\n"),
    "after_inner": ("@qgraph.kernel\ndef {c}_after_inner(x, w, y):\n    for i in range(x.shape[0]):\n"
                    "        s = 0.0\n        for k in range(w.shape[0]):\n            s += w[k] * x[i]\n"
                    "{body8}        y[i] = v + 0.3 * s\n"),
    "nested_region": ("@qgraph.kernel\ndef {c}_nested_region(x, w, outer: int, steps: int):\n"
                      "    for _ in qgraph.repeat(outer):\n"
                      "        for _ in qgraph.repeat(steps):\n            for i in range(x.shape[0]):\n"
                      "{body16}                x[i] = x[i] + 0.05 * v\n"),
    "zero_d": ("@qgraph.kernel\ndef {c}_zero_d(x, w, total):\n    for i in range(x.shape[0]):\n"
               "{body8}        total[()] += v * v\n"),
    "vector": ("@qgraph.kernel\ndef {c}_vector(x, w, out: V3[:]):\n    for i in range(x.shape[0]):\n"
               "{body8}        out[i] = V3(v, v * a, 1.0)\n"),
    "f32": ("@qgraph.kernel\ndef {c}_f32(x, w, y):\n    for i in range(x.shape[0]):\n{body8}        y[i] = v * 1.5\n"),
}


def _indented(lines: list[str], pad: int) -> str:
    return "".join(" " * pad + line + "\n" for line in lines)


def _source() -> str:
    parts = [HEADER, "\n\nV3 = qgraph.vector(3, qgraph.f64)\n"]
    for c, lines in CONSTRUCTS.items():
        # in the helper the construct reads `a` (set by the helper's loop) and leaves `u`
        helper_lines = [re.sub(r"\bv\b", "u", line) for line in lines[1:]]
        for template in PLACEMENTS.values():
            parts.append("\n\n" + template.format(c=c, helper_body=_indented(helper_lines, 8),
                                                  body8=_indented(lines, 8), body16=_indented(lines, 16)))
    return "".join(parts)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return generated_module(tmp_path_factory, "qgraph_gradient_placement_family", _source())


@pytest.mark.parametrize("placement", list(PLACEMENTS))
@pytest.mark.parametrize("construct", list(CONSTRUCTS))
def test_control_flow_gradient_wherever_it_sits(arch, family, construct, placement):
    kernel = getattr(family, f"{construct}_{placement}")
    dt = np.float32 if placement == "f32" else np.float64
    x, w = X0.astype(dt), W0.astype(dt)  # away from every threshold, also by float32's larger difference step
    out = {"zero_d": np.zeros(()), "vector": np.zeros((4, 3))}.get(placement, np.zeros(4, dt))
    if placement == "nested_region":  # nonlinear passes in place: the tape keeps their checkpoints
        check_gradients(kernel, x, w, 2, 2, tape=True, rtol=1e-6, atol=1e-8)
    elif placement == "f32":  # float32 arithmetic: differences of a larger step, a looser match
        check_gradients(kernel, x, w, out, rtol=3e-3, atol=3e-3, eps=1e-3)
    else:
        check_gradients(kernel, x, w, out, rtol=1e-6, atol=1e-8)
