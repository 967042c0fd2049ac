"""A kernel as code generation sees it for one signature: scalars, arrays and nothing else.

`flat_source` runs lang.flat.flatten over every task: struct parameters become one parameter
per leaf field (in the order `slots` records, so the launcher can find each leaf's value),
vector code becomes component code, and each @qgraph.func the tasks call is specialised
for its argument types (`FuncSpecs`). The result is a KernelSource of the same shape as
the one the front end built, so both backends compile it unchanged.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import ChainMap
from dataclasses import dataclass

from ...errors import QgraphSyntaxError
from ..front import ast_clone
from ..front.globals_used import func_array_globals
from ..front.interchange import InterchangedTask, fused_task
from ..front.parse import KernelSource, Param, analyse_names, collect_names
from ..front.regions import Dim, Region, RepeatLoop, Sequence, Task, with_bodies
from ..front.temporal_tiling import TiledTask
from ..lower.lowering import function_def
from ..types.vector_types import VectorType, is_vector_kind
from .draws import random_prologue
from .flatten import GLOBALS, Flattener
from .tuples import TupleType, helper_result
from .values import Val, by_value_type, is_struct, leaves


class _Counter:
    """Temporaries are numbered across a whole kernel, so no two tasks share one."""

    def __init__(self) -> None:
        self.next = 0


class FuncSpecs:
    """@qgraph.func specialisations: one function per (func, argument types)."""

    def __init__(self) -> None:
        self.entries: dict[tuple, tuple[str, object]] = {}  # key -> (name, return type)
        self.defs: list[tuple[ast.FunctionDef, object, KernelSource]] = []  # (def, Func, source with GLOBALS)
        self._active: set[tuple] = set()
        # key -> (the entries, the defs) its build added, itself last: kept when a flattener's learning pass
        # is undone (restore), so its second pass takes them back instead of building again. Without it each
        # level of nested helpers built the next twice: 2^depth builds.
        self._made_for: dict[tuple, tuple[list, list]] = {}
        self.built = 0  # specialisations built, undone passes included: their names, unique

    def snapshot(self) -> tuple[int, int]:
        return len(self.entries), len(self.defs)

    def restore(self, mark: tuple[int, int]) -> None:
        for key in list(self.entries)[mark[0]:]:
            del self.entries[key]
        del self.defs[mark[1]:]

    def call(self, fl: Flattener, fn, args: list[Val], node: ast.AST) -> Val:
        types = tuple(_arg_type(a) for a in args)
        key = (id(fn), types)
        entry = self.entries.get(key)
        if entry is None and key in self._made_for:
            entry = self._take_back(key)
        if entry is None:
            if key in self._active:
                raise fl.error(f"{fn.__name__} calls itself: recursive @qgraph.func helpers are not supported", node)
            self._active.add(key)
            mark = self.snapshot()
            try:
                entry = self._build(fn, types)
            finally:
                self._active.discard(key)
            self.entries[key] = entry
            self._made_for[key] = (list(self.entries.items())[mark[0]:], self.defs[mark[1]:])
        name, ret = entry
        flat_args = []
        for a in args:
            if is_struct(a.type):
                flat_args += [ast.copy_location(ast.Name(n, ast.Load()), node) for n, _ in leaves(a.expr.id, a.type)]
            else:
                flat_args += a.comps
        call = ast.copy_location(ast.Call(ast.copy_location(ast.Name(name, ast.Load()), node), flat_args, []), node)
        if not isinstance(ret, (VectorType, TupleType)):  # a tuple result: every item's components in a row
            return Val(None, [call])
        names = [f"_qg_v{fl.counter.next + k}" for k in range(ret.size)]
        fl.counter.next += ret.size
        target = ast.Tuple([ast.copy_location(ast.Name(n, ast.Store()), node) for n in names], ast.Store())
        fl.pre.append(ast.copy_location(ast.Assign([ast.copy_location(target, node)], call), node))
        return Val(ret, [ast.copy_location(ast.Name(n, ast.Load()), node) for n in names])

    def specialise(self, fn, types: tuple) -> tuple[str, object]:
        """(name, result type) of `fn`'s specialisation for argument `types`, built once (lang.adjoint.custom:
        a helper's custom adjoint, for the types of the helper's call and its result)."""
        key = (id(fn), types)
        if key not in self.entries:
            self.entries[key] = self._build(fn, types)
        return self.entries[key]

    def _take_back(self, key: tuple) -> tuple[str, object]:
        """A specialisation built before an undone pass: its entries and defs (the helpers it calls
        first) added again where missing, under the names it was built with."""
        entries, defs = self._made_for[key]
        present = {id(d[0]) for d in self.defs}
        self.defs += [d for d in defs if id(d[0]) not in present]
        for k, entry in entries:
            self.entries.setdefault(k, entry)
        return self.entries[key]

    def _build(self, fn, types: tuple) -> tuple[str, object]:
        src = fn.source
        arrays = func_array_globals(src)
        if arrays:
            raise src.error(f"{fn.__name__} reads the module-level array '{arrays[0]}': a @qgraph.func reads arrays "
                            "through its parameters; pass it in from the kernel", src.fn_def)
        spec_src = dataclasses.replace(src, globals=ChainMap(GLOBALS, src.globals))
        env, params = {}, []
        for p, t in zip(src.params, types):
            if t is not None:
                env[p.name] = t
            params += [n for n, _ in leaves(p.name, t)] if isinstance(t, VectorType) or is_struct(t) else [p.name]
        fdef = ast_clone.clone(src.fn_def)
        fl = Flattener(spec_src, env, self, taken=_all_names(fdef), counter=_Counter())
        body = fl.run(fdef.body)
        ret, agree = helper_result(fl.returns)
        if not agree:
            raise src.error(f"{fn.__name__} returns values of different shapes; a @qgraph.func returns one type",
                            src.fn_def)
        name = f"_qg_f{self.built}_{fn.__name__}"
        self.built += 1
        self.defs.append((function_def(name, params, body, src.lineno), fn, spec_src))
        return name, ret


def _arg_type(a: Val) -> object:
    if isinstance(a.type, VectorType) or is_struct(a.type) or getattr(a.type, "element", None):
        return a.type
    return None


def _all_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
        {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}


@dataclass
class FlatSource:
    """One signature's flattened kernel: `src` (leaf parameters), their kinds, and where
    each leaf's value is: `slots[f] = (argument index, leaf position or None)`."""

    src: KernelSource
    kinds: list
    slots: list[tuple[int, int | None]]
    funcs: FuncSpecs
    adjoint_reads: dict = dataclasses.field(default_factory=dict)  # adjoint task index -> arrays it reads

    @property
    def key(self) -> tuple[str, ...]:
        return tuple(k.sig for k in self.kinds)

    def slot_expr(self, flat: int) -> str:
        """The Python expression of a leaf's value from `p`, the call's values per argument."""
        k, j = self.slots[flat]
        return f"p[{k}]" if j is None else f"p[{k}][{j}]"

    @property
    def has_structs(self) -> bool:
        return any(j is not None for _, j in self.slots)


