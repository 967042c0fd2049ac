"""Turn a parsed kernel's tasks into per-backend Python code for numba to compile.

Everything is built as AST with the user's line numbers and file name, so numba's error
messages and tracebacks point at the user's source lines.

- CPU: one module per kernel: `@qgraph.func` helpers, one function per unit of tasks
  (runs of parallel tasks numba can analyse share one, so numba may fuse their loops;
  every other task is its own) and a runner that calls the units in order (and, for
  graph_while, repeats them while the flag is non-zero).
- CUDA: one kernel function per task and signature; parallel tasks get one thread per
  iteration, with the launch bounds passed in as leading by-value parameters.
- Host: a function that evaluates every parallel loop's bounds from the call's arguments,
  giving each task's packed bound parameters and iteration count (the CUDA launch
  parameters; on both backends it also checks the bounds once per specialisation).
"""

from __future__ import annotations

import ast
import copy
import hashlib
import operator
import struct
from dataclasses import dataclass, field

from . import lang
from .frontend import _UNRESOLVED, Dim, KernelSource, Task, collect_names

PREFIX = "_qg_"
RUNNER = "_qg_run"


def task_name(task: Task) -> str:
    return f"_qg_task_{task.index}"


# --------------------------------------------------------------------------- call rewriting


CPU_ATOMICS = {name: PREFIX + name for name in lang.ATOMICS}
CUDA_ATOMICS = {name: f"_qg_cuda.atomic.{name[len('atomic_'):]}" for name in lang.ATOMICS}


@dataclass
class Symbols:
    """Objects the kernel code calls that each backend provides under generated names.

    `atomics` maps qgraph.atomic_* to the backend's spelling (a name or a dotted path:
    numba-cuda types its atomics only as attributes of the cuda module).
    """

    atomic_paths: dict[str, str] = field(default_factory=lambda: dict(CPU_ATOMICS))
    atomics: set[str] = field(default_factory=set)
    funcs: dict[int, tuple[str, object]] = field(default_factory=dict)  # id(Func) -> (name, Func)

    def replacement(self, obj: object, src: KernelSource, node: ast.AST) -> str | None:
        if obj is _UNRESOLVED:
            return None
        for name, fn in lang.ATOMICS.items():
            if obj is fn:
                self.atomics.add(name)
                return self.atomic_paths[name]
        if obj is lang.ndrange:
            raise src.error("qgraph.ndrange is only allowed as the iterator of a top-level for loop "
                            "of a kernel", node)
        kind = getattr(obj, "_qgraph_kind", None)
        if kind == "kernel":
            raise src.error(f"a kernel cannot call another kernel ({obj.__name__}); make the shared "
                            "code a @qgraph.func", node)
        if kind == "func":
            entry = self.funcs.get(id(obj))
            if entry is None:
                entry = (f"_qg_func_{len(self.funcs)}_{obj.__name__}", obj)
                self.funcs[id(obj)] = entry
            return entry[0]
        return None


class _CallRewriter(ast.NodeTransformer):
    def __init__(self, src: KernelSource, local_names: set[str], symbols: Symbols) -> None:
        self.src = src
        self.local_names = local_names
        self.symbols = symbols

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        root = node.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id not in self.local_names:
            path = self.symbols.replacement(self.src.resolve(node.func), self.src, node)
            if path is not None:
                node.func = _dotted(path, node.func)
        return node


def _dotted(path: str, at: ast.AST) -> ast.expr:
    """`a.b.c` as a Name/Attribute chain located at `at`."""
    parts = path.split(".")
    expr: ast.expr = ast.copy_location(ast.Name(parts[0], ast.Load()), at)
    for attr in parts[1:]:
        expr = ast.copy_location(ast.Attribute(expr, attr, ast.Load()), at)
    return expr


def lower_statements(src: KernelSource, stmts: list[ast.stmt], local_names: set[str],
                     symbols: Symbols) -> list[ast.stmt]:
    """Deep copies of `stmts` with qgraph builtins and funcs replaced by generated names."""
    rewriter = _CallRewriter(src, local_names, symbols)
    lowered = [rewriter.visit(copy.deepcopy(s)) for s in stmts]
    _check_defined(src, lowered, local_names)
    return lowered


