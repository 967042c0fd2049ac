"""Value ranges of index expressions: which subscripts and loops a CUDA task computes in 32 bits.

numba computes `p[min(i + 1, p.shape[0] - 1), j]` in 64 bits: the clamp alone is 11 SASS
instructions where CUDA C++'s `int` takes 2, and every bound check a pair of compares. An
expression of parallel loop variables, integer literals and shapes of arrays that are not
large, joined by `+`, `-`, `*`, unary `-`, `min` and `max`, has a range known when the code is
generated: an extent is at most `lang.types.extents.MAX_EXTENT` (2**31 - 2**16 - 1), and a loop
variable lies in [its literal start, its stop's largest value - 1]. Where every step of the
expression stays inside int32 (`IndexRanges.visit` is None otherwise), computing it in 32 bits
gives the value the 64-bit code gives, so the subscript does (compiler.numba_addressing's
`_qg_ldx`/`_qg_stx`). The 2**16 below 2**31 that `LARGE` leaves is the room literal offsets such
as `i + 1` need. Only subscripts are narrowed: the variables keep their int64 values.
"""

from __future__ import annotations

import ast
from collections import Counter

from ..front.parse import collect_names
from ..lower.math_calls import MAX, MIN
from ..types.extents import MAX_EXTENT

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
Range = tuple[int, int]  # (least, largest) value


def loop_floors(task) -> dict[str, int]:
    """The parallel loop variables of `task` that its body never assigns, with the least value
    each takes: a literal start (0 without one) and no step or a positive literal one."""
    floors = {}
    assigned = collect_names(task.body).stored  # task.stored counts the loop variables themselves
    for var, dim in zip(task.loop_vars, task.dims):
        start = 0 if dim.start is None else literal(dim.start)
        step = 1 if dim.step is None else literal(dim.step)
        if start is not None and start >= 0 and step is not None and step > 0 and var not in assigned:
            floors[var] = start
    return floors


def literal(expr: ast.expr) -> int | None:
    """The value of an integer literal, `-3` included; None for anything else."""
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        value = literal(expr.operand)
        return None if value is None else -value
    return None


