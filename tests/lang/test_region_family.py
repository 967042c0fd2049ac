"""The device control-flow regions as a generated family: loops, if / if-else and repeat
loops, nested to depth 3 in every order, with tasks before, between and after them and
empty branches. Every kernel runs on the CPU runner, the CUDA graph with conditional nodes
and the host fallback (the loop_arch fixture), and each is checked against a plain-Python
interpretation of the same structure.

A structure is a tree of nodes:
    ("task", t)                   a task: x[i] = (x[i] * 3 + t) % P (order-sensitive), parallel for
                                  every fourth t, else a qgraph.serial loop (cheaper to compile)
    ("loop", k, body)             while qgraph.loop(f{k}): ... runs passes[k] passes per entry
    ("if", k, then, orelse)       if qgraph.cond(g{k}): ... [else: ...] (a body may be empty)
    ("repeat", k, body)           for _ in qgraph.repeat(r{k}): ...
Every non-empty body starts with a serial header (unless `header_last`) that counts the body's
runs in hits[], resets the loops directly inside it and sets the flags of the ifs directly
inside it from its run count, so every branch is taken on some passes and not on others.
"""

from __future__ import annotations

import importlib.util
import itertools
import random
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest
from helpers.arch import use_arch

import qgraph

P = 1000003  # the tasks' modulus: exact integer arithmetic, so every backend agrees bit for bit
LANES = 3


@dataclass
class Body:
    items: list = field(default_factory=list)
    header_last: bool = False  # the header after the items (only where no loop or if is directly inside)


def _regions(body: Body):
    return [item for item in body.items if item[0] != "task"]


class _Builder:
    """Numbers the regions of a structure and writes the kernel's source."""

    def __init__(self) -> None:
        self.loops: dict[int, int] = {}  # loop id -> passes per entry
        self.ifs: list[int] = []
        self.repeats: dict[int, int] = {}  # repeat id -> count
        self.bodies = 0  # hit counters, one per body
        self.lines: list[str] = []

    def body(self, body: Body, depth: int, own_loop: int | None) -> None:
        pad = "    " * depth
        hit = self.bodies
        self.bodies += 1
        header = [f"hits[{hit}] += 1"]
        if own_loop is not None:
            header += [f"c[{own_loop}] += 1", f"f{own_loop}[0] = 1 if c[{own_loop}] < {self.loops[own_loop]} else 0"]
        for item in _regions(body):
            if item[0] == "loop":
                header += [f"c[{item[1]}] = 0", f"f{item[1]}[0] = 1"]
            elif item[0] == "if":
                header.append(f"g{item[1]}[0] = (hits[{hit}] + {item[1]}) % 2")
        if not body.items and own_loop is None:
            self.lines.append(pad + "pass")
            return
        if not body.header_last:
            self.lines += [pad + line for line in header]
        for item in body.items:
            self.item(item, depth)
        if body.header_last:
            self.lines += [pad + line for line in header]

    def item(self, item: tuple, depth: int) -> None:
        pad = "    " * depth
        kind = item[0]
        if kind == "task":
            loop = "range(x.shape[0])" if item[1] % 4 == 0 else "qgraph.serial(range(x.shape[0]))"
            self.lines += [pad + f"for i in {loop}:", pad + f"    x[i] = (x[i] * 3 + {item[1]}) % {P}"]
        elif kind == "loop":
            self.lines.append(pad + f"while qgraph.loop(f{item[1]}):")
            self.body(item[2], depth + 1, item[1])
        elif kind == "repeat":
            self.lines.append(pad + f"for _ in qgraph.repeat(r{item[1]}):")
            self.body(item[2], depth + 1, None)
        else:
            self.lines.append(pad + f"if qgraph.cond(g{item[1]}):")
            self.body(item[2], depth + 1, None)
            if item[3] is not None:
                self.lines.append(pad + "else:")
                self.body(item[3], depth + 1, None)

    def number(self, body: Body) -> None:
        """Give every region an id (the ids in the tuples are placeholders until now)."""
        for n, item in enumerate(body.items):
            if item[0] == "loop":
                k = len(self.loops) + len(self.ifs) + len(self.repeats)
                self.loops[k] = 2 + k % 2
                body.items[n] = item = ("loop", k, item[2])
                self.number(item[2])
            elif item[0] == "repeat":
                k = len(self.loops) + len(self.ifs) + len(self.repeats)
                self.repeats[k] = 1 + k % 3
                body.items[n] = item = ("repeat", k, item[2])
                self.number(item[2])
            elif item[0] == "if":
                k = len(self.loops) + len(self.ifs) + len(self.repeats)
                self.ifs.append(k)
                body.items[n] = item = ("if", k, item[2], item[3])
                self.number(item[2])
                if item[3] is not None:
                    self.number(item[3])


