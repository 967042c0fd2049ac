"""Statements of a task body for the fuzzer: inner serial loops (accumulations, recurrences,
searches and counts with break/continue, counting while loops), branches, vector locals,
tuple-returning helper calls, and the stores that end a task."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .grammar import Grammar, Scope

# The inner-loop forms and their weights; the last three are documented limitations of the adjoint.
LOOPS = {"acc": 5, "recur": 3, "reverse": 2, "nested": 1.5, "branchy": 2, "search": 3, "search_after": 1.5,
         "count": 3, "while_count": 2.5, "while_true": 1.5, "grad_break": 2, "grad_continue": 2,
         "nonlinear": 0.4, "product": 0.3, "grad_while": 0.3}


@dataclass
class Task:
    """One task being written: the arrays it may read anywhere, those it writes at its own element
    (read there only), its scope of float terms, its lines and the features it shows."""

    g: Grammar
    index: str | None  # the parallel loop's variable; None in a serial task
    kinds: dict[str, str]  # every array of the program -> "n", "m", "one", "mat", "v3", "idx", ...
    readable: list[str]
    own: list[str]
    helpers: list[str]
    tuple_helpers: list[str]
    scope: Scope = field(default_factory=lambda: Scope([]))
    lines: list[str] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    results: list[tuple[str, str, int]] = field(default_factory=list)  # (local, a term of it, uses so far)
    self_reads: list[str] = field(default_factory=list)  # arrays updated in place: read at their element

    def of(self, *kinds: str, own: bool = False) -> list[str]:
        return [a for a in (self.own if own else self.readable) if self.kinds[a] in kinds]

    def vector_self(self) -> list[str]:
        return [a for a in self.self_reads if self.kinds[a] == "v3"]

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def uses(self, name: str) -> int:
        return len(re.findall(rf"\b{name}\b", "\n".join(self.lines)))

    def result(self, name: str, *terms: str) -> None:
        """`name` was computed: its terms join the scope, and the next store uses it if nothing did."""
        self.scope = self.scope.with_terms(*terms)
        self.results.append((name, terms[0], self.uses(name)))

    def unused(self) -> list[str]:
        out = [term for name, term, seen in self.results if self.uses(name) == seen]
        self.results = []
        return out

    def term(self) -> str:
        return self.g.leaf(self.scope)

    def expr(self, depth: int = 2) -> str:
        return self.g.expr(self.scope, depth)


def base_terms(t: Task) -> None:
    """The float leaves a task starts with: its arrays read at its element, a gather, a
    neighbour, a parameter; `dt`."""
    g, i = t.g, t.index
    terms = ["dt"]
    if i == "i, j":
        i = "i"
    if i is not None:
        has_idx = "idx" in t.readable
        for a in t.of("n"):
            terms.append(f"{a}[{i}]")
            if has_idx and g.chance(0.5):
                terms.append(f"{a}[idx[{i}]]")
                t.features.add("gather")
            if g.chance(0.2):
                terms.append(g.pick([f"{a}[({i} + 1) % {a}.shape[0]]", f"{a}[{a}.shape[0] - 1 - {i}]"]))
        terms += [f"{a}[{i}]" for a in t.self_reads if t.kinds[a] == "n"]
        terms += [f"{a}[{i} % {a}.shape[0]]" for a in t.of("m")]
        terms += [f"{a}[{i}, {g.pick(['0', f'{a}.shape[1] - 1'])}]" for a in t.of("mat")]
        terms += [f"{a}[{i}]{g.pick(['.x', '.y', '[2]'])}" for a in t.of("v3") + t.vector_self()]
    else:
        for a in t.of("n"):
            terms.append(g.pick([f"{a}[0]", f"{a}[{a}.shape[0] - 1]", f"{a}[1]"]))
        terms += [f"{a}[0]" for a in t.of("m")]
        terms += [f"{a}[0, 1]" for a in t.of("mat")]
        terms += [f"{a}[0].y" for a in t.of("v3")]
    terms += [f"{a}[0]" for a in t.of("one")] + [f"{a}[()]" for a in t.of("zero")]
    if i == "i, j":  # a 2-D ndrange task
        terms += [f"{a}[i, j]" for a in t.of("mat")] + [f"{a}[j % {a}.shape[0]]" for a in t.of("m")]
        terms += [f"{a}[i, j]" for a in t.self_reads]
    t.scope = Scope(terms, helpers=list(t.helpers))


def _range(t: Task) -> tuple[str, str, str]:
    """An inner loop's range, the array element it reads at `k`, and the array read."""
    g, i = t.g, ("i" if t.index == "i, j" else t.index)
    ms = t.of("m") + (t.of("n") if i is None else [])
    mats = t.of("mat") if i is not None else []
    if mats and (not ms or g.chance(0.3)):
        a = g.pick(mats)
        return f"range({a}.shape[1])", f"{a}[{i}, {{k}}]", a
    if ms:
        a = g.pick(ms)
        return f"range({a}.shape[0])", f"{a}[{{k}}]", a
    return f"range({g.rng.randint(2, 4)})", "({k} + 1) * 0.25", ""


