"""Loop interchange of elementwise repeat loops: `for _ in qgraph.repeat(k)` around parallel
tasks that only ever touch their own element becomes one parallel task looping k times inside.

    for _ in qgraph.repeat(k):             for i in range(n):          (one task, one launch)
        for i in range(n): body_a(i)   ->      for _qg_pass in range(k):
        for i in range(n): body_b(i)               body_a(i); body_b(i)

Element e's operations run in the same order either way, so the results are the same bits (see
docs/control-flow.md for where an FMA may differ on CUDA), while the state stays in registers and
k launches (or WHILE passes) become one. `interchanged` rewrites a kernel-level KernelSource
(a launcher's, with `interchange=True`; `Kernel.source` keeps the loop, so the tape's analysis and
the adjoint builder see the kernel as written); the fused task (`InterchangedTask`) keeps its
parts, which lang.flat.view flattens (and, in an adjoint kernel, reverses) one by one before
`fused_task` joins them. The rule is conservative and type-independent (see `Elementwise`);
arrays that partially overlap break it at run time, which `overlap_error` reports.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass

import numpy as np

from .. import roles
from ..roles import role_of
from . import ast_clone
from .names import collect_names
from .regions import Region, RepeatLoop, Sequence, Task, leaf_tasks, with_bodies

PASS = "_qg_pass"  # the fused task's inner loop variable
_FORBIDDEN = {"atomic_add", "atomic_sub", "atomic_min", "atomic_max", "random", "randn", "randint", "report"}


@dataclass(eq=False)
class InterchangedTask(Task):
    """A parallel task running `count` passes of its `parts` (the repeat loop's tasks) per element;
    `arrays` the array parameters it subscripts, `written` those it stores into."""

    count: str = ""
    parts: tuple[Task, ...] = ()
    arrays: tuple[str, ...] = ()
    written: frozenset[str] = frozenset()
    part_primals: tuple[int | None, ...] = ()  # in an adjoint kernel: the primal task each part reverses

    def __repr__(self) -> str:
        return f"<InterchangedTask {self.index} {self.count} passes of {len(self.parts)} tasks at line {self.lineno}>"


def interchanged(src):
    """`src` (a kernel's KernelSource) with each repeat loop that qualifies replaced by an
    InterchangedTask, its tasks renumbered in launch order; `src` itself when none qualifies."""
    params = {p.name: p for p in src.params}
    body = _rewrite(src.body, src, params) if src.body is not None else None
    if body is src.body:
        return src
    old = list(leaf_tasks(body))
    tasks = [dataclasses.replace(task, index=k) for k, task in enumerate(old)]
    renumbered = _renumbered(body, {id(t): n for t, n in zip(old, tasks)})
    adjoint = src.adjoint
    if adjoint is not None:  # primal_of follows the new numbers; each part keeps its own
        primal = adjoint.primal_of
        tasks = [
            dataclasses.replace(t, part_primals=tuple(primal[p.index] for p in t.parts))
            if isinstance(t, InterchangedTask)
            else t
            for t in tasks
        ]
        renumbered = _renumbered(renumbered, {id(a): b for a, b in zip(leaf_tasks(renumbered), tasks)})
        adjoint = dataclasses.replace(adjoint, primal_of=tuple(primal[t.index] for t in old))
    return dataclasses.replace(src, body=renumbered, tasks=tuple(tasks), adjoint=adjoint)


def for_launch(src, options):
    """The source a launcher runs: `src` interchanged unless `options.interchange` is off."""
    return interchanged(src) if options.interchange else src


def _renumbered(region: Region, new: dict) -> Region:
    if isinstance(region, Task):
        return new[id(region)]
    if isinstance(region, Sequence):
        return Sequence(tuple(_renumbered(c, new) for c in region.children))
    return with_bodies(region, lambda b: _renumbered(b, new))


def _rewrite(region: Region, src, params: dict) -> Region:
    """`region` with its qualifying repeat loops interchanged (the same object when none is)."""
    if isinstance(region, Task):
        return region
    if isinstance(region, RepeatLoop) and qualifies(region, src, params):
        return _interchanged_task(region, params, src)
    if isinstance(region, Sequence):
        children = tuple(_rewrite(c, src, params) for c in region.children)
        return region if all(a is b for a, b in zip(children, region.children)) else Sequence(children)
    rebuilt = with_bodies(region, lambda b: _rewrite(b, src, params))
    same = all(getattr(rebuilt, f) is getattr(region, f) for f in ("body", "then", "orelse") if hasattr(region, f))
    return region if same else rebuilt


def qualifies(loop: RepeatLoop, src, params: dict) -> bool:
    """The rule (docs/control-flow.md, "Interchanged repeat loops"): the body is one or more
    parallel tasks of the same iteration space, whose extents it does not write, each touching
    array elements only through exactly its loop variables (then non-negative literals)."""
    tasks = loop.body.children
    if "." in loop.count or not tasks or not all(isinstance(t, Task) and t.parallel for t in tasks):
        return False
    if isinstance(tasks[0], InterchangedTask):
        return False
    first = tasks[0]
    space = [tuple(ast.dump(e) if e is not None else None for e in (d.start, d.stop, d.step)) for d in first.dims]
    stored = set()
    for task in tasks:
        if [
            tuple(ast.dump(e) if e is not None else None for e in (d.start, d.stop, d.step)) for d in task.dims
        ] != space or len(task.loop_vars) != len(first.loop_vars):
            return False
        check = Elementwise(task.loop_vars, params, src)
        for stmt in task.body:
            check.visit(stmt)
        if not check.ok:
            return False
        stored |= collect_names(task.body).stored
        if len(tasks) > 1 and any(ends_iteration(stmt) for stmt in task.body):
            return False  # inside the fused pass loop it would skip the next tasks' bodies too
    bound_names = set().union(*(t.bound_names for t in tasks))
    return not (bound_names & stored or stored & set(params)) and loop.count not in stored


def ends_iteration(stmt: ast.stmt) -> bool:
    """A `continue` of the task's own loop in `stmt` (not one of a loop nested in it)."""
    if isinstance(stmt, ast.Continue):
        return True
    if isinstance(stmt, (ast.For, ast.While)):  # a continue in its body is its own
        return any(ends_iteration(s) for s in stmt.orelse)
    return any(ends_iteration(s) for s in ast.iter_child_nodes(stmt) if isinstance(s, ast.stmt))


class Elementwise(ast.NodeVisitor):
    """Whether a task body touches array element e only from its iteration e: every subscript is
    `param[loop vars..., literals...]` (or `param[loop vars][literal]`, `param.shape[literal]`);
    calls only to math, qgraph's vector and scalar functions (no atomics, draws or reports),
    casts and a few builtins, and a @qgraph.func, min or max only when no argument may be an
    array (it could read any element); inner loops over ranges. `arrays`: the array parameters
    it subscripts -> whether it writes them."""

    def __init__(self, loop_vars: tuple[str, ...], params: dict, src) -> None:
        self.loop_vars = loop_vars
        self.params = params
        self.src = src
        self.ok = True
        self.arrays: dict[str, bool] = {}
        self.aliases: set[str] = set()  # locals that may hold an array (`a = x`)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        base, index = node.value, node.slice
        if (
            isinstance(base, ast.Attribute)
            and base.attr == "shape"
            and isinstance(base.value, ast.Name)
            and _literal(index)
        ):
            return
        if isinstance(base, ast.Subscript) and _literal(index):  # x[i][0]: a component of element i
            base, index = base.value, base.slice
        if not (isinstance(base, ast.Name) and base.id in self.params and self._exact(index)):
            self.ok = False
            return
        self.arrays[base.id] = self.arrays.get(base.id, False) or isinstance(node.ctx, ast.Store)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        target = node.target
        while isinstance(target, ast.Subscript):
            target = target.value
        if isinstance(target, ast.Name) and isinstance(node.target, ast.Subscript):
            self.arrays[target.id] = True
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        if not (isinstance(node.iter, ast.Call) and self.src.resolve(node.iter.func) is range):
            self.ok = False  # `for a in x`: every element of x
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        fn = self.src.resolve(node.func)
        module = getattr(fn, "__module__", None) or ""
        if role_of(fn) == roles.FUNC or any(fn is f for f in (min, max, pow)):
            args = [*node.args, *(k.value for k in node.keywords)]
            self.ok = self.ok and not any(self._may_be_array(a) for a in args)
        elif module.startswith("qgraph"):
            self.ok = self.ok and getattr(fn, "__name__", "") not in _FORBIDDEN
        elif not (module == "math" or any(fn is f for f in _BUILTINS) or _is_cast(fn)):
            self.ok = False  # NumPy, methods, anything unknown
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self._may_be_array(node.value):
            self.aliases.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
        self.generic_visit(node)

    def visit_Starred(self, node: ast.Starred) -> None:
        self.ok = False

    def _may_be_array(self, arg: ast.expr) -> bool:
        """Whether `arg` holds, outside a subscript, a field of a parameter or a bare parameter not
        annotated as a number or vector: it may be an array."""
        if isinstance(arg, ast.Subscript):
            return False
        if isinstance(arg, ast.Attribute):
            root = arg
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self.params:
                return True
        if isinstance(arg, ast.Name) and arg.id in self.aliases:
            return True
        if isinstance(arg, ast.Name) and arg.id in self.params:
            annotation = self.params[arg.id].annotation
            return annotation is None or isinstance(annotation, ast.Subscript)
        return any(self._may_be_array(c) for c in ast.iter_child_nodes(arg) if isinstance(c, ast.expr))

    def _exact(self, index: ast.expr) -> bool:
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        n = len(self.loop_vars)
        return (
            len(parts) >= n
            and all(isinstance(p, ast.Name) and p.id == v for p, v in zip(parts, self.loop_vars))
            and all(_literal(p) for p in parts[n:])
        )


_BUILTINS = (abs, float, int, bool, round, range, len)


def _is_cast(fn: object) -> bool:
    """A NumPy scalar type (qgraph.f32(x)): a conversion."""
    return isinstance(fn, type) and issubclass(fn, np.generic)


def _literal(node: ast.expr) -> bool:
    """A non-negative int literal."""
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0


def _interchanged_task(loop: RepeatLoop, params: dict, src) -> InterchangedTask:
    parts = tuple(loop.body.children)
    arrays: dict[str, bool] = {}
    for task in parts:
        check = Elementwise(task.loop_vars, params, src)
        for stmt in task.body:
            check.visit(stmt)
        for name, written in check.arrays.items():
            arrays[name] = arrays.get(name, False) or written
    fused = fused_task(parts[0], parts, loop.count)
    return InterchangedTask(
        parts[0].index,
        True,
        loop.lineno,
        fused.body,
        fused.loop_vars,
        fused.dims,
        bound_names=frozenset().union(*(t.bound_names for t in parts)),
        count=loop.count,
        parts=parts,
        arrays=tuple(arrays),
        written=frozenset(n for n, w in arrays.items() if w),
    )


def fused_task(template: Task, parts, count: str) -> Task:
    """One parallel task (`template`'s index, iteration space and loop variables) running
    `for _qg_pass in range(count):` around the bodies of `parts` in order, each part's locals
    renamed apart and its loop variables renamed to the template's."""
    body: list[ast.stmt] = []
    for k, part in enumerate(parts):
        names = dict.fromkeys(collect_names(part.body).stored - set(part.loop_vars))
        mapping = {name: f"_qg_p{k}_{name}" for name in names}
        mapping.update(zip(part.loop_vars, template.loop_vars))
        body += [Renamer(mapping).visit(_copy(stmt)) for stmt in part.body]
    at = template.body[0] if template.body else ast.Pass(lineno=template.lineno, col_offset=0)
    loop = ast.For(
        target=ast.Name(PASS, ast.Store()),
        iter=ast.Call(ast.Name("range", ast.Load()), [ast.Name(count, ast.Load())], []),
        body=body or [ast.Pass()],
        orelse=[],
    )
    if hasattr(ast.For, "type_comment"):
        loop.type_comment = None
    ast.copy_location(loop, at)
    ast.fix_missing_locations(loop)
    return dataclasses.replace(template, body=[loop])


def _copy(stmt: ast.stmt) -> ast.stmt:
    return ast_clone.clone(stmt)


class Renamer(ast.NodeTransformer):
    """Names renamed by a mapping (a part's locals and loop variables in a fused body)."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.Name:
        new = self.mapping.get(node.id)
        if new is not None:
            node.id = new
        return node


# ---------------------------------------------------------------------------- run time


def array_span(ptr: int, shape, strides, itemsize: int) -> tuple[int, int]:
    """The bytes [lo, hi) an array view touches."""
    if any(n == 0 for n in shape):
        return ptr, ptr
    lo = ptr + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = ptr + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + itemsize
    return lo, hi


def overlap_error(kernel: str, pairs, views: dict, tiled=()):
    """A QgraphError when two arrays of an interchanged loop share memory other than element for
    element (a view shifted against another argument), else None. `pairs`: (name, name) to
    compare, at least one of each written; `views`: name -> (ptr, shape, strides, itemsize).
    `tiled`: the pairs of temporally tiled loops (lang.front.temporal_tiling), the same view too."""
    from ...errors import QgraphError

    for a, b in pairs:
        va, vb = views[a], views[b]
        if va == vb and (a, b) not in tiled:
            continue
        (lo_a, hi_a), (lo_b, hi_b) = array_span(*va), array_span(*vb)
        if lo_a < hi_b and lo_b < hi_a and (a, b) in tiled:
            return QgraphError(
                f"kernel {kernel}: the arrays '{a}' and '{b}' share memory, but its temporally tiled qgraph.repeat "
                "loop stages each array of the loop in shared memory apart from the others; pass separate arrays, "
                "or decorate the kernel with temporal_tiling=False (or set QGRAPH_TEMPORAL_TILING=0)"
            )
        if lo_a < hi_b and lo_b < hi_a:
            return QgraphError(
                f"kernel {kernel}: the arrays '{a}' and '{b}' overlap but are not the same view, so an element "
                "one pass of its interchanged qgraph.repeat loop writes may be another element of the next pass; "
                f"pass separate arrays, or decorate the kernel with interchange=False (or set QGRAPH_INTERCHANGE=0)"
            )
    return None


def checked_pairs(src) -> tuple[tuple[str, str], ...]:
    """The array pairs of `src`'s interchanged loops whose overlap the launch checks."""
    pairs = []
    for task in src.tasks:
        if isinstance(task, InterchangedTask):
            pairs += written_pairs([n for n in src.param_names if n in task.arrays], task.written)  # parameter order
    return tuple(dict.fromkeys(pairs))


def written_pairs(names: list[str], written) -> list[tuple[str, str]]:
    """The pairs of `names` (in order) of which at least one is `written`: those whose overlap matters."""
    return [(a, b) for k, a in enumerate(names) for b in names[k + 1 :] if a in written or b in written]
