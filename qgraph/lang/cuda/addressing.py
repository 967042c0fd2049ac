"""32-bit element offsets for 2-D and 3-D arrays on CUDA, as `int` index math gives in C++.

numba addresses `u[i, j]` as `data + (i * shape[1] + j) * 4` in 64-bit arithmetic: a 64-bit
multiply per row (three instructions in SASS) and every offset held in a register pair,
which doubled a stencil's instructions and registers against the same kernel in CUDA C++.
For C-contiguous arrays below 2**31 - 2**16 elements (the argument kind says so: larger ones
are a key text of their own) subscripts become `_qg_ld2/3` and `_qg_st2/3`, which compute the
offset with one 32-bit multiply-add (compiler.numba_addressing), and indices whose range
lang.cuda.index_ranges bounds are computed in 32 bits themselves (`_qg_ldx`, `_qg_stx`).
"""

from __future__ import annotations

import ast

from ..lower.lowering import call, name_node
from ..lower.math_calls import MAX, MIN
from .index_ranges import IndexRanges, Program32
from .index_ranges import literal as _literal


def _pure(expr: ast.expr) -> bool:
    """Names, constants, arithmetic, min and max on them: safe to evaluate twice (for `a[i, j] += v`)."""
    return all(isinstance(n, (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop,
                              ast.expr_context)) or _min_max(n) for n in ast.walk(expr))


def _min_max(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (MIN, MAX) \
        and not node.keywords


class Addressing32(ast.NodeTransformer):
    """Subscripts of the arrays in `arrays` (name -> ndim) with a full index as offset calls.

    A subscript whose every index is a loop variable of `floors` plus or minus a literal that
    keeps it non-negative (`u[i - 1, j, k + 1]`, no wraparound possible), or a non-negative
    literal (a vector's component, `x[i, 2]`), becomes `_qg_ldd/_qg_std`: all such neighbours
    of one array share the offset of `i, j, k`, as `c - plane`, `c + 1` do in hand-written
    CUDA C++ (a 3-D stencil's addressing halves; a vec3 update's loads are not repeated after
    its stores, since LLVM sees the components' addresses differ).
    Otherwise, where `ranges` (lang.cuda.index_ranges) finds an index whose every step fits
    int32 (`p[min(i + 1, p.shape[0] - 1), j]`), it becomes `_qg_ldx/_qg_stx`: those indices
    computed in 32 bits (the rest as `_qg_ld` does). A 1-D array (C-contiguous, in `arrays`
    with ndim 1) takes that form only for an index with `min`/`max` or one that may wrap:
    numba's own indexing is as good for the others, and keeps `x[i - 1]`, `x[i + 1]` one base."""

    def __init__(self, arrays: dict[str, int], floors: dict[str, int] | None = None,
                 ranges: IndexRanges | None = None) -> None:
        self.arrays = arrays
        self.floors = floors or {}
        self.ranges = ranges or IndexRanges({})

    def _shifted(self, elts: list[ast.expr]) -> tuple[list[ast.expr], list[ast.expr]] | None:
        """(bases, literal deltas) when every index is a loop variable of `floors` plus a delta
        that keeps it non-negative; else None."""
        bases, deltas = [], []
        for e in elts:
            constant = _literal(e)
            if constant is not None and constant >= 0:  # a vector's component: x[i, 1] is x[i, 0] + 1
                bases.append(ast.copy_location(ast.Constant(0), e))
                deltas.append(ast.copy_location(ast.Constant(constant), e))
                continue
            delta = 0
            if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)) and _literal(e.right) is not None:
                delta = _literal(e.right) * (1 if isinstance(e.op, ast.Add) else -1)
                e = e.left
            if not isinstance(e, ast.Name) or e.id not in self.floors or self.floors[e.id] + delta < 0:
                return None
            bases.append(name_node(e.id, e))
            deltas.append(ast.copy_location(ast.Constant(delta), e))
        return bases, deltas

    def _narrowed(self, elts: list[ast.expr], at: ast.AST) -> list[ast.expr] | None:
        """[program text, leaves tuple] of `_qg_ldx/_qg_stx` when an index is computed in 32
        bits (a 1-D index only with min/max or a wrap); else None."""
        program = Program32(self.ranges)
        dims = [program.dimension(e) for e in elts]
        if not program.narrowed:
            return None
        if len(elts) == 1 and not ("w" in dims[0].split() or any(_min_max(n) for n in ast.walk(elts[0]))):
            return None
        leaves = ast.copy_location(ast.Tuple(program.leaves, ast.Load()), at)
        return [ast.copy_location(ast.Constant(";".join(dims)), at), leaves]

    def _access(self, kind: str, name: str, elts: list[ast.expr], at: ast.AST, value=None) -> ast.Call | None:
        """`_qg_ld/_qg_st` (or their shifted or narrowed forms) of `name[elts]`; None for a 1-D
        subscript numba indexes as well."""
        extra = [] if value is None else [value]
        n = len(elts)
        shifted = self._shifted(elts) if n > 1 else None
        if shifted is not None:
            return call(f"_qg_{kind}d{n}", [name_node(name, at)] + shifted[0] + shifted[1] + extra, at)
        narrowed = self._narrowed(elts, at)
        if narrowed is not None:
            return call(f"_qg_{kind}x", [name_node(name, at)] + narrowed + extra, at)
        return call(f"_qg_{kind}{n}", [name_node(name, at)] + elts + extra, at) if n > 1 else None

    def _indices(self, node: ast.expr) -> tuple[str, list[ast.expr]] | None:
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            return None
        ndim = self.arrays.get(node.value.id)
        index = node.slice
        elts = index.elts if isinstance(index, ast.Tuple) else [index]
        if ndim is None or len(elts) != ndim or (ndim > 1) != isinstance(index, ast.Tuple):
            return None
        if any(isinstance(e, (ast.Slice, ast.Starred)) for e in elts):
            return None
        return node.value.id, elts

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        found = self._indices(node)
        if found is None or not isinstance(node.ctx, ast.Load):
            return node
        name, elts = found
        return self._access("ld", name, elts, node) or node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if len(node.targets) != 1:
            return self.generic_visit(node)
        target = node.targets[0]
        found = self._indices(target)
        if found is None:
            return self.generic_visit(node)
        name, elts = found
        elts = [self.visit(e) for e in elts]
        value = self.visit(node.value)
        access = self._access("st", name, elts, node, value)
        if access is None:  # a 1-D subscript numba indexes
            target.slice, node.value = elts[0], value
            return node
        return ast.copy_location(ast.Expr(access), node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        found = self._indices(node.target)
        if found is None or not all(_pure(e) for e in found[1]):
            return self.generic_visit(node)
        name, elts = found
        elts = [self.visit(e) for e in elts]
        old = self._access("ld", name, elts, node)
        if old is None:  # a 1-D subscript numba indexes
            node.target.slice, node.value = elts[0], self.visit(node.value)
            return node
        new = ast.copy_location(ast.BinOp(old, node.op, self.visit(node.value)), node)
        return ast.copy_location(ast.Expr(self._access("st", name, elts, node, new)), node)