class IndexRanges(ast.NodeVisitor):
    """`visit(expr)`: the range of an integer expression whose every step stays in int32, else None.

    `arrays`: the array parameters (name -> ndim) that are not large and that the task never
    rebinds, whose `shape[k]` lie in [0, MAX_EXTENT]; `loops`: loop variable -> range."""

    def __init__(self, arrays: dict[str, int], loops: dict[str, Range] | None = None) -> None:
        self.arrays = arrays
        self.loops = loops or {}
        self.shapes: dict[tuple[str, int], Range] = {}  # (array, axis) -> a narrower range than [0, MAX_EXTENT]
        self.locals: dict[str, Range] = {}  # locals assigned once from an expression with a range

    @classmethod
    def of_task(cls, task, arrays: dict[str, int]) -> IndexRanges:
        """The ranges in `task`'s body: its loop variables' from their literal starts and bounded
        stops; a shape that stops a loop (`range(1, a.shape[0] - 1)`) is larger than that start
        there, since the body runs only when every dimension does (`min(i + 1, a.shape[0] - 1)`
        is then never negative and needs no wraparound)."""
        ranges = cls(arrays)
        floors = loop_floors(task) if task.parallel else {}
        body_shapes = {}
        for var, dim in zip(task.loop_vars, task.dims):
            stop = ranges.visit(dim.stop)
            if var in floors and stop is not None:
                ranges.loops[var] = (floors[var], max(floors[var], stop[1] - 1))
                shape, offset = ranges._shape_plus_literal(dim.stop)
                if shape is not None:  # shape + offset > floor
                    least = max(body_shapes.get(shape, (0, 0))[0], floors[var] + 1 - offset)
                    body_shapes[shape] = (min(least, MAX_EXTENT), MAX_EXTENT)
        ranges.shapes = body_shapes
        return ranges

    def add_locals(self, body: list[ast.stmt], reserved: set[str]) -> None:
        """The ranges of the locals `body` assigns once, in a statement of its own top level, from
        an expression with a range (`ip = min(i + 1, n - 1)`, then `p[ip, j]`): every read of such
        a local follows its one assignment, so it holds that expression's value. `reserved`:
        parameter names and loop variables."""
        stores = Counter(n.id for stmt in body for n in ast.walk(stmt)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
        for stmt in body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                found = self.visit(stmt.value) if stores[name] == 1 and name not in reserved else None
                if found is not None:
                    self.locals[name] = found

    def _shape_plus_literal(self, expr: ast.expr) -> tuple[tuple[str, int] | None, int]:
        """((array, axis), c) for `a.shape[k] + c` or `- c` (c a literal, 0 without one)."""
        offset = 0
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)) and literal(expr.right) is not None:
            offset = literal(expr.right) * (1 if isinstance(expr.op, ast.Add) else -1)
            expr = expr.left
        return self._shape(expr), offset

    def _shape(self, node: ast.expr) -> tuple[str, int] | None:
        """(array, axis) of `a.shape[k]` for an array of `arrays`."""
        if not isinstance(node, ast.Subscript):
            return None
        owner, k = node.value, literal(node.slice)
        if not (isinstance(owner, ast.Attribute) and owner.attr == "shape" and isinstance(owner.value, ast.Name)):
            return None
        ndim = self.arrays.get(owner.value.id, 0)
        return (owner.value.id, k % ndim) if k is not None and -ndim <= k < ndim else None

    def counts_fit(self, task) -> bool:
        """Whether every dimension of `task`'s parallel loop has fewer than 2**31 iterations, by
        the ranges of its bounds alone (values the arguments cannot change)."""
        plain = IndexRanges(self.arrays)  # not the shapes narrowed inside the body
        for dim in task.dims:
            start = (0, 0) if dim.start is None else plain.visit(dim.start)
            stop = plain.visit(dim.stop)
            if start is None or stop is None or max(stop[1] - start[0], start[1] - stop[0]) > INT32_MAX:
                return False
        return bool(task.dims)

    def visit(self, node: ast.AST) -> Range | None:
        found = super().visit(node)
        return found if found is not None and INT32_MIN <= found[0] and found[1] <= INT32_MAX else None

    def generic_visit(self, node: ast.AST) -> None:
        return None

    def visit_Constant(self, node: ast.Constant) -> Range | None:
        return (node.value, node.value) if type(node.value) is int else None

    def visit_Name(self, node: ast.Name) -> Range | None:
        return self.loops.get(node.id, self.locals.get(node.id))

    def visit_Subscript(self, node: ast.Subscript) -> Range | None:
        """`a.shape[k]` of an array that is not large."""
        shape = self._shape(node)
        return None if shape is None else self.shapes.get(shape, (0, MAX_EXTENT))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Range | None:
        found = self.visit(node.operand)
        if found is None or not isinstance(node.op, (ast.USub, ast.UAdd)):
            return None
        return (-found[1], -found[0]) if isinstance(node.op, ast.USub) else found

    def visit_BinOp(self, node: ast.BinOp) -> Range | None:
        a, b = self.visit(node.left), self.visit(node.right)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Add):
            return (a[0] + b[0], a[1] + b[1])
        if isinstance(node.op, ast.Sub):
            return (a[0] - b[1], a[1] - b[0])
        if isinstance(node.op, ast.Mult):
            products = [x * y for x in a for y in b]
            return (min(products), max(products))
        return None

    def visit_Call(self, node: ast.Call) -> Range | None:
        """The generated `_qg_min`/`_qg_max` of two values (lang.lower.math_calls)."""
        if not (isinstance(node.func, ast.Name) and node.func.id in (MIN, MAX)) or len(node.args) != 2 or node.keywords:
            return None
        a, b = self.visit(node.args[0]), self.visit(node.args[1])
        if a is None or b is None:
            return None
        pick = min if node.func.id == MIN else max
        return (pick(a[0], b[0]), pick(a[1], b[1]))


class Program32(ast.NodeVisitor):
    """A subscript's indices as postfix programs of the 32-bit index intrinsics, one per
    dimension (`dimension`): tokens `a<k>` (the k-th leaf value in 32 bits), integer literals,
    `+ - * neg min max`, then `w` where the value may be negative (it wraps by the extent, as
    Python indexes); an index IndexRanges does not accept is one token `o<k>` (its leaf,
    wrapped in 64 bits as numba does). `leaves` are the values the programs read, in order."""

    def __init__(self, ranges: IndexRanges) -> None:
        self.ranges = ranges
        self.leaves: list[ast.expr] = []
        self.tokens: list[str] = []
        self.narrowed = 0  # indices computed in 32 bits

    def dimension(self, index: ast.expr) -> str:
        found = self.ranges.visit(index)
        if found is None:
            self.leaves.append(index)
            return f"o{len(self.leaves) - 1}"
        self.tokens = []
        self.visit(index)
        self.narrowed += 1
        return " ".join(self.tokens + (["w"] if found[0] < 0 else []))

    def leaf(self, node: ast.expr) -> None:
        self.tokens.append(f"a{len(self.leaves)}")
        self.leaves.append(node)

    visit_Name = visit_Subscript = leaf

    def visit_Constant(self, node: ast.Constant) -> None:
        self.tokens.append(str(node.value))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        self.visit(node.operand)
        if isinstance(node.op, ast.USub):
            self.tokens.append("neg")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self.visit(node.left)
        self.visit(node.right)
        self.tokens.append({ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(node.op)])

    def visit_Call(self, node: ast.Call) -> None:
        self.visit(node.args[0])
        self.visit(node.args[1])
        self.tokens.append("min" if node.func.id == MIN else "max")
