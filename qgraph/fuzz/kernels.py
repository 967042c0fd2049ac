"""Tasks and kernels of a fuzzed program: parallel and serial tasks with a plan of what each
writes, and the kernels a program calls (in-place updates, maps, losses, a mix; kernels around
repeat loops, flag loops and graph_while)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .grammar import Grammar
from .statements import Task, base_terms, branch_local, inner_loop, store, tuple_call, vector_local

OWN = ("set", "add", "inplace_add", "inplace_set", "scan")
SCALARS = {"dt": "float", "n": "int", "steps": "int"}


@dataclass
class Pool:
    """The program's arrays by kind and role, and its helpers: what kernels are written from."""

    g: Grammar
    kinds: dict[str, str]
    state: list[str]  # 1-D arrays updated in place
    outs: list[str]  # 1-D arrays written (set, add, scatter)
    vstate: list[str]  # arrays of vectors updated in place
    vouts: list[str]  # arrays of vectors written
    mouts: list[str] = field(default_factory=list)  # 2-D arrays written by ndrange tasks
    helpers: list[str] = field(default_factory=list)
    tuple_helpers: list[str] = field(default_factory=list)

    def floats(self) -> list[str]:
        return [a for a, k in self.kinds.items() if k in ("n", "m", "one", "zero", "mat", "v3")]

    def reads(self) -> list[str]:
        return self.floats() + (["idx"] if "idx" in self.kinds else [])


@dataclass
class Kernel:
    """One @qgraph.kernel: its body lines; its parameters are the names the body uses."""

    name: str
    body: list[str]
    decorator: str = "@qgraph.kernel"
    features: set[str] = field(default_factory=set)

    def params(self, order: list[str]) -> list[str]:
        text = "\n".join(self.body)
        return [a for a in list(order) + list(SCALARS) if re.search(rf"(?<![.\w]){a}\b", text)]

    def source(self, order: list[str], kinds: dict[str, str]) -> str:
        shown = [f"{a}: V3[:]" if kinds.get(a) == "v3" else f"{a}: {SCALARS[a]}" if a in SCALARS else a
                 for a in self.params(order)]
        return "\n".join([self.decorator, f"def {self.name}({', '.join(shown)}):"] + [f"    {b}" for b in self.body])

    def call(self, order: list[str], values: dict[str, str], wrap=lambda a: f'A["{a}"]') -> str:
        args = [values[a] if a in SCALARS else wrap(values.get(a, a)) for a in self.params(order)]
        return f"{self.name}({', '.join(args)})"


def indent(lines: list[str], by: int = 1) -> list[str]:
    return ["    " * by + line for line in lines]


def _task(pool: Pool, index: str | None, reads: list[str], writes: list[tuple[str, str]]) -> Task:
    written = {a for a, _ in writes}
    own = [a for a, how in writes if how in OWN]
    t = Task(pool.g, index, pool.kinds, [a for a in reads if a not in written], own, pool.helpers,
             pool.tuple_helpers)
    t.self_reads = [a for a, how in writes if how.startswith("inplace")]
    base_terms(t)
    return t


def _body(t: Task, loops: float) -> None:
    g = t.g
    for _ in range(g.rng.randint(0, 2)):
        v = g.fresh("t")
        t.add(f"{v} = {t.expr(2)}")
        t.result(v, v)
        if g.chance(0.2):
            t.add(g.pick([f"{v} *= 0.5 + 0.3 * math.tanh({t.expr(1)})", f"{v} += {t.expr(1)}",
                          f"{v} -= {t.expr(1)}", f"{v} /= 2.0 + math.sin({t.term()})"]))
            t.features.add("augmented_local")
    if g.chance(loops):
        inner_loop(t)
        if g.chance(0.25):
            inner_loop(t)
    if g.chance(0.25):
        branch_local(t)
    if (t.of("v3") or t.vector_self()) and g.chance(0.6):
        vector_local(t)
    if t.tuple_helpers and g.chance(0.3):
        tuple_call(t)