def serial_range(t: Task, rng: str) -> str:
    """A loop at the top level of a serial task is a parallel task unless qgraph.serial says so."""
    return rng if t.index is not None else f"qgraph.serial({rng})"


def gathers(t: Task, j: str) -> list[str]:
    """Float terms made with integer local `j`: gathers at a computed index, and j as a number."""
    out = [f"{a}[{j} % {a}.shape[0]]" for a in t.of("m", "n")]
    if t.index is not None:
        out += [f"{a}[i, {j} % {a}.shape[1]]" for a in t.of("mat")]
    return out + [f"(0.2 * {j} + 0.5)"]


def inner_loop(t: Task, form: str | None = None) -> None:
    """One serial loop inside the task; what it computes joins the scope."""
    g = t.g
    form = form or g.weighted(LOOPS)
    rng, elem_t, _ = _range(t)
    k = g.fresh("k")
    el = elem_t.format(k=k)
    x = t.term()
    s = g.fresh("s")
    inner = t.scope.with_terms(el)
    inner.ints = inner.ints + [k]
    body = g.expr(inner, 1)
    t.features.add(f"loop_{form}")
    if form == "reverse":
        rng = f"range({rng[len('range('):-1]} - 1, -1, -1)"
    rng = serial_range(t, rng)
    if form in ("acc", "reverse", "nested"):
        t.add(f"{s} = {g.pick(['0.0', x])}", f"for {k} in {rng}:")
        if form == "nested":
            m = g.fresh("m")
            t.add(f"    for {m} in range(2):", f"        {s} += {el} * {body} * ({m} + 1)")
        else:
            t.add(f"    {s} += {el} * {body}")
    elif form == "recur":
        t.add(f"{s} = {x}", f"for {k} in {rng}:", f"    {s} = {g.lit(0.3, 0.95)} * {s} + {el} * {body}")
    elif form == "branchy":
        t.add(f"{s} = 0.0", f"for {k} in {rng}:", f"    if {el} > {x}:", f"        {s} += {el} * {body}",
              "    else:", f"        {s} -= {g.pos()} * {g.leaf(inner)}")
    elif form in ("search", "search_after", "count"):
        j = g.fresh("j")
        if form == "search":
            t.add(f"{j} = 0", f"for {k} in {rng}:", f"    {j} = {k}", f"    if {el} > {x}:", "        break")
        elif form == "search_after":
            t.add(f"{j} = 0", f"for {k} in {rng}:", f"    if {el} > {x}:", "        break", f"    {j} += 1")
        else:
            t.add(f"{j} = 0", f"for {k} in {rng}:", f"    if {el} < {x}:", "        continue", f"    {j} += 1")
        t.result(j, *gathers(t, j), f"{x} * (0.3 * {j} + 1.0)")
        return
    elif form in ("while_count", "while_true"):
        m = g.fresh("m")
        if form == "while_count":
            t.add(f"{m} = 0", f"while {m} < 100:", f"    {m} += 1", f"    if {m} * {g.lit(0.2, 0.5)} > abs({x}):",
                  "        break")
        else:
            t.add(f"{m} = 0", "while True:", f"    {m} += 1",
                  f"    if {m} * {g.lit(0.2, 0.5)} > {x} + 1.5 or {m} >= 20:", "        break")
        t.result(m, *gathers(t, m), f"{x} * (0.1 * {m} + 0.5)")
        return
    elif form == "grad_break":
        t.add(f"{s} = 0.0", f"for {k} in {rng}:", f"    if {el} > {x} + 0.3:", "        break",
              f"    {s} += {el} * {body}")
    elif form == "grad_continue":
        t.add(f"{s} = {x}", f"for {k} in {rng}:", f"    if {el} < {x}:", "        continue",
              f"    {s} = 0.8 * {s} + {el} * {body}")
    elif form == "nonlinear":
        t.add(f"{s} = {x}", f"for {k} in {rng}:", f"    {s} = math.sin({s}) + {el} * {body}")
    elif form == "product":
        t.add(f"{s} = 1.0", f"for {k} in {rng}:", f"    {s} *= 1.0 + 0.3 * {el} * {x}")
    else:  # grad_while
        m = g.fresh("m")
        t.add(f"{s} = {x}", f"{m} = 0", f"while {m} < 3:", f"    {s} = 0.5 * {s} + {t.expr(1)}", f"    {m} += 1")
    t.result(s, s)


