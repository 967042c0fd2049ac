"""The generated family of inner sums (tests/lang/test_lanes_family.py): each kernel an inner sum of a
parallel loop placed {at the top, in a repeat loop, in a cond region, after another inner loop, with
its term from a helper, with the whole loop in a helper} and summed into {a local then stored, the
element itself, a vec2, a struct's array field, a 0-d array, float32 with float32 literals}; shared
with the emitter's tests (tests/lang/test_llvm_emitter.py), which run it through both CPU compilers."""

from __future__ import annotations

import numpy as np

import qgraph
from qgraph.bench.kernels import module_from_source

PLACES = ["top", "repeat", "cond", "after_loop", "helper_term", "helper_loop"]
TARGETS = ["local", "element", "vec2", "struct", "zero_d", "float32"]
M = 64  # inner loop length

# per target: (setup before the inner loop, the inner loop's update, the store after it); {t} is the term
_TARGET = {
    "local": ("s = 0.0", "s += {t}", "out[i] = s"),
    "element": ("", "out[i] += {t}", ""),
    "vec2": ("s = qgraph.vec2d(0.0, 0.0)", "s += qgraph.vec2d({t}, x[j])", "out[i] = s"),
    "struct": ("", "st.out[i] += {t}", ""),
    "zero_d": ("", "out[()] += {t}", ""),
    "float32": ("s = np.float32(0.0)", "s += np.float32(0.5) * {t}", "out[i] = s"),
}


def kernel_source(place: str, target: str) -> str:
    setup, update, store = _TARGET[target]
    out = "st" if target == "struct" else "out"
    term = "term(w[i], x[j])" if place == "helper_term" else "w[i] * x[j]"
    if place == "helper_loop":  # the whole sum in a helper: a value, added as the target takes it
        update_once = update.format(t="summed(x, w[i])").replace("x[j])", "summed(x, 1.0))")
        body = [setup, update_once, store]
    else:
        body = [setup]
        if place == "after_loop":
            body += ["c = 0.0", "for k in range(2):", "    c += 0.5"]
            term = f"c * {term}"
        body += ["for j in range(x.shape[0]):", "    " + update.format(t=term), store]
    lines = [line for line in body if line]
    loop = ["for i in range(w.shape[0]):"] + ["    " + line for line in lines]
    if place == "repeat":
        loop = ["for _ in qgraph.repeat(reps):"] + ["    " + line for line in loop]
    elif place == "cond":
        loop = ["if qgraph.cond(flag):"] + ["    " + line for line in loop]
    params = f"x, w, {out}, reps: int, flag"
    return f"\n@qgraph.kernel(cuda_graph=True)\ndef k_{place}_{target}({params}):\n" + \
        "\n".join("    " + line for line in loop) + "\n"


SOURCE = '''
import numpy as np
import qgraph


@qgraph.struct
class Sums:
    out: object


@qgraph.func
def term(a, b):
    return a * b


@qgraph.func
def summed(x, a):
    s = 0.0
    for j in range(x.shape[0]):
        s += a * x[j]
    return s
''' + "".join(kernel_source(p, t) for p in PLACES for t in TARGETS)
FAMILY = module_from_source("qgraph_test_lanes_family", SOURCE)



def arrays(target: str, n: int, rng):
    dtype = np.float32 if target == "float32" else np.float64
    x = qgraph.from_numpy(rng.standard_normal(M).astype(dtype))
    w = qgraph.from_numpy(rng.standard_normal(n).astype(dtype))
    if target == "vec2":
        out = qgraph.ndarray(qgraph.vec2d, (n,))
    elif target == "zero_d":
        out = qgraph.from_numpy(np.zeros((), dtype))
    else:
        out = qgraph.from_numpy(np.zeros(n, dtype))
    return x, w, out