def parallel_task(pool: Pool, reads: list[str], writes: list[tuple[str, str]], in_repeat: bool = False) -> Task:
    """`for i in range(...)`: its stores at i, reductions and scatters; reads per the rules."""
    g = pool.g
    t = _task(pool, "i", reads, writes)
    ns = [a for a in t.readable + t.own if pool.kinds[a] in ("n", "v3", "idx")]
    size = f"{g.pick(ns)}.shape[0]" if ns and g.chance(0.85) else "n"
    bound = g.weighted({f"range({size})": 80, f"range(1, {size})": 8, f"range({size} - 1, -1, -1)": 7,
                        f"range(0, {size}, 2)": 5})
    if bound != f"range({size})":
        t.features.add("parallel_range_form")
    if g.chance(0.12):
        t.add(f"if {g.condition(t.scope)}:", "    continue")
        t.features.add("top_continue")
    _body(t, 0.5)
    for target, how in writes:
        store(t, target, how, in_repeat)
    t.lines = [f"for i in {bound}:"] + indent(t.lines)
    t.features.add("parallel_task")
    return t


def ndrange_task(pool: Pool, reads: list[str], writes: list[tuple[str, str]]) -> Task:
    """`for i, j in qgraph.ndrange(...)` over a 2-D output (and reductions)."""
    t = _task(pool, "i, j", reads, writes)
    _body(t, 0.3)
    for target, how in writes:
        store(t, target, how)
    b = next((a for a, _ in writes if pool.kinds[a] == "mat"), pool.mouts[0])
    t.lines = [f"for i, j in qgraph.ndrange({b}.shape[0], {b}.shape[1]):"] + indent(t.lines)
    t.features.add("ndrange_task")
    return t


def serial_task(pool: Pool, reads: list[str], writes: list[tuple[str, str]]) -> Task:
    """A run of top-level statements: serial loops over whole arrays, searches, counts, scans."""
    g = pool.g
    t = _task(pool, None, reads, writes)
    scans = [a for a, how in writes if how == "scan"]
    ns = t.of("n")
    if scans and ns:
        x, k, s = g.pick(ns), g.fresh("k"), g.fresh("s")
        inner = t.scope.with_terms(f"{x}[{k}]")
        t.add(f"{s} = {t.term()}", f"for {k} in qgraph.serial(range({x}.shape[0])):",
              f"    {s} = {g.lit(0.3, 0.9)} * {s} + {g.expr(inner, 1)}",
              f"    {scans[0]}[{k}] {g.pick(['=', '+='])} {s}{g.pick(['', ' * 0.5'])}")
        t.result(s, s)
        t.features.add("serial_scan")
    _body(t, 0.9)
    for target, how in writes:
        if how != "scan":
            store(t, target, "add" if how == "scatter" else how)
    t.features.add("serial_task")
    return t


def _plan(pool: Pool, parallel: bool, in_place: float) -> list[tuple[str, str]]:
    """One to two distinct targets for a task of a mixed kernel, and how each is written."""
    g = pool.g
    options: list[tuple[str, str]] = []
    for a in pool.outs:
        options.append((a, g.pick(["set", "add"] + (["scatter"] if parallel and "idx" in pool.kinds else [])
                                  + ([] if parallel else ["scan", "scan", "prefix"]))))
    options += [(a, g.pick(["set", "add"])) for a in pool.vouts]
    if "loss" in pool.kinds:
        options += [("loss", "reduce")] * 2
    if g.chance(in_place):
        options += [(a, g.pick(["inplace_add", "inplace_set"])) for a in pool.state + pool.vstate]
    g.rng.shuffle(options)
    chosen: dict[str, str] = {}
    count = g.rng.randint(1, 2)
    for a, how in options:
        if len(chosen) < count:
            chosen.setdefault(a, how)
    return list(chosen.items())


def mixed_kernel(pool: Pool, name: str, in_place: float = 0.25) -> Kernel:
    """One to three tasks, each writing outputs, the loss, or (sometimes) state in place."""
    g = pool.g
    k = Kernel(name, [])
    kinds = [g.weighted({"par": 70, "ser": 22, "nd": 8 if pool.mouts else 0}) for _ in range(g.rng.randint(1, 3))]
    plans = [_plan(pool, kind == "par", in_place) if kind != "nd" else
             [(pool.mouts[0], g.pick(["set", "add"]))] + ([("loss", "reduce")] if g.chance(0.4) else [])
             for kind in kinds]
    for n, (kind, writes) in enumerate(zip(kinds, plans)):
        # what a later task writes is not read before (kernel.grad could not get the old values back)
        later = {a for w in plans[n + 1:] for a, _ in w}
        reads = [a for a in pool.reads() if a not in later]
        task = {"par": parallel_task, "ser": serial_task, "nd": ndrange_task}[kind]
        t = task(pool, reads, writes)
        k.body += t.lines
        k.features |= t.features
    return k