def _check_defined(src: KernelSource, stmts: list[ast.stmt], local_names: set[str]) -> None:
    import builtins

    names = collect_names(stmts)
    for name, line in names.loaded.items():
        if name in local_names or name in names.stored or name.startswith(PREFIX):
            continue
        if name in src.closure or name in src.globals or hasattr(builtins, name):
            continue
        raise src.error(f"name '{name}' is not defined (not a parameter, a local or a global of "
                        f"{src.name}'s module)", line)


def lower_funcs(symbols: Symbols) -> list[tuple[ast.FunctionDef, object]]:
    """(FunctionDef, Func) of every @qgraph.func the kernel reaches, callees included."""
    done: set[int] = set()
    defs: list[tuple[ast.FunctionDef, object]] = []
    while len(done) < len(symbols.funcs):
        for key, (name, fn) in list(symbols.funcs.items()):
            if key in done:
                continue
            done.add(key)
            src = fn._source
            fdef = copy.deepcopy(src.fn_def)
            local_names = set(src.param_names) | collect_names(fdef.body).stored
            fdef.body = lower_statements(src, fdef.body, local_names, symbols)
            fdef.name = name
            fdef.decorator_list = []
            fdef.returns = None
            for a in fdef.args.posonlyargs + fdef.args.args + fdef.args.kwonlyargs:
                a.annotation = None
            defs.append((fdef, fn))
    return defs


# --------------------------------------------------------------------------- AST helpers


def _name(id_: str, at: ast.AST, store: bool = False) -> ast.Name:
    return ast.copy_location(ast.Name(id_, ast.Store() if store else ast.Load()), at)


def _assign(target: str, value: ast.expr, at: ast.AST) -> ast.Assign:
    return ast.copy_location(ast.Assign([_name(target, at, True)], value), at)


def _call(fn: str, args: list[ast.expr], at: ast.AST) -> ast.Call:
    return ast.copy_location(ast.Call(_name(fn, at), args, []), at)


def _binop(left: ast.expr, op: ast.operator, right: ast.expr, at: ast.AST) -> ast.BinOp:
    return ast.copy_location(ast.BinOp(left, op, right), at)


def _function(name: str, params: list[str], body: list[ast.stmt], lineno: int) -> ast.FunctionDef:
    args = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    fdef = ast.FunctionDef(name=name, args=args, body=body or [ast.Pass()], decorator_list=[],
                           returns=None, type_params=[])
    fdef.lineno = fdef.end_lineno = lineno
    fdef.col_offset = fdef.end_col_offset = 0
    return _fix_lines(fdef)


def _fix_lines(tree: ast.AST) -> ast.AST:
    """Fill missing positions and make every node's line range valid for compile()."""
    ast.fix_missing_locations(tree)
    for node in ast.walk(tree):
        if hasattr(node, "lineno"):
            if getattr(node, "end_lineno", None) is None or node.end_lineno < node.lineno:
                node.end_lineno = node.lineno
            if node.end_lineno == node.lineno and getattr(node, "end_col_offset", 0) < node.col_offset:
                node.end_col_offset = node.col_offset
    return tree


def compile_module(defs: list[ast.stmt], filename: str):
    module = _fix_lines(ast.Module(body=defs, type_ignores=[]))
    return compile(module, filename, "exec")


def task_locals(src: KernelSource, task: Task) -> set[str]:
    return set(src.param_names) | set(task.stored)


# --------------------------------------------------------------------------- CPU


@dataclass
class CpuModule:
    code: object  # code object of the unit functions and the runner(s)
    func_codes: list[tuple[str, object, KernelSource]]  # each @qgraph.func, run in its own module's globals
    units: list[tuple[str, bool]]  # (function name, has parallel loops), in call order
    atomics: set[str]
    fingerprint: str  # what the generated code depends on, for the disk cache
    runner: str  # the runner's (unique) function name

    @property
    def funcs(self) -> list[str]:
        return [name for name, _, _ in self.func_codes]


