"""The fuzzer's expression grammar: random float expressions over a scope of terms, kept smooth
and bounded (every function's argument stays inside its domain), so that a gradient mismatch
means the adjoint is wrong, not that central differences straddled a pole or a NaN."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# {a}, {b}: subexpressions. Templates that repeat {a} are given leaves only (no blow-up of size).
UNARY = ["math.sin({a})", "math.cos({a})", "math.tanh({a})", "math.exp(0.5 * math.tanh({a}))",
         "math.log(1.5 + math.sin({a}))", "math.sqrt(abs({a}) + 0.25)", "abs({a})", "({a}) ** 2", "({a}) ** 3",
         "(1.2 + math.cos({a})) ** 0.5", "qgraph.clamp({a}, -0.6, 0.7)", "-({a})", "math.atan({a})",
         "math.log1p({a} * {a})", "math.exp(-{a} * {a})", "math.sqrt(0.5 + {a} * {a})", "math.erf({a})",
         "(({a}) % 1.3)", "float({a})"]
BINARY = ["({a} + {b})", "({a} - {b})", "({a} * {b})", "({a} / (2.0 + math.sin({b})))", "min({a}, {b})",
          "max({a}, {b})", "math.atan2({a}, 1.5 + math.cos({b}))", "({a} / (1.5 + {b} * {b}))",
          "math.hypot({a}, 1.2 + math.sin({b}))", "({a} * 0.5 - {b} * 0.25)"]


@dataclass
class Scope:
    """What an expression may read: float leaves (array reads, locals, scalar parameters), the
    @qgraph.func helpers taking two floats, and leaves that carry no float (loop counters)."""

    terms: list[str]
    helpers: list[str] = field(default_factory=list)
    ints: list[str] = field(default_factory=list)

    def with_terms(self, *extra: str) -> Scope:
        return Scope(self.terms + [t for t in extra if t], list(self.helpers), list(self.ints))


class Grammar:
    """Random choices of the fuzzer, all drawn from one seeded `random.Random`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.counter = 0

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, items):
        return items[self.rng.randrange(len(items))]

    def weighted(self, table: dict):
        keys = list(table)
        return self.rng.choices(keys, weights=[table[k] for k in keys])[0]

    def fresh(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def lit(self, lo: float = -1.2, hi: float = 1.2) -> str:
        """A float literal away from 0 by at least 0.05 (thresholds, coefficients)."""
        v = self.rng.uniform(lo, hi)
        if abs(v) < 0.05:
            v = 0.05 if v >= 0 else -0.05
        return f"{v:.3f}"

    def pos(self) -> str:
        return f"{self.rng.uniform(0.1, 0.9):.3f}"

    def leaf(self, scope: Scope) -> str:
        if scope.ints and self.chance(0.08):
            return f"({self.pick(scope.ints)} + 1) * {self.pos()}"
        if not scope.terms or self.chance(0.1):
            return self.lit()
        return self.pick(scope.terms)

    def expr(self, scope: Scope, depth: int = 2) -> str:
        """A random float expression of at most `depth` levels of operations."""
        if depth <= 0 or self.chance(0.2):
            return self.leaf(scope)
        r = self.rng.random()
        if r < 0.32:
            t = self.pick(UNARY)
            a = self.leaf(scope) if t.count("{a}") > 1 else self.expr(scope, depth - 1)
            return t.format(a=a)
        if r < 0.78:
            t = self.pick(BINARY)
            b = self.leaf(scope) if t.count("{b}") > 1 else self.expr(scope, depth - 1)
            return t.format(a=self.expr(scope, depth - 1), b=b)
        if r < 0.9:
            return self.select(scope, depth)
        if scope.helpers:
            return f"{self.pick(scope.helpers)}({self.expr(scope, depth - 1)}, {self.leaf(scope)})"
        return f"{self.pos()} * {self.expr(scope, depth - 1)}"

    def select(self, scope: Scope, depth: int) -> str:
        """`a if c else b` on data."""
        cond = self.condition(scope)
        return f"({self.expr(scope, depth - 1)} if {cond} else {self.expr(scope, depth - 1)})"

    def condition(self, scope: Scope) -> str:
        op = self.pick([">", "<", ">=", "<="])
        c = f"{self.leaf(scope)} {op} {self.lit(-0.8, 0.8)}"
        if self.chance(0.15):
            c += f" {self.pick(['and', 'or'])} {self.leaf(scope)} > {self.lit(-0.8, 0.8)}"
        return c

    def bounded(self, scope: Scope, depth: int = 2) -> str:
        """An expression kept in [-1.5, 1.5]: what loops and repeated updates add every pass."""
        e = self.expr(scope, depth)
        return self.pick([f"math.tanh({e})", f"math.sin({e})", f"qgraph.clamp({e}, -1.5, 1.5)", f"math.atan({e})"])

    # -- helpers ---------------------------------------------------------------------------

    def helper(self, name: str, others: list[str], tuple_result: bool = False) -> tuple[str, str]:
        """A @qgraph.func of two floats (early returns, branches, loops, calls of earlier helpers),
        and the feature it shows."""
        scope = Scope(["a", "b"], helpers=others)
        lines = ["@qgraph.func", f"def {name}(a, b):"]
        if tuple_result:
            lines += [f"    t = {self.expr(scope, 2)}", f"    return {self.expr(scope.with_terms('t'), 2)}, "
                      f"{self.expr(scope.with_terms('t'), 1)}"]
            return "\n".join(lines), "helper_tuple"
        form = self.weighted({"early": 4, "elif": 2, "loop": 2, "plain": 2, "return_in_loop": 0.3})
        if form == "early":
            lines += [f"    if {self.condition(scope)}:", f"        return {self.expr(scope, 2)}",
                      f"    return {self.expr(scope, 2)}"]
        elif form == "elif":
            lines += [f"    if {self.condition(scope)}:", f"        return {self.expr(scope, 2)}",
                      f"    elif {self.condition(scope)}:", f"        r = {self.expr(scope, 1)}",
                      f"        return r * {self.lit()}", "    else:", f"        return {self.expr(scope, 2)}"]
        elif form == "loop":
            lines += ["    s = 0.0", f"    for k in range({self.rng.randint(2, 3)}):",
                      f"        s = 0.8 * s + {self.expr(Scope(['a', 'b'], ints=['k']), 1)}",
                      f"    return s * {self.lit()} + {self.expr(scope, 1)}"]
        elif form == "plain":
            lines += [f"    return {self.expr(scope, 2)}"]
        else:  # documented: a helper that returns inside a loop
            lines += ["    s = a", "    for k in range(3):", f"        if s > {self.lit(1.5, 2.5)}:",
                      "            return s", f"        s = s + 0.5 * {self.expr(scope, 1)}", "    return s * b"]
        return "\n".join(lines), f"helper_{form}"