def update_tasks(pool: Pool, in_repeat: bool = False) -> tuple[list[str], set[str]]:
    """Parallel tasks updating the state in place (x += dt * f(...), x = g(x, ...)), one or two."""
    g = pool.g
    targets = list(pool.state + pool.vstate)
    g.rng.shuffle(targets)
    groups = [targets] if len(targets) < 2 or g.chance(0.5) else [targets[:1], targets[1:]]
    lines, features = [], set()
    for group in groups:
        writes = [(a, "inplace_set" if g.chance(0.25) else "inplace_add") for a in group]
        t = parallel_task(pool, [a for a in pool.reads() if a != "loss"], writes, in_repeat)
        lines += t.lines
        features |= t.features
    return lines, features


def update_kernel(pool: Pool, name: str) -> Kernel:
    lines, features = update_tasks(pool)
    return Kernel(name, lines, features=features | {"kernel_update"})


def map_kernel(pool: Pool, name: str) -> Kernel:
    """Outputs computed from the state (set, add or scatter)."""
    g = pool.g
    targets = pool.outs + pool.vouts
    writes = [(a, g.pick(["set", "add"] + (["scatter"] if "idx" in pool.kinds else []))) for a in targets]
    lines, features = [], set()
    if writes:
        t = parallel_task(pool, pool.reads(), writes)
        lines, features = t.lines, t.features
    if pool.mouts:
        t = ndrange_task(pool, pool.reads(), [(pool.mouts[0], g.pick(["set", "add"]))])
        lines, features = lines + t.lines, features | t.features
    return Kernel(name, lines, features=features | {"kernel_map"})


def loss_tasks(pool: Pool) -> tuple[list[str], set[str]]:
    """The loss: a parallel reduction, a serial task (scan, search, count), or both."""
    g = pool.g
    lines, features = [], set()
    kinds = g.pick([["par"], ["ser"], ["par", "ser"]])
    for kind in kinds:
        if kind == "par":
            t = parallel_task(pool, pool.reads(), [("loss", "reduce")])
        else:
            writes = [("loss", "reduce")] + ([(g.pick(pool.outs), "scan")] if pool.outs and g.chance(0.4) else [])
            t = serial_task(pool, pool.reads(), writes)
        lines += t.lines
        features |= t.features
    return lines, features


def loss_kernel(pool: Pool, name: str) -> Kernel:
    lines, features = loss_tasks(pool)
    return Kernel(name, lines, features=features | {"kernel_loss"})


def repeat_kernel(pool: Pool, name: str) -> Kernel:
    """`for _ in qgraph.repeat(steps):` around in-place updates (in a qgraph.cond branch sometimes),
    with tasks before and after it."""
    g = pool.g
    body, features = update_tasks(pool, in_repeat=True)
    if "sel0" in pool.kinds:
        other, more = update_tasks(pool, in_repeat=True)
        body = ["if qgraph.cond(sel0):"] + indent(body) + ["else:"] + indent(other)
        features |= more | {"cond"}
    lines = []
    if g.chance(0.2) and pool.outs:
        lines += map_kernel(pool, "unused").body
    lines += ["for _ in qgraph.repeat(steps):"] + indent(body)
    if g.chance(0.7):
        more_lines, more = loss_tasks(pool)
        lines += more_lines
        features |= more
    return Kernel(name, lines, features=features | {"repeat"})


def flag_kernel(pool: Pool, name: str, do_while: bool) -> Kernel:
    """A `while qgraph.loop(flag0):` loop, or a graph_while kernel, counting its passes in left0."""
    g = pool.g
    body, features = update_tasks(pool, in_repeat=True)
    stop = "left0[()] <= 0"
    if g.chance(0.25) and pool.state:
        stop += f" or {g.pick(pool.state)}[0] > {g.lit(1.5, 2.5)}"
        features.add("flag_data_stop")
    if do_while:
        lines = body + ["left0[()] -= 1", f"flag0[()] = 0 if {stop} else 1"]
        return Kernel(name, lines, decorator='@qgraph.kernel(graph_while="flag0")',
                      features=features | {"graph_while"})
    lines = ["while qgraph.loop(flag0):"] + indent(body + ["left0[()] -= 1", f"if {stop}:", "    flag0[()] = 0"])
    if g.chance(0.6):
        more_lines, more = loss_tasks(pool)
        lines += more_lines
        features |= more
    return Kernel(name, lines, features=features | {"flag_loop"})


def counter_kernel(name: str) -> Kernel:
    """The flag setter of a graph_while step."""
    return Kernel(name, ["left0[()] -= 1", "flag0[()] = 1 if left0[()] > 0 else 0"])