def _cpu_parallel_loop(task: Task, body: list[ast.stmt], zero_d: frozenset[str]) -> list[ast.stmt]:
    """prange over the outer dimension; inner ndrange dimensions as serial loops."""
    at = ast.Pass()
    ast.copy_location(at, task.body[0])
    views = _ZeroDIndex(zero_d)
    inner = [views.visit(s) for s in body]
    stmts: list[ast.stmt] = _view_assignments(views.used, at)
    for k in range(len(task.dims) - 1, -1, -1):
        dim = task.dims[k]
        var = task.loop_vars[k]
        rng = "_qg_prange" if k == 0 else "range"
        if dim.step is None:
            # `prange(stop)` when the start is a literal 0: numba then knows the index is
            # non-negative, drops the wraparound checks and vectorises (2.5x for a saxpy)
            zero = isinstance(dim.start, ast.Constant) and dim.start.value == 0
            iter_ = _call(rng, [dim.stop] if zero else [dim.start, dim.stop], dim.stop)
            inner = [ast.copy_location(ast.For(_name(var, at, True), iter_, inner, []), at)]
        else:
            s, e, d = f"_qg_s{k}_{task.index}", f"_qg_e{k}_{task.index}", f"_qg_d{k}_{task.index}"
            stmts += [_assign(s, dim.start, at), _assign(e, dim.stop, at), _assign(d, dim.step, at)]
            trip = _call("_qg_trip_count", [_name(s, at), _name(e, at), _name(d, at)], at)
            counter = f"_qg_k{task.index}"
            index = _assign(var, _binop(_name(s, at), ast.Add(),
                                        _binop(_name(counter, at), ast.Mult(), _name(d, at), at), at), at)
            inner = [ast.copy_location(ast.For(_name(counter, at, True), _call(rng, [trip], at),
                                               [index] + inner, []), at)]
    return stmts + inner


_PURE_BUILTINS = {abs, min, max, int, float, bool, len, round, range}


def _fusable(src: KernelSource, task: Task) -> bool:
    """True when numba sees every write of this parallel task (setitem only, pure calls).

    numba may reorder and fuse parallel loops in one function; its dependence analysis
    counts only setitem as a write, so a loop that writes through a call (an atomic, a
    helper, `x.fill()`) must stay in a function of its own.
    """
    if not task.parallel:
        return False
    local_names = task_locals(src, task)
    for stmt in task.body:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            root = node.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if not isinstance(root, ast.Name) or root.id in local_names:
                return False
            if not _is_pure_call(src.resolve(node.func), node):
                return False
    return True


def _is_pure_call(obj: object, node: ast.Call) -> bool:
    """A call that writes no array: math functions, a few builtins, NumPy ufuncs without out=."""
    import numpy as np

    if node.keywords:
        return False
    if any(obj is b for b in _PURE_BUILTINS):
        return True
    if callable(obj) and getattr(obj, "__module__", None) == "math":
        return True
    return isinstance(obj, np.ufunc)


def _units(src: KernelSource) -> list[list[Task]]:
    """Tasks grouped into functions: runs of fusable parallel tasks together, others alone."""
    units: list[list[Task]] = []
    for task in src.tasks:
        if units and _fusable(src, task) and all(_fusable(src, t) for t in units[-1]):
            units[-1].append(task)
        else:
            units.append([task])
    return units


def zero_d_view(name: str) -> str:
    return f"_qg_0d_{name}"


def _view_assignments(names, at: ast.AST) -> list[ast.stmt]:
    """`_qg_0d_x = x.reshape(1)` for each 0-d array parameter that needs a view."""
    out = []
    for name in sorted(names):
        reshape = ast.copy_location(ast.Attribute(_name(name, at), "reshape", ast.Load()), at)
        out.append(_assign(zero_d_view(name), ast.copy_location(
            ast.Call(reshape, [ast.copy_location(ast.Constant(1), at)], []), at), at))
    return out


