"""The three-address form a task's adjoint is built from: every value one named operation.

A flattened task body (lang.flat.view: scalars and arrays only) becomes a list of these
statements (lang.adjoint.three_address): `Let` names one value (an operation over atoms,
an array load, a copy), `Store` and `Atomic` are the body's effects on arrays, and `Branch`,
`CountedLoop` and `WhileLoop` keep the structure. Names are assigned once, except the
merge names of branches (assigned at the end of each branch) and the values a loop carries
from pass to pass (`carried`), which are plain variables updated in place.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass(eq=False)
class Let:
    """`target = value`. kind: "op" (one operation over atoms), "copy", "load" (`array[index]`),
    "unknown" (a load the adjoint cannot recompute: `why` says what it is), "returned" (what an
    atomic returned: no gradient, and not recomputable either), "stopped" (qgraph.stop_gradient's
    value: a copy, recomputed as one, that carries no gradient), "custom" (a call of a helper with a
    custom adjoint, kept a call: `adjoint` says how its reverse calls the user's adjoint; a helper
    of several results assigns them all, `parts`, the first of which is `target`)."""

    target: str
    value: ast.expr
    line: int
    kind: str = "op"
    array: str | None = None
    index: tuple[ast.expr, ...] = ()
    why: str = ""
    blocks: tuple = ()  # the enclosing Branch/CountedLoop/WhileLoop statements, outermost first
    parts: tuple[str, ...] = ()  # "custom" of several results: the names assigned, in order
    adjoint: object = None  # "custom": its lang.adjoint.custom.Custom

    @property
    def targets(self) -> tuple[str, ...]:
        """The names this Let assigns."""
        return self.parts or (self.target,)


@dataclass(eq=False)
class Store:
    """`array[index] = value` (op None) or `array[index] op= value`."""

    array: str
    index: tuple[ast.expr, ...]
    value: ast.expr
    op: ast.operator | None
    line: int
    blocks: tuple = ()


@dataclass(eq=False)
class Atomic:
    """`qgraph.atomic_<name>(array, index, value)`; what it returns is an "unknown" Let."""

    name: str
    array: str
    index: tuple[ast.expr, ...]
    value: ast.expr
    line: int
    blocks: tuple = ()


@dataclass(eq=False)
class Branch:
    test: ast.expr
    then: list
    orelse: list
    line: int
    blocks: tuple = ()


@dataclass(eq=False)
class CountedLoop:
    """`for var in range(start, stop, step)`; `carried`: the variables updated in place."""

    var: str
    start: ast.expr
    stop: ast.expr
    step: ast.expr
    body: list
    line: int
    carried: frozenset[str] = frozenset()
    blocks: tuple = ()
    count: str | None = None  # a loop with a break: the variable counting the passes it ran


@dataclass(eq=False)
class WhileLoop:
    """`while True: <test_body>; if not test: break; <body>`."""

    test_body: list
    test: ast.expr
    body: list
    line: int
    carried: frozenset[str] = frozenset()
    blocks: tuple = ()


@dataclass(eq=False)
class Jump:
    """break or continue."""

    kind: str
    line: int
    blocks: tuple = ()


@dataclass
class Body:
    """A task body in three-address form, with the facts its adjoint needs."""

    stmts: list
    lets: dict[str, list[Let]] = field(default_factory=dict)  # name -> every Let assigning it
    carried: dict[str, str] = field(default_factory=dict)  # variables loops update in place -> source name


def cannot(src, message: str, line: int | None) -> Exception:
    """The error for what the adjoint of kernel `src` (an adjoint source) cannot differentiate."""
    return src.error(f"kernel {src.name.removesuffix('_adjoint')}: cannot differentiate: {message}", line)


def names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def walk(stmts: list):
    """Every statement of `stmts`, nested ones included, in program order."""
    for s in stmts:
        yield s
        if isinstance(s, Branch):
            yield from walk(s.then)
            yield from walk(s.orelse)
        elif isinstance(s, CountedLoop):
            yield from walk(s.body)
        elif isinstance(s, WhileLoop):
            yield from walk(s.test_body)
            yield from walk(s.body)


def render(stmts: list, body_of=None) -> list[ast.stmt]:
    """Python statements of `stmts`: loads and copies as assignments, effects left out
    (`body_of(Let)` may replace a Let's value, e.g. an unknown value by a typed stand-in)."""
    out: list[ast.stmt] = []
    for s in stmts:
        if isinstance(s, Let):
            value = body_of(s) if body_of is not None else s.value
            if value is not None:
                target = ast.Tuple([ast.Name(p, ast.Store()) for p in s.parts], ast.Store()) if s.parts \
                    else ast.Name(s.target, ast.Store())
                out.append(_at(ast.Assign([target], value), s.line))
        elif isinstance(s, Branch):
            then, orelse = render(s.then, body_of), render(s.orelse, body_of)
            if then or orelse:
                out.append(_at(ast.If(s.test, then or [ast.Pass()], orelse), s.line))
        elif isinstance(s, CountedLoop):
            body = render(s.body, body_of)
            if body:
                out.append(_at(ast.For(ast.Name(s.var, ast.Store()), range_call(s.start, s.stop, s.step), body, []),
                               s.line))
        elif isinstance(s, WhileLoop):
            test = render(s.test_body, body_of)
            body = render(s.body, body_of)
            if body or test:
                stop = _at(ast.If(ast.UnaryOp(ast.Not(), s.test), [ast.Break()], []), s.line)
                out.append(_at(ast.While(ast.Constant(True), test + [stop] + body, []), s.line))
        elif isinstance(s, Jump):
            out.append(_at(ast.Break() if s.kind == "break" else ast.Continue(), s.line))
    return out


def range_call(start: ast.expr, stop: ast.expr, step: ast.expr) -> ast.Call:
    return ast.Call(ast.Name("range", ast.Load()), [start, stop, step], [])


def _at(node: ast.stmt, line: int) -> ast.stmt:
    node.lineno = line
    return ast.fix_missing_locations(node)