def flat_name(path: str) -> str:
    """`s.flag` -> `s__flag` (a struct field's parameter name)."""
    return path.replace(".", "__")


def flat_source(src: KernelSource, kinds: list, default_float: str = "f64") -> FlatSource:
    """`src` flattened for arguments of `kinds` (see the module docstring): a struct or a
    vector argument is one parameter per leaf (a vector's leaves are its components)."""
    params: list[Param] = []
    flat_kinds: list = []
    slots: list[tuple[int, int | None]] = []
    env: dict = {}
    for k, (p, kind) in enumerate(zip(src.params, kinds)):
        env[p.name] = by_value_type(kind)  # a vector argument is a vector in the kernel
        if is_struct(kind) or is_vector_kind(kind):
            for j, (name, leaf) in enumerate(leaves(p.name, kind)):
                params.append(Param(name, None, p.keyword_only))
                flat_kinds.append(leaf)
                slots.append((k, j))
        else:
            params.append(p)
            flat_kinds.append(kind)
            slots.append((k, None))
    specs = FuncSpecs()
    counter = _Counter()
    taken = _all_names(src.fn_def)
    base = dataclasses.replace(src, globals=ChainMap(GLOBALS, src.globals))
    tasks: dict[int, Task] = {}
    parts: dict[int, list[Task]] = {}  # an interchanged repeat loop's tasks, flattened one by one
    for task in src.tasks:
        if isinstance(task, (InterchangedTask, TiledTask)):
            parts[task.index] = [_flat_task(Flattener(base, env, specs, taken, counter, p, default_float), p)
                                 for p in task.parts]
            if isinstance(task, TiledTask):  # its parts stay apart (lang.cuda.tiling); the body joins them
                first = parts[task.index][0]
                tasks[task.index] = dataclasses.replace(task, parts=tuple(parts[task.index]), dims=first.dims,
                                                        body=[s for p in parts[task.index] for s in p.body])
            continue
        tasks[task.index] = _flat_task(Flattener(base, env, specs, taken, counter, task, default_float), task)
    reads: dict[int, frozenset[str]] = {}
    if src.adjoint is not None:  # each task's body becomes its adjoint, now that it is scalars and arrays
        from ..adjoint import adjoint_task

        kinds_by_name = {p.name: kind for p, kind in zip(params, flat_kinds)}
        for index, task in tasks.items():
            if src.adjoint.primal_of[index] is not None:  # else a task the adjoint runs forward
                tasks[index], reads[index] = adjoint_task(base, task, kinds_by_name, specs)
        for task in src.tasks:
            if isinstance(task, InterchangedTask):
                done = [adjoint_task(base, p, kinds_by_name, specs) if primal is not None else (p, None)
                        for p, primal in zip(parts[task.index], task.part_primals)]
                parts[task.index] = [p for p, _ in done]
                reads[task.index] = _merged([r for _, r in done if r is not None])
    for task in src.tasks:  # each interchanged loop's parts joined into one task (lang.front.interchange)
        if isinstance(task, InterchangedTask):
            first = dataclasses.replace(parts[task.index][0], index=task.index)
            fused = fused_task(first, parts[task.index], flat_name(task.count))
            tasks[task.index] = dataclasses.replace(  # still an InterchangedTask: the CPU runs its passes in blocks
                task, body=fused.body, loop_vars=fused.loop_vars, dims=fused.dims, stored=fused.stored,
                loaded=fused.loaded, bound_names=fused.bound_names, count=flat_name(task.count),
                parts=tuple(parts[task.index]))
    ordered = [tasks[t.index] for t in src.tasks]
    names = [p.name for p in params]
    analyse_names(ordered, set(names), src.filename)
    for task in ordered:  # a tiled task's parts are generated one by one (lang.cuda.tiling)
        if isinstance(task, TiledTask):
            analyse_names(list(task.parts), set(names), src.filename)
    flat = dataclasses.replace(base, params=tuple(params), tasks=tuple(ordered), body=_rebuild(src.body, tasks),
                               graph_while=flat_name(src.graph_while) if src.graph_while else None)
    return FlatSource(flat, flat_kinds, slots, specs, reads)