class _ZeroDIndex(ast.NodeTransformer):
    """Inside a CPU parallel loop: `x[()]` -> `view[0]` and `atomic_*(x, (), v)` ->
    `atomic_*(view, 0, v)` for 0-d array parameters, `view` being `x.reshape(1)`.

    numba passes a 0-d array captured by a parallel loop into the loop as a plain scalar,
    so the loop must index a 1-element view instead.
    """

    def __init__(self, names: frozenset[str], atomics: frozenset[str] = frozenset(CPU_ATOMICS.values()),
                 rename: bool = True) -> None:
        self.names = names
        self.atomics = atomics  # how the backend spells the atomics (names or dotted paths)
        self.rename = rename  # index the view `_qg_0d_x` (CPU), or `x` itself when it is passed as (1,)
        self.used: set[str] = set()

    def _view(self, node: ast.expr, index: ast.expr) -> ast.expr | None:
        if isinstance(node, ast.Name) and node.id in self.names and isinstance(index, ast.Tuple) and not index.elts:
            self.used.add(node.id)
            name = zero_d_view(node.id) if self.rename else node.id
            return ast.copy_location(ast.Name(name, ast.Load()), node)
        return None

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if ast.unparse(node.func) in self.atomics and len(node.args) == 3:
            view = self._view(node.args[0], node.args[1])
            if view is not None:
                node.args[0] = view
                node.args[1] = ast.copy_location(ast.Constant(0), node.args[1])
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        view = self._view(node.value, node.slice)
        if view is not None:
            node.value = view
            node.slice = ast.copy_location(ast.Constant(0), node.slice)
        return node


def cpu_module(src: KernelSource, zero_d: frozenset[str] = frozenset()) -> CpuModule:
    """One function per unit of tasks, and a runner that calls the units in order.

    Runs of parallel tasks that numba can analyse share a function, so numba fuses
    adjacent loops where that is safe, as it would for the same loops written by hand;
    every other boundary between tasks is a call, which numba never reorders. Parallel
    loops index the 0-d array parameters in `zero_d` through 1-element views.
    """
    symbols = Symbols()
    defs: list[ast.stmt] = []
    units: list[tuple[str, bool]] = []
    calls: list[ast.stmt] = []
    at = src.fn_def
    for number, unit in enumerate(_units(src)):
        body: list[ast.stmt] = []
        used: set[str] = set()
        for task in unit:
            stmts = lower_statements(src, task.body, task_locals(src, task), symbols)
            if task.parallel:
                dims = [Dim(*lower_bounds(src, d, symbols)) for d in task.dims]
                stmts = _cpu_parallel_loop(_with_dims(task, dims), stmts, zero_d)
            body += stmts
            used |= set(task.loaded) | set(task.bound_names)
        params = [p for p in src.param_names if p in used]
        name = f"_qg_unit_{number}"
        defs.append(_function(name, params, body, unit[0].lineno))
        units.append((name, any(t.parallel for t in unit)))
        calls.append(ast.copy_location(ast.Expr(_call(name, [_name(p, at) for p in params], at)), at))
    if src.graph_while is None:
        defs.append(_function(RUNNER, list(src.param_names), calls, src.lineno))
    else:
        index = ast.Tuple([], ast.Load()) if src.graph_while in zero_d else ast.Constant(0)
        flag = ast.copy_location(ast.Subscript(_name(src.graph_while, at), index, ast.Load()), at)
        test = ast.copy_location(ast.Compare(flag, [ast.Eq()], [ast.Constant(0)]), at)
        brk = ast.copy_location(ast.If(test, [ast.copy_location(ast.Break(), at)], []), at)
        loop = ast.copy_location(ast.While(ast.Constant(True), calls + [brk], []), at)
        defs.append(_function(RUNNER, list(src.param_names), [loop], src.lineno))
    func_defs = lower_funcs(symbols)
    fingerprint = fingerprint_of(src, [f for f, _ in func_defs] + defs, symbols)
    # numba names compiled code after module, qualname and a per-process counter, so two
    # kernels compiled by different processes can emit the same symbol, and a process
    # loading both from the disk cache links whichever it loaded first. Names unique to the
    # kernel and its code make every cached symbol mean exactly one piece of code.
    renames = {name: unique_symbol(name, src.name, fingerprint)
               for name in [f.name for f, _ in func_defs] + [d.name for d in defs]}
    for fdef, _ in func_defs:
        _Rename(renames).visit(fdef)
    for d in defs:
        _Rename(renames).visit(d)
    func_codes = [(fdef.name, compile_module([fdef], fn._source.filename), fn._source) for fdef, fn in func_defs]
    units = [(renames[name], parallel) for name, parallel in units]
    return CpuModule(compile_module(defs, src.filename), func_codes, units, symbols.atomics, fingerprint,
                     renames[RUNNER])


