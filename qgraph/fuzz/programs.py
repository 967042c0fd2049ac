"""Whole fuzzed programs: the arrays, the kernels and how they are called and differentiated
(one call and kernel.grad; several calls on a qgraph.Tape; device loops and @qgraph.graph steps),
written as one module. Program `seed` is a function of the seed alone."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from .grammar import Grammar
from .kernels import (
    Kernel,
    Pool,
    counter_kernel,
    flag_kernel,
    loss_kernel,
    map_kernel,
    mixed_kernel,
    repeat_kernel,
    update_kernel,
)

MODES = {"grad": 40, "tape": 45, "loops": 15}
LOOP_FORMS = {"repeat_grad": 20, "repeat_tape": 20, "flag_loop": 15, "graph_while": 10, "step": 15,
              "tape_in_step": 20}


@dataclass
class ArraySpec:
    """One array of a program: its initial value, whether it has a .grad and is seeded in L."""

    name: str
    init: np.ndarray
    grad: bool = True
    vector: bool = False

    @property
    def is_float(self) -> bool:
        return self.init.dtype.kind == "f"


@dataclass
class Program:
    """A generated program: its module's source and how the checker drives it.

    mode: "grad" (run, then grad), "tape" (run under a tape, backward), "tape_in_step" (train:
    a @qgraph.graph step holding a tape and backward with the numbers SEEDS, called `calls` times).
    """

    seed: int
    mode: str
    source: str
    arrays: list[ArraySpec]
    written: set[str]
    features: set[str] = field(default_factory=set)
    source64: str | None = None  # a float32 program's float64 twin, for the differences
    twice: bool = False
    reenter: bool = False  # the calls recorded in two `with tape:` blocks (run1, run2)
    tape_args: dict = field(default_factory=dict)
    calls: int = 1
    scalar_seeds: dict[str, float] = field(default_factory=dict)
    variant: str = ""  # a suffix of the module's name: a shrunk variant of the program, say

    @property
    def float32(self) -> bool:
        return self.source64 is not None


HEADER = """\"\"\"qgraph.fuzz program {seed} ({mode}; {features}).\"\"\"
import math

import numpy as np

import qgraph

V3 = qgraph.vector(3, qgraph.{float})
"""


def _pool(g: Grammar, mode: str, loops: bool) -> tuple[Pool, int, int]:
    n, m = g.rng.randint(3, 5), g.rng.randint(2, 4)
    kinds: dict[str, str] = {}
    state = ["x", "v"][: g.rng.randint(1, 2)] if mode != "grad" or g.chance(0.6) else []
    outs = ["y", "z"][: g.rng.randint(0 if mode != "grad" else 1, 2)]
    vstate = ["p"] if g.chance(0.2) else []
    vouts = ["q"] if g.chance(0.15) else []
    if mode != "grad" and not state and not vstate:
        state = ["x"]
    for a in state + outs:
        kinds[a] = "n"
    for a in vstate + vouts:
        kinds[a] = "v3"
    kinds["w"] = "m"
    if g.chance(0.5):
        kinds["c"] = "zero" if g.chance(0.3) else "one"
    mouts = []
    if g.chance(0.3):
        kinds["a"] = "mat"
        if g.chance(0.4):
            kinds["b"], mouts = "mat", ["b"]
    if g.chance(0.35):
        kinds["idx"] = "idx"
    kinds["loss"] = "zero" if g.chance(0.2) else "one"
    pool = Pool(g, kinds, state, outs, vstate, vouts, mouts)
    return pool, n, m


def _helpers(g: Grammar, pool: Pool) -> tuple[list[str], dict[str, str]]:
    """The @qgraph.func helpers' sources, and the feature each shows (by name)."""
    sources, features = [], {}
    for k in range(g.rng.choice([0, 0, 1, 1, 2])):
        text, features[f"h{k}"] = g.helper(f"h{k}", list(pool.helpers))
        sources.append(text)
        pool.helpers.append(f"h{k}")
    if g.chance(0.2):
        text, features["ht"] = g.helper("ht", list(pool.helpers), tuple_result=True)
        sources.append(text)
        pool.tuple_helpers.append("ht")
    return sources, features


def _init(g: Grammar, pool: Pool, n: int, m: int, dtype, rng: np.random.Generator, steps: int) -> list[ArraySpec]:
    shapes = {"n": (n,), "m": (m,), "one": (1,), "zero": (), "mat": (n, m), "v3": (n, 3)}
    out = []
    for a, kind in pool.kinds.items():
        if kind == "idx":
            out.append(ArraySpec(a, rng.integers(0, n, n).astype(np.int64)))
        elif kind in shapes:
            out.append(ArraySpec(a, rng.uniform(-1.2, 1.2, shapes[kind]).astype(dtype), vector=kind == "v3"))
    if "left0" in pool.kinds:
        out += [ArraySpec("left0", np.array(steps, np.int64)), ArraySpec("flag0", np.array(1, np.int32))]
    if "sel0" in pool.kinds:
        out.append(ArraySpec("sel0", np.array(g.rng.randint(0, 1), np.int32)))
    return out


