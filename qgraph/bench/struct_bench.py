"""Per-call cost of a struct argument against the same arrays passed one by one.

The kernel is one small task over six float32 arrays (so launch cost dominates); each
mode is timed back to back, interleaved with the others: separate arrays, one struct of
the six, and both again with two argument sets swapped on every call (a graph node update
per call), and one field reassigned on every call against one array swapped (the
reassignment drops the struct's cached resolution, so it is resolved anew each call).
"""

from __future__ import annotations

import qgraph

from ..tools.timing import interleaved_spreads, put_figure

SIZE = 256
BASELINE = {"struct, 2 sets swapped": "separate arrays, 2 sets swapped",
            "separate arrays, 2 sets swapped": "separate arrays, 2 sets swapped",
            "struct, 1 field reassigned": "separate arrays, 1 array swapped",
            "separate arrays, 1 array swapped": "separate arrays, 1 array swapped"}


@qgraph.struct
class Six:
    a: object
    b: object
    c: object
    d: object
    e: object
    f: object


@qgraph.kernel(cuda_graph=True)
def separate(a, b, c, d, e, f):
    for i in range(a.shape[0]):
        a[i] = b[i] + c[i] * d[i] - e[i] * f[i]


@qgraph.kernel(cuda_graph=True)
def grouped(s: Six):
    for i in range(s.a.shape[0]):
        s.a[i] = s.b[i] + s.c[i] * s.d[i] - s.e[i] * s.f[i]


def rows(budget: float, repeat: int) -> list[dict]:
    """[{mode, us (with us_min, us_max), ratio}], ratio = us / the separate-arrays time of the same kind."""
    sets = [[qgraph.ndarray(qgraph.f32, (SIZE,)) for _ in range(6)] for _ in range(2)]
    structs = [Six(*arrays) for arrays in sets]
    state = [0]

    def separate_swapped() -> None:
        state[0] ^= 1
        separate(*sets[state[0]])

    def grouped_swapped() -> None:
        state[0] ^= 1
        grouped(structs[state[0]])

    one_field = [[sets[k][0]] + sets[0][1:] for k in range(2)]  # field a from set 0 or 1, the rest from set 0
    reassigned = Six(*sets[0])

    def separate_one_swapped() -> None:
        state[0] ^= 1
        separate(*one_field[state[0]])

    def grouped_field_reassigned() -> None:  # an assignment drops the cached resolution: resolved anew
        state[0] ^= 1
        reassigned.a = one_field[state[0]][0]
        grouped(reassigned)

    calls = {"separate arrays": lambda: separate(*sets[0]), "struct": lambda: grouped(structs[0]),
             "separate arrays, 2 sets swapped": separate_swapped, "struct, 2 sets swapped": grouped_swapped,
             "separate arrays, 1 array swapped": separate_one_swapped,
             "struct, 1 field reassigned": grouped_field_reassigned}
    spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
    out = []
    for mode, spread in spreads.items():
        row = {"mode": mode}
        put_figure(row, "us", spread, 1e6)
        row["ratio"] = spread.median / spreads[BASELINE.get(mode, "separate arrays")].median
        out.append(row)
    return out


def table(found: list[dict], arch: str) -> str:
    if not found:
        return ""
    lines = [f"\nstruct argument vs the same six arrays passed separately ({arch}, per call, us; ratio to separate)"]
    for r in found:
        lines.append(f"  {r['mode']:<34} {r['us']:8.2f} ({r['ratio']:.2f})")
    return "\n".join(lines)