def kernel_source(name: str, top: Body) -> tuple[str, _Builder]:
    builder = _Builder()
    builder.number(top)
    builder.body(top, 1, None)
    params = (["x", "hits", "c"] + [f"f{k}" for k in builder.loops] + [f"g{k}" for k in builder.ifs]
              + [f"r{k}: int" for k in builder.repeats])
    source = "import qgraph\n\n\n@qgraph.kernel\n" f"def {name}({', '.join(params)}):\n" + "\n".join(builder.lines)
    return source + "\n", builder


def interpret(top: Body, builder: _Builder):
    """What the kernel computes, by walking the structure in Python."""
    x = [(7 * lane + 1) % P for lane in range(LANES)]
    hits = [0] * builder.bodies
    c = [0] * (max(builder.loops, default=0) + 1)
    flags: dict[int, int] = {}
    counter = itertools.count()

    def header(body: Body, hit: int, own_loop: int | None) -> None:
        hits[hit] += 1
        if own_loop is not None:
            c[own_loop] += 1
            flags[own_loop] = 1 if c[own_loop] < builder.loops[own_loop] else 0
        for item in _regions(body):
            if item[0] == "loop":
                c[item[1]], flags[item[1]] = 0, 1
            elif item[0] == "if":
                flags[item[1]] = (hits[hit] + item[1]) % 2

    def run(body: Body, hit: int, own_loop: int | None = None) -> None:
        if not body.header_last and (body.items or own_loop is not None):
            header(body, hit, own_loop)
        for item in body.items:
            step(item)
        if body.header_last:
            header(body, hit, own_loop)

    hit_of: dict[int, int] = {}  # id(Body) -> its hit counter, in the builder's numbering order

    def assign(body: Body) -> None:
        hit_of[id(body)] = next(counter)
        for item in body.items:
            if item[0] in ("loop", "repeat"):
                assign(item[2])
            elif item[0] == "if":
                assign(item[2])
                if item[3] is not None:
                    assign(item[3])

    def step(item: tuple) -> None:
        if item[0] == "task":
            for lane in range(LANES):
                x[lane] = (x[lane] * 3 + item[1]) % P
        elif item[0] == "loop":
            while flags[item[1]]:
                run(item[2], hit_of[id(item[2])], item[1])
        elif item[0] == "repeat":
            for _ in range(builder.repeats[item[1]]):
                run(item[2], hit_of[id(item[2])])
        else:
            taken = flags[item[1]]
            if taken:
                run(item[2], hit_of[id(item[2])])
            elif item[3] is not None:
                run(item[3], hit_of[id(item[3])])

    assign(top)
    run(top, hit_of[id(top)])
    return np.array(x, np.int64), np.array(hits, np.int64)


# ------------------------------------------------------------------ the structures

KINDS = ("loop", "if", "ifelse", "repeat", "task")
_task_ids = itertools.count(1)


def _leaf(kind: str, inner: list | None = None) -> tuple:
    inner = inner if inner is not None else [("task", next(_task_ids))]
    if kind == "task":
        return ("task", next(_task_ids))
    if kind == "if":
        return ("if", 0, Body(list(inner)), None)
    if kind == "ifelse":
        return ("if", 0, Body(list(inner)), Body([("task", next(_task_ids))]))
    return (kind, 0, Body(list(inner)))


def _pairs() -> list[list]:
    """Every outer region holding every ordered pair of regions (or tasks), nothing between them
    and nothing after the second: what a region ends with is what the next node hangs on."""
    tops = []
    for outer in ("loop", "ifelse", "repeat"):
        group = []
        for a, b in itertools.product(KINDS, KINDS):
            group.append(_leaf(outer, [_leaf(a), _leaf(b)]))
            if len(group) == 5:
                tops.append(group)
                group = []
        if group:
            tops.append(group)
    return tops