def unique_symbol(name: str, kernel_name: str, fingerprint: str) -> str:
    """A generated function's name, unique to its kernel and code (see cpu_module)."""
    return f"{name}__{kernel_name}_{fingerprint[:16]}"


class _Rename(ast.NodeTransformer):
    """Rename generated functions: their definitions and every reference to them."""

    def __init__(self, mapping: dict[str, str]) -> None:
        self.mapping = mapping

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self.mapping.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self.mapping.get(node.id, node.id)
        return node


def lower_bounds(src: KernelSource, dim: Dim, symbols: Symbols) -> tuple:
    """A loop dimension's bound expressions with qgraph builtins rewritten."""
    rewriter = _CallRewriter(src, set(src.param_names), symbols)
    return tuple(None if e is None else rewriter.visit(copy.deepcopy(e))
                 for e in (dim.start, dim.stop, dim.step))


def _with_dims(task: Task, dims: list[Dim]) -> Task:
    clone = copy.copy(task)
    clone.dims = tuple(dims)
    return clone


# --------------------------------------------------------------------------- CUDA


@dataclass(frozen=True)
class CudaTaskCode:
    """One task as a CUDA kernel function: its code and by-value parameter order."""

    task: Task
    function: ast.FunctionDef
    bound_params: tuple[str, ...]  # leading int64 launch-bound parameters
    params: tuple[str, ...]  # kernel parameters, in the kernel's argument order


class _ContinueToReturn(ast.NodeTransformer):
    """In a parallel body run by one thread, `continue` ends that thread's iteration."""

    def visit_For(self, node: ast.For) -> ast.AST:
        node.orelse = [self.visit(s) for s in node.orelse]
        return node

    visit_While = visit_For

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        return ast.copy_location(ast.Return(None), node)


def cuda_bound_params(task: Task) -> tuple[str, ...]:
    if not task.parallel:
        return ()
    ndim = len(task.dims)
    if ndim == 1:
        return ("_qg_s0", "_qg_d0", "_qg_n")
    starts = tuple(f"_qg_s{k}" for k in range(ndim))
    counts = tuple(f"_qg_n{k}" for k in range(1, ndim))
    return starts + counts + ("_qg_n",)


def zero_d_atomic_targets(src: KernelSource, task: Task, zero_d: frozenset[str]) -> frozenset[str]:
    """0-d array parameters a task updates with `qgraph.atomic_*(x, (), v)`."""
    found = set()
    for stmt in task.body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and len(node.args) == 3 and isinstance(node.args[0], ast.Name) \
                    and node.args[0].id in zero_d and isinstance(node.args[1], ast.Tuple) \
                    and not node.args[1].elts and src.resolve(node.func) in lang.ATOMICS.values():
                found.add(node.args[0].id)
    return frozenset(found)


