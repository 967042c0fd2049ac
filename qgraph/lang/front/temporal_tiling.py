"""Temporal (overlapped) tiling of stencil repeat loops on CUDA: S passes of a loop per launch.

    for _ in qgraph.repeat(k):              a CUDA graph of k // S groups of
        for i, j in ndrange(n, m): A(i, j)      [X: S - 1 passes of A, B and A once more,
        for i, j in ndrange(n, m): B(i, j)          each block on a tile and its halo in shared memory;
                                                 B: the last task as written]
                                             then k % S passes of A, B as written

A pass of a stencil loop depends on its neighbours' previous pass, so the loop needs a launch (a
graph node, ~0.8-0.95 us on an H100) per task and pass. A tiled task `X` stages a tile plus a halo
of each carried array in shared memory and runs the passes there, every cell's operations the same
as the task's (the same bits); the halo shrinks by a task's read radius after each task. X stops
before the last task of its last pass, so it never writes an array it stages: the arrays it stages
(live on entry) and those it writes back are disjoint, and blocks cannot see each other's results.
The last task then runs as its own node (it rewrites all it writes, so nothing of X's is lost).

`tiled` rewrites a launcher's KernelSource (CUDA only; the CPU keeps the loop): each qualifying
repeat loop becomes a `TiledRepeat` naming its `TiledTask`, appended to the tasks but to no region;
the graph builder (graphs.unroll.unrolled) substitutes X and the last task for S consecutive copies
of the body where the specialisation compiled X (lang.cuda.tiling; a type it cannot stage keeps the
copies). Eager runs and the host walk run the loop as written. The rule (`_Stencil`) is conservative
and type-independent; docs/control-flow.md, "Temporally tiled repeat loops", states it.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

from . import ast_clone
from .interchange import Elementwise, Renamer, ends_iteration, written_pairs
from .names import collect_names
from .regions import Region, RepeatLoop, Sequence, Task, with_bodies


@dataclass(frozen=True, eq=False)
class TiledRepeat(RepeatLoop):
    """A repeat loop whose S consecutive passes a graph may run as its TiledTask `tiled` (an index
    of the source's tasks) and its last task."""

    tiled: int = -1


@dataclass(eq=False)
class TiledTask(Task):
    """The tiled kernel of a TiledRepeat: its `parts` (the loop's tasks, loop variables renamed to
    the first's and locals apart; `body` is theirs joined, for the names it reads); `radii` each
    part's largest distance of a read (of a carried array, or one of `read_only`) from its element;
    `staged` the carried arrays live on entry (staged whole), `rewritten` those first written (staged
    outside the iteration space only), `written_back` those the parts before the last write;
    `arrays`/`written` for the overlap check."""

    parts: tuple[Task, ...] = ()
    radii: tuple[int, ...] = ()
    read_only: tuple[str, ...] = ()  # arrays the loop only reads, each read near its element: stageable
    staged: tuple[str, ...] = ()
    rewritten: tuple[str, ...] = ()
    written_back: tuple[str, ...] = ()
    arrays: tuple[str, ...] = ()
    written: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<TiledTask {self.index} of {len(self.parts)} tasks at line {self.lineno}>"


def tiled(src, options):
    """`src` (a launcher's source, after interchange) with each qualifying repeat loop a TiledRepeat
    and its TiledTask appended to the tasks; `src` itself when the option is off or none qualifies."""
    if not options.temporal_tiling or src.body is None or src.adjoint is not None:
        return src
    params = {p.name: p for p in src.params}
    added: list[TiledTask] = []
    body = _rewrite(src.body, src, params, added)
    if not added:
        return src
    return dataclasses.replace(src, body=body, tasks=tuple(src.tasks) + tuple(added))


def _rewrite(region: Region, src, params: dict, added: list) -> Region:
    if isinstance(region, Task):
        return region
    if isinstance(region, RepeatLoop) and not isinstance(region, TiledRepeat):
        task = tiled_task(region, src, params, len(src.tasks) + len(added))
        if task is not None:
            added.append(task)
            return TiledRepeat(region.count, region.body, region.lineno, region.unroll, tiled=task.index)
    if isinstance(region, Sequence):
        children = tuple(_rewrite(c, src, params, added) for c in region.children)
        return region if all(a is b for a, b in zip(children, region.children)) else Sequence(children)
    return with_bodies(region, lambda b: _rewrite(b, src, params, added))


def tiled_task(loop: RepeatLoop, src, params: dict, index: int) -> TiledTask | None:
    """The TiledTask of `loop` when it qualifies (the module docstring), else None."""
    tasks = loop.body.children
    if "." in loop.count or len(tasks) < 2 or not all(type(t) is Task and t.parallel for t in tasks):
        return None
    first = tasks[0]
    space = _space(first)
    if not 1 <= len(first.loop_vars) <= 2 or any(d.step is not None and not _is_one(d.step) for d in first.dims):
        return None
    if any(_space(t) != space or len(t.loop_vars) != len(first.loop_vars) for t in tasks):
        return None
    stored = set()
    for task in tasks:
        if any(ends_iteration(s) or _returns(s) for s in task.body):
            return None
        stored |= collect_names(task.body).stored
    written = [_Stencil(t, params, src, frozenset()).written() for t in tasks]
    if any(w is None for w in written):
        return None
    carried = frozenset().union(*written)
    checks = [_Stencil(t, params, src, carried) for t in tasks]
    for check in checks:
        check.written()
        for stmt in check.task.body:
            check.visit(stmt)
        if not check.ok:
            return None
    bound_names = set().union(*(t.bound_names for t in tasks))
    if bound_names & stored or stored & set(params) or loop.count in stored:
        return None
    staged, rewritten = _entry_states(tasks, checks, carried)
    written_back = frozenset().union(*written[:-1])
    if written_back & set(staged):
        return None  # X would write what other blocks stage
    tail_only = written[-1] - written_back
    if not all(_stored_at_top(tasks[-1], name) for name in tail_only):
        return None  # the last task must rewrite what X does not write back
    if checks[-1].loads & (carried - written_back):
        return None  # the last task would read what X changed in shared memory only
    far = set().union(*(c.far for c in checks))
    near = [n for n in src.param_names if n not in carried and n not in far and any(n in c.near for c in checks)]
    parts = _renamed_parts(tasks)
    order = [n for n in src.param_names if any(n in c.arrays for c in checks)]
    return TiledTask(
        index,
        True,
        loop.lineno,
        [s for p in parts for s in p.body],
        first.loop_vars,
        first.dims,
        bound_names=frozenset(bound_names),
        parts=parts,
        radii=tuple(max(c.radius, c.near_radius) for c in checks),
        read_only=tuple(near),
        staged=tuple(n for n in order if n in staged),
        rewritten=tuple(n for n in order if n in rewritten),
        written_back=tuple(n for n in order if n in written_back),
        arrays=tuple(order),
        written=carried,
    )


def _space(task: Task) -> list:
    return [tuple(ast.dump(e) if e is not None else None for e in (d.start, d.stop, d.step)) for d in task.dims]


def _is_one(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 1


def _returns(stmt: ast.stmt) -> bool:
    return any(isinstance(n, (ast.Return, ast.Break)) for n in ast.walk(stmt))


def _entry_states(tasks, checks, carried) -> tuple[set, set]:
    """(carried arrays live on entry to a pass, those whose first access, in task order, is a
    store at the top level of a task body that does not read it: their values inside the
    iteration space are dead on entry)."""
    staged, rewritten = set(), set()
    for name in carried:
        for task, check in zip(tasks, checks):
            if name not in check.arrays:
                continue
            if name in check.loads or not _stored_at_top(task, name):
                staged.add(name)
            else:
                rewritten.add(name)
            break
    return staged, rewritten


def _stored_at_top(task: Task, name: str) -> bool:
    """A statement `name[...] = value` directly in `task`'s body: every iteration stores its element."""
    for stmt in task.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
            target = stmt.targets[0]
            if isinstance(target.value, ast.Name) and target.value.id == name:
                return True
    return False


def _renamed_parts(tasks) -> tuple[Task, ...]:
    """Each task with its loop variables renamed to the first's and its locals to `_qg_t{k}_name`."""
    first = tasks[0]
    out = []
    for k, task in enumerate(tasks):
        names = collect_names(task.body).stored - set(task.loop_vars)
        mapping = {name: f"_qg_t{k}_{name}" for name in names}
        mapping.update(zip(task.loop_vars, first.loop_vars))
        body = [Renamer(mapping).visit(ast_clone.clone(s)) for s in task.body]
        out.append(dataclasses.replace(task, body=body, loop_vars=first.loop_vars))
    return tuple(out)


class _Stencil(Elementwise):
    """Interchange's elementwise rule, widened for stencils: a carried array (one the loop stores
    into) is stored only at exactly the loop variables and read at each index within a constant
    distance of its loop variable (`_offset`); a task reads a carried array it stores into only at
    its own element. Other arrays are read at any index. `radius`: the largest distance read."""

    def __init__(self, task: Task, params: dict, src, carried: frozenset) -> None:
        super().__init__(task.loop_vars, params, src)
        self.task = task
        self.carried = carried
        self.radius = 0
        self.loads: set[str] = set()
        self.stores: set[str] = set()
        self.near: set[str] = set()  # arrays the loop only reads, read within a distance here ...
        self.far: set[str] = set()  # ... or not
        self.near_radius = 0

    def written(self) -> frozenset | None:
        """The arrays the task stores into, each at exactly its loop variables; None otherwise."""
        for node in (n for s in self.task.body for n in ast.walk(s)):
            target = node.target if isinstance(node, ast.AugAssign) else None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                target = node
            if target is None:
                continue
            if not (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id in self.params
                and self._exact(target.slice)
            ):
                return None
            if len(_parts(target.slice)) != len(self.loop_vars):
                return None
            self.stores.add(target.value.id)
        return frozenset(self.stores)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        base, index = node.value, node.slice
        if isinstance(base, ast.Attribute) and base.attr == "shape" and isinstance(base.value, ast.Name):
            self.generic_visit(node)
            return
        if not (isinstance(base, ast.Name) and base.id in self.params):
            self.ok = False
            return
        self.arrays[base.id] = self.arrays.get(base.id, False) or isinstance(node.ctx, ast.Store)
        if isinstance(node.ctx, ast.Load) and base.id in self.carried:
            self.loads.add(base.id)
            distance = self._distance(index)
            if distance is None or (distance and base.id in self.stores):
                self.ok = False
                return
            self.radius = max(self.radius, distance)
        elif isinstance(node.ctx, ast.Load):  # any index of an array the loop only reads
            distance = self._distance(index)
            (self.far if distance is None else self.near).add(base.id)
            self.near_radius = max(self.near_radius, distance or 0)
            self.visit(index)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        target = node.target
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.loads.add(target.value.id)  # it reads its own element
        super().visit_AugAssign(node)

    def _distance(self, index: ast.expr) -> int | None:
        parts = _parts(index)
        if len(parts) != len(self.loop_vars):
            return None
        distances = [_offset(p, v, d) for p, v, d in zip(parts, self.loop_vars, self.task.dims)]
        return None if any(d is None for d in distances) else max(distances)


def _parts(index: ast.expr) -> list:
    return list(index.elts) if isinstance(index, ast.Tuple) else [index]


def _offset(expr: ast.expr, var: str, dim) -> int | None:
    """The largest distance of `expr`'s value from `var`, proved statically, else None: `var`,
    `var + c`, `c + var`, `var - c` (c a non-negative int literal); `min(var + c, stop - 1)`
    and `max(var - c, start)` (the dimension's own bounds: the clamp lies between var and var +- c)."""
    if isinstance(expr, ast.Name) and expr.id == var:
        return 0
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
        left, right = expr.left, expr.right
        if isinstance(expr.op, ast.Add) and _int(left) is not None and isinstance(right, ast.Name):
            left, right = right, left
        if isinstance(left, ast.Name) and left.id == var and _int(right) is not None:
            return _int(right)
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and len(expr.args) == 2 and not expr.keywords:
        if expr.func.id == "min":
            return _clamped(expr.args, var, ast.Add, _upper(dim))
        if expr.func.id == "max":
            return _clamped(expr.args, var, ast.Sub, _lower(dim))
    return None


def _clamped(args, var: str, op: type, bound: str | None) -> int | None:
    for near, other in (args, args[::-1]):
        if bound is None or ast.dump(other) != bound:
            continue
        if isinstance(near, ast.Name) and near.id == var:
            return 0
        if (
            isinstance(near, ast.BinOp)
            and isinstance(near.op, op)
            and isinstance(near.left, ast.Name)
            and near.left.id == var
            and _int(near.right) is not None
        ):
            return _int(near.right)
    return None


def _upper(dim) -> str:
    """`stop - 1` of a dimension, as ast.dump text (the largest loop variable)."""
    return ast.dump(ast.BinOp(dim.stop, ast.Sub(), ast.Constant(1)))


def _lower(dim) -> str:
    """The dimension's start as ast.dump text (0 when it has none)."""
    return ast.dump(dim.start if dim.start is not None else ast.Constant(0))


def _int(node) -> int | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0 else None


def tiled_pairs(src) -> tuple[tuple[str, str], ...]:
    """The array pairs of `src`'s tiled loops whose overlap the launch checks (lang.front.interchange)."""
    return tuple(pair for task in src.tasks if isinstance(task, TiledTask)
                 for pair in written_pairs(list(task.arrays), task.written))  # arrays: in parameter order