def _flat_task(fl: Flattener, task: Task) -> Task:
    """`task` flattened by `fl`: its body, and its bounds as scalar expressions."""
    body = fl.run(ast_clone.clone(task.body))
    if fl.random_draws:
        body = random_prologue(task, task.body[0]) + body
    dims = tuple(Dim(*(None if e is None else _bound(fl, e) for e in (d.start, d.stop, d.step))) for d in task.dims)
    bounds = [e for d in dims for e in (d.start, d.stop, d.step) if e is not None]
    return Task(task.index, task.parallel, task.lineno, body, task.loop_vars, dims,
                bound_names=frozenset(collect_names(bounds).loaded))


def _merged(reads: list):
    """The adjoint reads of a fused task: its parts' together (an array read from either)."""
    if all(isinstance(r, dict) for r in reads):
        out: dict = {}
        for r in reads:
            for name, value in r.items():
                out[name] = out.get(name, False) or value
        return out
    return frozenset().union(*reads)


def _bound(fl: Flattener, expr: ast.expr) -> ast.expr:
    out = fl.scalar(ast_clone.clone(expr))
    if fl.pre:
        raise QgraphSyntaxError("loop bounds cannot use vector values", fl.src.filename, expr.lineno)
    return out


def _rebuild(region: Region, tasks: dict[int, Task]) -> Region:
    if isinstance(region, Task):
        return tasks[region.index]
    if isinstance(region, Sequence):
        return Sequence(tuple(_rebuild(c, tasks) for c in region.children))
    region = with_bodies(region, lambda body: _rebuild(body, tasks))
    if isinstance(region, RepeatLoop):
        return dataclasses.replace(region, count=flat_name(region.count))
    return dataclasses.replace(region, flag=flat_name(region.flag))