def cuda_task(src: KernelSource, task: Task, param_order: list[str], symbols: Symbols,
              as_one_element: frozenset[str] = frozenset()) -> CudaTaskCode:
    """The kernel function of one task, taking `param_order` after the bound parameters.

    numba-cuda's atomics take no 0-d array, so the 0-d parameters in `as_one_element`
    (see zero_d_atomic_targets) are passed to this task as 1-element arrays and their
    `x[()]` / `atomic_*(x, (), v)` become `x[0]` / `atomic_*(x, 0, v)`.
    """
    body = lower_statements(src, task.body, task_locals(src, task), symbols)
    at = task.body[0]
    body = [_ZeroDIndex(as_one_element, frozenset(CUDA_ATOMICS.values()), rename=False).visit(s) for s in body]
    bounds = cuda_bound_params(task)
    if task.parallel:
        body = [_ContinueToReturn().visit(s) for s in body]
        # the global thread index, computed unsigned and with the sign bit masked off (it is
        # below 2**41): the compiler then knows it is non-negative, and indexing with it
        # needs no negative-index wraparound
        def unsigned(attr: str) -> ast.expr:
            return _call("_qg_u64", [_call("_qg_u32", [_attr3("_qg_cuda", attr, "x", at)], at)], at)

        tid = _call("_qg_i64", [_binop(_binop(unsigned("blockIdx"), ast.Mult(), unsigned("blockDim"), at),
                                       ast.Add(), unsigned("threadIdx"), at)], at)
        tid = _binop(tid, ast.BitAnd(), ast.copy_location(ast.Constant(0x7FFFFFFFFFFFFFFF), at), at)
        guard = ast.copy_location(ast.If(
            ast.copy_location(ast.Compare(_name("_qg_t", at), [ast.GtE()], [_name("_qg_n", at)]), at),
            [ast.copy_location(ast.Return(None), at)], []), at)
        prologue = [_assign("_qg_t", tid, at), guard] + _cuda_indices(task, at)
        body = prologue + body
    fdef = _function(task_name(task), list(bounds) + list(param_order), body, task.lineno)
    return CudaTaskCode(task, fdef, bounds, tuple(param_order))


def _attr3(base: str, a: str, b: str, at: ast.AST) -> ast.expr:
    inner = ast.copy_location(ast.Attribute(_name(base, at), a, ast.Load()), at)
    return ast.copy_location(ast.Attribute(inner, b, ast.Load()), at)


def _cuda_indices(task: Task, at: ast.AST) -> list[ast.stmt]:
    """Loop variables from the flat thread index `_qg_t`."""
    v = task.loop_vars
    t = _name("_qg_t", at)

    def offset(k: int, index: ast.expr) -> ast.expr:
        # A literal-0 start and unit step index with the thread index itself: the compiler
        # then knows it is non-negative and drops numba's negative-index wraparound (the
        # difference between 60% and 80% of the copy bandwidth for a saxpy on an H200).
        dim = task.dims[k]
        if _is_literal(dim.start, 0) and (dim.step is None or _is_literal(dim.step, 1)):
            return index
        return _binop(_name(f"_qg_s{k}", at), ast.Add(), index, at)

    if len(v) == 1:
        dim = task.dims[0]
        scaled = t if dim.step is None or _is_literal(dim.step, 1) else _binop(t, ast.Mult(), _name("_qg_d0", at), at)
        return [_assign(v[0], offset(0, scaled), at)]
    out: list[ast.stmt] = []
    rest = "_qg_t"
    for k in range(len(v) - 1, 0, -1):
        n = _name(f"_qg_n{k}", at)
        out.append(_assign(v[k], offset(k, _binop(_name(rest, at), ast.Mod(), n, at)), at))
        out.append(_assign(f"_qg_r{k}", _binop(_name(rest, at), ast.FloorDiv(), n, at), at))
        rest = f"_qg_r{k}"
    out.append(_assign(v[0], offset(0, _name(rest, at)), at))
    return out


def _is_literal(expr: ast.expr | None, value: int) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) is int and expr.value == value


# --------------------------------------------------------------------------- host bounds

_PACK_Q = {n: struct.Struct(f"<{n}q").pack for n in range(1, 8)}


def _line(lineno: int) -> ast.AST:
    node = ast.Pass()
    node.lineno = node.end_lineno = lineno
    node.col_offset = node.end_col_offset = 0
    return node