def _random_body(rng: random.Random, depth: int) -> Body:
    items = []
    for _ in range(rng.randint(0 if depth else 1, 3)):
        kind = rng.choice(KINDS if depth < 3 else ("task",))
        if kind == "task":
            items.append(("task", next(_task_ids)))
        elif kind in ("if", "ifelse"):
            then = _random_body(rng, depth + 1) if rng.random() < 0.8 else Body()
            orelse = (_random_body(rng, depth + 1) if rng.random() < 0.7 else Body()) if kind == "ifelse" else None
            items.append(("if", 0, then, orelse))
        else:
            inner = _random_body(rng, depth + 1)
            if not inner.items:
                inner.items.append(("task", next(_task_ids)))
            items.append((kind, 0, inner))
    body = Body(items)
    body.header_last = bool(items) and not any(item[0] in ("loop", "if") for item in items) and rng.random() < 0.5
    return body


def _structures() -> list[Body]:
    tops = [Body(group) for group in _pairs()]
    rng = random.Random(29)
    for _ in range(10):
        body = _random_body(rng, 0)
        while not _regions(body):
            body = _random_body(rng, 0)
        tops.append(body)
    return tops


STRUCTURES = _structures()
_kernels: dict = {}


def _kernel(n: int, tmp_path_factory):
    if n not in _kernels:
        source, builder = kernel_source(f"family_{n}", STRUCTURES[n])
        path = tmp_path_factory.mktemp("family") / f"qgraph_family_{n}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"qgraph_family_{n}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _kernels[n] = (getattr(module, f"family_{n}"), builder, source)
    return _kernels[n]


PAIR_KERNELS = len(_pairs())
# The CPU runner compiles every task as its own numba function (about 0.2 s each), so on the CPU the
# family runs its deep random structures and one pair kernel per outer region kind; the CUDA device
# loop and the host fallback run every structure, the device loop also with every loop unrolled 3 times
# where it can be (QGRAPH_UNROLL=3: innermost bodies copied, gated copies around if regions).
CPU_STRUCTURES = [0, PAIR_KERNELS // 3, 2 * PAIR_KERNELS // 3] + list(range(PAIR_KERNELS, len(STRUCTURES)))
# every other CPU structure in the parallel form (lang.cpu.serial_form): under pytest-xdist each worker has one
# numba thread, where every other call runs the serial form, so the runner calling its units is tested here
CASES = ([pytest.param("cpu" if k % 2 == 0 else "cpu-parallel", n, id=f"cpu-{n}" if k % 2 == 0 else f"cpu-parallel-{n}")
          for k, n in enumerate(CPU_STRUCTURES)]
         + [pytest.param(where, n, id=f"{where}-{n}", marks=pytest.mark.cuda)
            for where in ("cuda", "cuda-host", "cuda-unroll3") for n in range(len(STRUCTURES))])


@pytest.fixture
def where(request, monkeypatch):
    """The loop_arch fixture's three places, chosen by the test's own parameter."""
    place = request.node.callspec.params["place"]
    if place == "cuda-host":
        monkeypatch.setenv("QGRAPH_GRAPH_WHILE", "host")
    if place == "cuda-unroll3":
        monkeypatch.setenv("QGRAPH_UNROLL", "3")
    if place == "cpu-parallel":
        monkeypatch.setenv("QGRAPH_CPU_SERIAL_BELOW", "0")
    use_arch(place.split("-")[0])
    yield place
    qgraph.sync()
    for name in ("QGRAPH_GRAPH_WHILE", "QGRAPH_UNROLL", "QGRAPH_CPU_SERIAL_BELOW"):
        monkeypatch.delenv(name, raising=False)
    qgraph.init(place.split("-")[0])


@pytest.mark.parametrize("place, n", CASES)
def test_region_family(place, n, where, tmp_path_factory):
    kernel, builder, source = _kernel(n, tmp_path_factory)
    expected_x, expected_hits = interpret(STRUCTURES[n], builder)
    x = qgraph.from_numpy(np.array([(7 * lane + 1) % P for lane in range(LANES)], np.int64))
    hits = qgraph.ndarray(qgraph.i64, (builder.bodies,))
    c = qgraph.ndarray(qgraph.i64, (max(builder.loops, default=0) + 1,))
    flags = [qgraph.ndarray(qgraph.i32, (1,)) for _ in list(builder.loops) + builder.ifs]
    kernel(x, hits, c, *flags, *builder.repeats.values())
    np.testing.assert_array_equal(hits.to_numpy(), expected_hits, err_msg=source)
    np.testing.assert_array_equal(x.to_numpy(), expected_x, err_msg=source)
    if place.startswith("cpu"):  # one small call: the serial form, unless the place turned it off
        assert kernel.stats.parallel_forms == (place == "cpu-parallel")
