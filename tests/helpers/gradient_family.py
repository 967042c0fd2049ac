"""The control-flow constructs of the generated gradient families (test_gradient_family.py,
test_gradient_placement_family.py): the lines of each, the helpers' source, and the inputs that
stay away from every threshold."""

from __future__ import annotations

import numpy as np

CONSTRUCTS = {  # lines computing `v` from a = x[i]; `continue` skips the update of this element
    "continue": ["a = x[i]", "if a < 0.45:", "    continue", "v = a * a * w[0] + a"],
    "break": ["a = x[i]", "v = a", "for k in range(w.shape[0]):", "    if w[k] > 0.8:", "        break",
              "    v += w[k] * a * a"],
    "while_break": ["a = x[i]", "m = 0", "while m < 20:", "    m += 1", "    if m * 0.137 > a:", "        break",
                    "v = m * a * w[1] + a"],
    "while_true": ["a = x[i]", "m = 0", "while True:", "    m += 1", "    if m * 0.137 > a:", "        break",
                   "v = m * a * a * w[2]"],
    "helper_return": ["a = x[i]", "v = fam_branchy(a, w[0])"],
    "nested_break": ["a = x[i]", "v = a", "for k in range(3):", "    t = 0.0", "    for m in range(w.shape[0]):",
                     "        if w[m] * (k + 1) > 1.2:", "            break", "        t += w[m] * a",
                     "    v += t * t"],
}


HEADER = '''import math

import qgraph


@qgraph.func
def fam_branchy(a, b):
    if a > 0.5:
        return math.sin(a) * b + a
    if a < 0.3:
        return a * a
    return a * b * 1.5


@qgraph.kernel
def fam_loss(out, s, loss):
    for i in range(out.shape[0]):
        loss[0] += s[i] * out[i]


@qgraph.kernel
def fam_count(count, flag, steps: int):
    count[0] += 1
    flag[0] = 1 if count[0] < steps else 0
'''


X0 = np.array([0.23, 0.38, 0.61, 0.87])  # away from every threshold above (0.45, 0.5, 0.3, multiples of 0.137)
W0 = np.array([0.52, 0.31, 0.67, 0.93, 0.44])