def bounds_function(src: KernelSource, namespace: dict):
    """A host function: args -> (packed bound params per parallel task, iteration counts).

    Tasks whose loops have the same bound expressions share one evaluation.
    """
    body: list[ast.stmt] = []
    packed: list[ast.expr] = []
    totals: list[ast.expr] = []
    seen: dict[tuple, tuple[str, str]] = {}

    def idx(e: ast.expr) -> ast.expr:
        return _call("_qg_index", [e], e)

    for task in src.tasks:
        if not task.parallel:
            continue
        k = task.index
        at = _line(task.lineno)  # errors evaluating these bounds name the loop's line
        signature = tuple(None if e is None else ast.dump(e) for d in task.dims for e in (d.start, d.stop, d.step))
        if signature in seen:
            pack_name, count_name = seen[signature]
            packed.append(_name(pack_name, at))
            totals.append(_name(count_name, at))
            continue
        if len(task.dims) == 1:
            dim = task.dims[0]
            step = dim.step if dim.step is not None else ast.copy_location(ast.Constant(1), at)
            s, e, d, n = f"_qg_s_{k}", f"_qg_e_{k}", f"_qg_d_{k}", f"_qg_n_{k}"
            body += [_assign(s, idx(dim.start), at), _assign(e, idx(dim.stop), at), _assign(d, idx(step), at),
                     _assign(n, _call("_qg_len", [_call("_qg_range", [_name(s, at), _name(e, at),
                                                                     _name(d, at)], at)], at), at)]
            pieces = [s, d, n]
        else:
            starts, counts = [], []
            for j, dim in enumerate(task.dims):
                s, c = f"_qg_s{j}_{k}", f"_qg_c{j}_{k}"
                count = _call("_qg_max", [ast.copy_location(ast.Constant(0), at),
                                         _binop(idx(dim.stop), ast.Sub(), _name(s, at), at)], at)
                body += [_assign(s, idx(dim.start), at), _assign(c, count, at)]
                starts.append(s)
                counts.append(c)
            n = f"_qg_n_{k}"
            total = _name(counts[0], at)
            for c in counts[1:]:
                total = _binop(total, ast.Mult(), _name(c, at), at)
            body.append(_assign(n, total, at))
            pieces = starts + counts[1:] + [n]
        pack_name = f"_qg_b_{k}"
        body.append(_assign(pack_name, _call(f"_qg_pack{len(pieces)}", [_name(p, at) for p in pieces], at), at))
        seen[signature] = (pack_name, n)
        packed.append(_name(pack_name, at))
        totals.append(_name(n, at))
    result = ast.Tuple([ast.Tuple(packed, ast.Load()), ast.Tuple(totals, ast.Load())], ast.Load())
    body.append(ast.copy_location(ast.Return(result), src.fn_def))
    fdef = _function("_qg_bounds", list(src.param_names), body, src.lineno)
    ns = dict(namespace)
    ns.update({"_qg_index": operator.index, "_qg_len": len, "_qg_range": range, "_qg_max": max})
    ns.update({f"_qg_pack{n}": pack for n, pack in _PACK_Q.items()})
    exec(compile_module([fdef], src.filename), ns)
    return ns["_qg_bounds"]


# --------------------------------------------------------------------------- fingerprints


def fingerprint_of(src: KernelSource, defs: list[ast.stmt], symbols: Symbols) -> str:
    """A hash of the generated code and the global values it reads (numba freezes globals)."""
    h = hashlib.sha256()
    for d in defs:
        h.update(ast.dump(d).encode())
    sources = [src] + [fn._source for _, fn in symbols.funcs.values()]
    for s in sources:
        for stmt in s.fn_def.body:
            for name in sorted(collect_names([stmt]).loaded):
                if name in s.globals or name in s.closure:
                    value = s.closure[name] if name in s.closure else s.globals[name]
                    h.update(name.encode() + b"=" + _value_digest(value))
    return h.hexdigest()


def _value_digest(value: object) -> bytes:
    import numpy as np

    if isinstance(value, (bool, int, float, complex, str, bytes, np.generic)) or value is None:
        return repr((type(value).__name__, value)).encode()
    if isinstance(value, tuple) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return repr(value).encode()
    if isinstance(value, np.ndarray):
        return hashlib.sha256(value.tobytes()).hexdigest().encode() + repr((value.dtype.str, value.shape)).encode()
    kind = getattr(value, "_qgraph_kind", None)
    if kind is not None:
        return f"{kind}:{value.__qualname__}".encode()
    mod = getattr(value, "__name__", None) if type(value).__name__ == "module" else None
    if mod is not None:
        return f"module:{mod}".encode()
    py_func = getattr(value, "py_func", value)
    code = getattr(py_func, "__code__", None)
    if code is not None:
        return hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest().encode()
    return f"{type(value).__module__}.{type(value).__qualname__}".encode()