def _written(kernels: list[Kernel], names: list[str]) -> set[str]:
    import re

    text = "\n".join("\n".join(k.body) for k in kernels)
    return {a for a in names if re.search(rf"(?<![.\w]){a}\[[^\]]*\]\s*(\+=|-=|=(?!=))", text)
            or re.search(rf"atomic_add\({a},", text)}


@dataclass
class Call:
    """A kernel call of the driver: `rounds` times in a Python loop; `rename` passes other arrays
    (a kernel called on swapped state); `after`: outside a graph_while step's loop."""

    kernel: Kernel
    rounds: int = 1
    rename: dict[str, str] = field(default_factory=dict)
    after: bool = False


def generate(seed: int) -> Program:
    """Program `seed`: a function of the seed alone (its structure, sizes and data)."""
    g = Grammar(random.Random(f"qgraph.fuzz:{seed}"))
    rng = np.random.default_rng([seed, 44])
    mode = g.weighted(MODES)
    form = g.weighted(LOOP_FORMS) if mode == "loops" else mode
    pool, n, m = _pool(g, mode, mode == "loops")
    features = {f"mode_{form}"}
    helpers, helper_features = _helpers(g, pool)
    steps, dt = (0 if g.chance(0.05) else g.rng.randint(1, 4)), round(g.rng.uniform(0.05, 0.3), 3)
    if form in ("flag_loop", "graph_while") or (form == "step" and g.chance(0.3)):
        pool.kinds.update(left0="cnt", flag0="flag")
    if form in ("repeat_grad", "repeat_tape") and g.chance(0.2):
        pool.kinds["sel0"] = "flag"
    calls, step = _calls(g, pool, form)
    kernels = list({id(c.kernel): c.kernel for c in calls}.values())
    used = {a for k in kernels for a in k.params(list(pool.kinds))}
    pool.kinds = {a: kind for a, kind in pool.kinds.items() if a in used}
    order = list(pool.kinds)
    values = {"dt": repr(dt), "n": str(n), "steps": str(steps)}
    float32 = g.chance(0.1) and form != "tape_in_step"
    arrays = _init(g, pool, n, m, np.float32 if float32 else np.float64, rng, steps)
    floats = [a.name for a in arrays if a.is_float]
    p = Program(seed, "grad" if form in ("grad", "repeat_grad") else "tape", "", arrays,
                _written(kernels, floats))
    p.twice = p.mode == "tape" and form != "tape_in_step" and g.chance(0.25)
    if mode != "loops" and floats and g.chance(0.2):  # an array without .grad (seeded all the same on a tape)
        pick = g.pick(floats)
        next(a for a in arrays if a.name == pick).grad = False
        features.add("no_grad_array")
    if any(k.features & {"repeat", "flag_loop", "graph_while"} for k in kernels) and g.chance(0.4):
        p.tape_args = {"checkpoint_every": g.rng.randint(1, 3)}
        features.add("checkpoint_every")
    cut = g.rng.randint(1, len(calls) - 1) if p.mode == "tape" and step is None and len(calls) > 1 and \
        g.chance(0.15) else None
    p.reenter = cut is not None
    driver = _driver(calls, step, order, values, cut)
    if form == "tape_in_step":
        p.mode, p.calls = "tape_in_step", g.rng.randint(2, 3)
        p.scalar_seeds = {a: float(g.lit(-1.5, 1.5)) for a in floats}
        driver += _train(calls, order, values, p.scalar_seeds)
    for k in kernels:
        features |= k.features
        text = "\n".join(helpers) + "\n".join(k.body)
        features |= {f for h, f in helper_features.items() if f"{h}(" in text}
    if any(c.rename for c in calls):
        features.add("swapped_call")
    features |= ({"float32"} if float32 else set()) | ({"second_backward"} if p.twice else set())
    features |= {"tape_reentered"} if p.reenter else set()
    if g.chance(0.15):  # the CPU's parallel form (prange loops) for every call, the adjoints' too
        for k in kernels:
            k.decorator = k.decorator[:-1] + ", cpu_serial_below=0)" if k.decorator.endswith(")") else \
                k.decorator + "(cpu_serial_below=0)"
        features.add("cpu_parallel_form")
    p.features = features
    head = HEADER.format(seed=seed, mode=form, features=", ".join(sorted(features)), float="{float}")
    body = "\n\n\n".join(helpers + [k.source(order, pool.kinds) for k in kernels] + driver) + "\n"
    p.source = head.format(float="f32" if float32 else "f64") + "\n\n" + body
    if float32:
        p.source64 = head.format(float="f64") + "\n\n" + body
    return p