def branch_local(t: Task) -> None:
    """A local set on every path of an if/elif/else on data."""
    g, b = t.g, t.g.fresh("b")
    t.add(f"if {g.condition(t.scope)}:", f"    {b} = {t.expr(2)}")
    if g.chance(0.5):
        t.add(f"elif {g.condition(t.scope)}:", f"    {b} = {t.expr(1)}")
    t.add("else:", f"    {b} = {t.expr(2)}")
    t.features.add("branch")
    t.result(b, b)


def vector_leaf(t: Task) -> str:
    g = t.g
    arrays = t.of("v3") + t.vector_self()
    if arrays and g.chance(0.7):
        a = g.pick(arrays)
        return f"{a}[i]" if t.index is not None else f"{a}[0]"
    return f"V3({t.term()}, {g.lit()}, {t.term()})"


def vector_expr(t: Task) -> str:
    g = t.g
    a, b = vector_leaf(t), vector_leaf(t)
    return g.pick([f"{a} * {t.term()} + {b}", f"qgraph.cross({a}, {b})", f"({a} - {b}) * {g.lit()}",
                   f"qgraph.normalized({a} + V3(2.5, 0.0, 0.0))", f"{a} * math.sin({t.term()})",
                   f"{a} + V3({t.expr(1)}, {t.term()}, {g.lit()})"])


def vector_local(t: Task) -> None:
    d = t.g.fresh("d")
    t.add(f"{d} = {vector_expr(t)}")
    t.features.add("vector")
    g = t.g
    t.result(d, g.pick([f"qgraph.dot({d}, {d})", f"qgraph.norm({d} + V3(0.0, 0.0, 2.5))"]),
             g.pick([f"{d}.x", f"{d}[1]", f"{d}.z * {g.lit()}"]))


def tuple_call(t: Task) -> None:
    u, v = t.g.fresh("u"), t.g.fresh("u")
    t.add(f"{u}, {v} = {t.g.pick(t.tuple_helpers)}({t.expr(1)}, {t.term()})")
    t.features.add("helper_tuple_call")
    t.result(u, u)
    t.result(v, v)


def store(t: Task, target: str, how: str, in_repeat: bool = False) -> None:
    """The store that ends a task: `how` is set, add, inplace_add, inplace_set, reduce or scatter."""
    g, i = t.g, t.index
    at = f"{target}[{i}]" if i is not None else f"{target}[{g.pick(['0', f'{target}.shape[0] - 1'])}]"
    if t.kinds[target] == "zero":
        at = f"{target}[()]"
    vec = t.kinds[target] == "v3"
    value = vector_expr(t) if vec else t.expr(2)
    for term in t.unused():  # what the body computed reaches the store
        value = f"({value}) * (1.0 + {g.lit(-0.5, 0.5)} * {term})" if vec else f"{value} + {g.lit()} * {term}"
    t.features.add(f"store_{how}" + ("_vec" if vec else ""))
    if how == "set" and not vec and g.chance(0.25):
        t.add(f"if {g.condition(t.scope)}:", f"    {at} = {value}", "else:", f"    {at} = {t.expr(1)}")
        t.features.add("branch_store")
    elif how == "set":
        t.add(f"{at} = {value}")
    elif how == "add":
        t.add(f"{at} += {value}")
    elif how == "inplace_add":
        t.add(f"{at} += dt * {value if vec else g.bounded(t.scope, 2)}")
    elif how == "inplace_set" and vec:
        t.add(f"{at} = {at} * {g.lit(0.5, 0.9)} + {value} * 0.1")
    elif how == "inplace_set":
        forms = [f"math.sin({at}) + 0.5 * {g.bounded(t.scope, 1)}", f"math.tanh({at} + {t.expr(1)})",
                 f"0.5 * {at} + 0.3 * {g.bounded(t.scope, 1)}", f"{at} * {g.bounded(t.scope, 1)}"]
        t.add(f"{at} = {g.pick(forms + ([] if in_repeat else [f'{at} * {at}']))}")
    elif how == "reduce":
        if g.chance(0.12):
            op = g.pick(["add", "add", "sub"])
            t.add(f"qgraph.atomic_{op}({target}, {'()' if t.kinds[target] == 'zero' else '0'}, {value})")
            t.features.add(f"atomic_{op}")
        else:
            t.add(f"{at if t.kinds[target] == 'zero' else target + '[0]'} {g.pick(['+=', '+=', '-='])} {value}")
    elif how == "scatter":
        t.add(f"{target}[idx[{i}]] += {value}")
    elif how == "prefix":  # a recurrence through the array itself: y[k] from y[k - 1]
        k = g.fresh("k")
        inner = t.scope.with_terms(*[f"{a}[{k}]" for a in t.of("n")])
        t.add(f"for {k} in qgraph.serial(range(1, {target}.shape[0])):",
              f"    {target}[{k}] = {g.lit(0.3, 0.9)} * {target}[{k} - 1] + {g.expr(inner, 1)}")