def _calls(g: Grammar, pool: Pool, form: str) -> tuple[list[Call], str | None]:
    """The kernels and the calls the driver makes, and the kind of step around them (None: no step)."""
    if form == "grad":
        return [Call(mixed_kernel(pool, "k0"))], None
    if form in ("repeat_grad", "repeat_tape"):
        return [Call(repeat_kernel(pool, "k0"))], None
    if form in ("flag_loop", "graph_while"):
        k = flag_kernel(pool, "k0", do_while=form == "graph_while")
        return [Call(k)] + ([Call(loss_kernel(pool, "k1"))] if g.chance(0.5) else []), None
    rounds = g.rng.randint(1, 3)
    up = update_kernel(pool, "up0")
    calls = [Call(up, rounds)]
    if form == "tape" and len(pool.state) == 2 and g.chance(0.2) and {"x", "v"} <= set(up.params(["x", "v"])):
        calls.append(Call(up, 1, {"x": "v", "v": "x"}))
    if g.chance(0.3):
        calls.append(Call(update_kernel(pool, "up1"), rounds))
    if (pool.outs or pool.mouts) and g.chance(0.5):
        calls.append(Call(map_kernel(pool, "map0"), rounds))
    if form == "tape" and g.chance(0.25):
        calls.append(Call(mixed_kernel(pool, "mix0", in_place=0.4)))
    loss = Call(loss_kernel(pool, "loss0"))
    if form == "step" and "left0" in pool.kinds:
        for c in calls:
            c.rounds = 1
        return calls + [Call(counter_kernel("count0")), Call(loss.kernel, after=True)], "graph_while"
    return calls + [loss], ("plain" if form == "step" else None)


def _lines(calls: list[Call], order: list[str], values: dict[str, str], wrap) -> list[str]:
    out = []
    for c in calls:
        text = c.kernel.call(order, {**values, **c.rename}, wrap)
        out += [f"for _ in range({c.rounds}):", f"    {text}"] if c.rounds > 1 else [text]
    return out


def _params(calls: list[Call], order: list[str]) -> list[str]:
    return sorted({a for c in calls for a in c.kernel.params(order) if a in order}, key=order.index)


def _driver(calls: list[Call], step: str | None, order: list[str], values: dict[str, str],
            cut: int | None = None) -> list[str]:
    """`run(A)` makes the calls (the checker records them on a tape, or differentiates the one
    call with `grad(A)`); in a @qgraph.graph step where the program has one."""
    A = lambda a: f'A["{a}"]'  # noqa: E731
    body = lambda lines: "\n".join(f"    {x}" for x in lines)  # noqa: E731
    if step is None and cut is not None:
        return ["def run1(A):\n" + body(_lines(calls[:cut], order, values, A)),
                "def run2(A):\n" + body(_lines(calls[cut:], order, values, A)),
                "def run(A):\n    run1(A)\n    run2(A)"]
    if step is None:
        out = ["def run(A):\n" + body(_lines(calls, order, values, A))]
        if len(calls) == 1:
            out.append("def grad(A):\n    " + calls[0].kernel.call(order, values, A).replace("(", ".grad(", 1))
        return out
    inside = [c for c in calls if not c.after]
    params = _params(inside, order)
    deco = '@qgraph.graph(graph_while="flag0")' if step == "graph_while" else "@qgraph.graph"
    after = _lines([c for c in calls if c.after], order, values, A)
    return [f"{deco}\ndef step({', '.join(params)}):\n" + body(_lines(inside, order, values, lambda a: a)),
            "def run(A):\n" + body([f"step({', '.join(A(a) for a in params)})"] + after)]


def _train(calls: list[Call], order: list[str], values: dict[str, str], seeds: dict[str, float]) -> list[str]:
    """A @qgraph.graph step holding a tape and its backward: the whole gradient in one graph."""
    params = _params(calls, order)
    grads = ", ".join(f"{a}: {seeds[a]!r}" for a in params if a in seeds)
    lines = ["with qgraph.Tape() as tape:"] + [f"    {x}" for x in _lines(calls, order, values, lambda a: a)]
    lines.append(f"tape.backward(grads={{{grads}}})")
    return [f"@qgraph.graph\ndef train_step({', '.join(params)}):\n" + "\n".join(f"    {x}" for x in lines),
            f"def train(A):\n    train_step({', '.join(f'A[{a!r}]' for a in params)})"]
