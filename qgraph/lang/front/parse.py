"""Parse a kernel's source into offloaded tasks and reject what qgraph cannot run.

Runs once, at decoration. The result (`KernelSource`) is type-independent: codegen
turns it into per-backend code, specialisation adds the argument types.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from dataclasses import dataclass

from ...errors import QgraphSyntaxError
from .builtins import CONTROL
from .builtins import serial as serial_marker
from .names import UNRESOLVED, Closure, collect_names, resolve_static  # noqa: F401 (re-exported)
from .region_parser import RegionParser
from .regions import DeviceLoop, Dim, Region, Sequence, Task, leaf_tasks

RESERVED_PARAMS = frozenset({"stream"})

_FORBIDDEN = {
    ast.FunctionDef: "nested function definitions are not supported in a kernel; use @qgraph.func at module level",
    ast.AsyncFunctionDef: "async functions are not supported in a kernel",
    ast.ClassDef: "class definitions are not supported in a kernel",
    ast.Lambda: "lambda is not supported in a kernel; use @qgraph.func",
    ast.Try: "try/except is not supported in a kernel",
    ast.With: "with-statements are not supported in a kernel",
    ast.AsyncWith: "async with is not supported in a kernel",
    ast.AsyncFor: "async for is not supported in a kernel",
    ast.Raise: "raise is not supported in a kernel; set an error flag in an array instead",
    ast.Assert: "assert is not supported in a kernel; set an error flag in an array instead",
    ast.Global: "global is not supported in a kernel; pass the value as an argument",
    ast.Nonlocal: "nonlocal is not supported in a kernel",
    ast.Import: "import is not supported inside a kernel; import at module level",
    ast.ImportFrom: "import is not supported inside a kernel; import at module level",
    ast.Delete: "del is not supported in a kernel",
    ast.Yield: "yield is not supported in a kernel",
    ast.YieldFrom: "yield is not supported in a kernel",
    ast.Await: "await is not supported in a kernel",
    ast.NamedExpr: "the walrus operator (:=) is not supported in a kernel; assign the value on a line of its own",
}
if hasattr(ast, "TryStar"):
    _FORBIDDEN[ast.TryStar] = _FORBIDDEN[ast.Try]


@dataclass(frozen=True)
class Param:
    name: str
    annotation: ast.expr | None
    keyword_only: bool
    source: str | None = None  # implicit parameters: how the binder reads the value (lang.front.globals_used)


@dataclass
class KernelSource:
    """A parsed kernel or func: its parameters and (for kernels) its task list."""

    name: str
    qualname: str
    filename: str
    lineno: int
    fn_def: ast.FunctionDef
    params: tuple[Param, ...]
    tasks: tuple[Task, ...]  # the leaf tasks of `body`, in launch order
    globals: dict
    closure: Closure  # read live: see names.Closure
    graph_while: str | None = None
    body: Region | None = None  # the region tree every backend walks (None for a func)
    frozen: tuple = ()  # (module dict or closure cell, name) of numbers compiled in (lang.front.globals_used)
    adjoint: object = None  # lang.adjoint.AdjointOf: this is the adjoint of a kernel (its tasks replaced per signature)
    reports: object = None  # lang.front.reports.ReportLayout: the ring of its qgraph.report statements

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def error(self, message: str, node: ast.AST | int | None = None) -> QgraphSyntaxError:
        return syntax_error(message, self.filename, node if node is not None else self.lineno)

    def resolve(self, expr: ast.expr) -> object:
        """The object a global name or attribute chain refers to, or UNRESOLVED."""
        return resolve_static(expr, self.globals, self.closure)


def syntax_error(message: str, filename: str, node: ast.AST | int | None) -> QgraphSyntaxError:
    lineno = node if isinstance(node, int) or node is None else getattr(node, "lineno", None)
    line = linecache.getline(filename, lineno) if lineno else ""
    return QgraphSyntaxError(message, filename, lineno, line or None)


def parse_function(fn, what: str) -> tuple[ast.FunctionDef, str, dict, Closure]:
    """The function's AST (line numbers as in its file), file name, globals and (live) closure vars."""
    try:
        source = inspect.getsource(fn)
        filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError):
        raise QgraphSyntaxError(
            f"cannot read the source of {what} {fn.__qualname__!r}: qgraph compiles from source, "
            "so define it in a file (or a notebook cell), not with exec()") from None
    tree = ast.parse(textwrap.dedent(source))
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    fn_def = tree.body[0]
    if not isinstance(fn_def, ast.FunctionDef):
        raise syntax_error(f"{what} must be a plain function (def)", filename, fn_def)
    return fn_def, filename, fn.__globals__, Closure(fn)


def parse_params(fn_def: ast.FunctionDef, filename: str, what: str) -> tuple[Param, ...]:
    args = fn_def.args
    if args.vararg is not None or args.kwarg is not None:
        raise syntax_error(f"{what} parameters must be named: *args and **kwargs are not supported",
                           filename, fn_def)
    params = [Param(a.arg, a.annotation, False) for a in args.posonlyargs + args.args]
    params += [Param(a.arg, a.annotation, True) for a in args.kwonlyargs]
    return tuple(params)


def check_body(nodes, filename: str, what: str) -> None:
    """Reject statements no backend can compile, naming the line."""
    for node in nodes:
        for sub in ast.walk(node):
            message = _FORBIDDEN.get(type(sub))
            if message is not None:
                raise syntax_error(message, filename, sub)
            if isinstance(sub, ast.Return) and sub.value is not None and what == "kernel":
                raise syntax_error("kernels return None: a return with a value is not allowed; "
                                   "write results into an array argument", filename, sub)
            if isinstance(sub, ast.Return) and what == "kernel":
                raise syntax_error("return is not allowed inside a kernel's tasks: a task cannot "
                                   "stop the rest of the kernel; use if/else instead", filename, sub)


def _loop_level_breaks(body: list[ast.stmt]):
    """`break` statements that would leave the parallel loop itself (not a nested loop)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Break):
            yield node
        elif isinstance(node, (ast.For, ast.While)):
            stack.extend(node.orelse)  # the else block belongs to the outer level
        elif isinstance(node, ast.stmt):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    stack.append(child)
                elif isinstance(child, (ast.excepthandler, ast.match_case)):
                    stack.extend(child.body)


class _Splitter(RegionParser):
    def __init__(self, src_filename: str, fn_def: ast.FunctionDef, globals_: dict, closure: dict,
                 ndrange_obj: object) -> None:
        self.filename = src_filename
        self.fn_def = fn_def
        self.globals = globals_
        self.closure = closure
        self.ndrange_obj = ndrange_obj
        self.param_names = {a.arg for a in fn_def.args.posonlyargs + fn_def.args.args + fn_def.args.kwonlyargs}

    def error(self, message: str, node) -> QgraphSyntaxError:
        return syntax_error(message, self.filename, node)

    def _is_ndrange(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name) and func.id in self.param_names:
            return False
        obj = resolve_static(func, self.globals, self.closure)
        if obj is not UNRESOLVED:
            return obj is self.ndrange_obj
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return name == "ndrange"

    def _is_range(self, func: ast.expr) -> bool:
        if not isinstance(func, ast.Name) or func.id != "range" or func.id in self.param_names:
            return False
        obj = resolve_static(func, self.globals, self.closure)
        return obj is range or obj is UNRESOLVED

    def serial_loop(self, node: ast.For) -> bool:
        """Whether `node` iterates over `qgraph.serial(...)`; if so, unwrap it to the plain iterable."""
        it = node.iter
        if not (isinstance(it, ast.Call) and resolve_static(it.func, self.globals, self.closure) is serial_marker):
            return False
        if len(it.args) != 1 or it.keywords or isinstance(it.args[0], ast.Starred):
            raise self.error("qgraph.serial takes one iterable, e.g. `for i in qgraph.serial(range(n)):`", node)
        node.iter = it.args[0]
        return True

    def unwrap_serial(self, stmts: list[ast.stmt]) -> None:
        """`qgraph.serial(...)` on loops inside statements: those loops are serial already."""
        for stmt in stmts:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.For):
                    self.serial_loop(sub)

    def parallel_dims(self, node: ast.For) -> tuple[tuple[str, ...], tuple[Dim, ...]] | None:
        it = node.iter
        if not isinstance(it, ast.Call):
            return None
        if self._is_range(it.func):
            kind = "range"
        elif self._is_ndrange(it.func):
            kind = "ndrange"
        else:
            return None
        if it.keywords or any(isinstance(a, ast.Starred) for a in it.args) or not 1 <= len(it.args) <= 3:
            raise self.error(f"a parallel loop takes {kind}() with 1 to 3 positional arguments", node)
        if node.orelse:
            raise self.error("for ... else is not supported on a parallel loop", node)
        if kind == "range":
            if not isinstance(node.target, ast.Name):
                raise self.error("a parallel range() loop needs a single loop variable", node)
            args = it.args
            if len(args) == 1:
                dim = Dim(ast.copy_location(ast.Constant(0), args[0]), args[0])
            else:
                dim = Dim(args[0], args[1], args[2] if len(args) == 3 else None)
            return (node.target.id,), (dim,)
        target = node.target
        names = [target] if isinstance(target, ast.Name) else getattr(target, "elts", None)
        if not names or not all(isinstance(n, ast.Name) for n in names) or len(names) != len(it.args):
            raise self.error(f"qgraph.ndrange with {len(it.args)} bounds needs {len(it.args)} loop "
                             "variables, e.g. `for i, j in qgraph.ndrange(n, m)`", node)
        dims = []
        for arg in it.args:
            if isinstance(arg, ast.Tuple):
                if len(arg.elts) != 2:
                    raise self.error("an ndrange bound is an int or a (start, stop) pair", arg)
                dims.append(Dim(arg.elts[0], arg.elts[1]))
            else:
                dims.append(Dim(ast.copy_location(ast.Constant(0), arg), arg))
        return tuple(n.id for n in names), tuple(dims)

    def regions(self, body: list[ast.stmt], tasks: list[Task]) -> Sequence:
        """`body` as a sequence of tasks and control-flow regions; new tasks are appended to `tasks`."""
        children: list[Region] = []
        serial: list[ast.stmt] = []

        def flush() -> None:
            if serial:
                task = Task(len(tasks), False, serial[0].lineno, list(serial))
                tasks.append(task)
                children.append(task)
                serial.clear()

        for stmt in body:
            kind = self.control(stmt)
            if kind is not None:
                flush()
                children.append(self.region(stmt, kind, tasks))
                continue
            if isinstance(stmt, ast.For) and self.serial_loop(stmt):
                parallel = None
            else:
                parallel = self.parallel_dims(stmt) if isinstance(stmt, ast.For) else None
            if parallel is None:
                if isinstance(stmt, ast.Pass):
                    continue
                serial.append(stmt)
                continue
            flush()
            loop_vars, dims = parallel
            for brk in _loop_level_breaks(stmt.body):
                raise self.error("break cannot leave a parallel loop (its iterations run at the same "
                                 "time); use continue or an if around the body", brk)
            bound_exprs = [e for d in dims for e in (d.start, d.stop, d.step) if e is not None]
            for expr in bound_exprs:
                for sub in ast.walk(expr):
                    if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) \
                            and sub.value.id in self.param_names:
                        raise self.error(f"loop bounds cannot read array elements ({ast.unparse(sub)}): bounds are "
                                         "evaluated on the host before the launch; pass the count as a scalar "
                                         "argument", sub)
            bound_names = collect_names(bound_exprs).loaded
            task = Task(len(tasks), True, stmt.lineno, list(stmt.body), loop_vars, dims,
                        bound_names=frozenset(bound_names))
            tasks.append(task)
            children.append(task)
        flush()
        return Sequence(tuple(children))

    def check_nested_ndrange(self, tasks: list[Task]) -> None:
        for task in tasks:
            for stmt in task.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, ast.Call) and self._is_ndrange(sub.func):
                        raise self.error("qgraph.ndrange is only allowed as the iterator of a top-level "
                                         "for loop of a kernel", sub)
                    obj = resolve_static(sub.func, self.globals, self.closure) if isinstance(sub, ast.Call) \
                        else UNRESOLVED
                    kind = next((k for k, fn in CONTROL.items() if obj is fn), None)
                    if kind is not None:
                        raise self.error(f"qgraph.{kind} opens a device region only as a statement at the top "
                                         "level of a kernel body (or of another region's body), not inside a "
                                         "task's loop or block", sub)


def analyse_names(tasks: list[Task], params: set[str], filename: str) -> None:
    """Fill each task's stored/loaded sets and reject values that would cross tasks."""
    for task in tasks:
        names = collect_names(task.body)
        stored = set(names.stored) | set(task.loop_vars)
        task.stored = frozenset(stored)
        task.loaded = names.loaded
    stored_in: dict[str, Task] = {}
    for task in tasks:
        for name in task.stored:
            stored_in.setdefault(name, task)
    for task in tasks:
        for name, line in task.loaded.items():
            if name in task.stored:
                continue
            owner = stored_in.get(name)
            if owner is not None and owner is not task:
                raise syntax_error(
                    f"'{name}' is assigned in task {owner.index} (line {owner.lineno}) and read in "
                    f"task {task.index}; local values do not cross tasks: keep both in one task or "
                    "pass the value through an array", filename, line)
        for name in task.bound_names:
            if name in stored_in and name not in params:
                raise syntax_error(
                    f"the bounds of the loop at line {task.lineno} use the local variable '{name}'; "
                    "loop bounds may use parameters, array shapes and constants", filename, task.lineno)


def parse_kernel(fn, graph_while: str | None, ndrange_obj: object) -> KernelSource:
    fn_def, filename, globals_, closure = parse_function(fn, "kernel")
    params = parse_params(fn_def, filename, "kernel")
    names = [p.name for p in params]
    for p in params:
        if p.name in RESERVED_PARAMS:
            raise syntax_error(f"parameter name '{p.name}' is reserved for the call option "
                               f"{p.name}=; rename the parameter", filename, fn_def)
        if p.name.startswith("_qg_"):
            raise syntax_error(f"parameter name '{p.name}' uses the prefix _qg_, which qgraph reserves for the "
                               "names of its generated code; rename the parameter", filename, fn_def)
    if params and params[0].name in ("self", "cls"):
        raise syntax_error(f"kernel {fn.__name__} takes '{params[0].name}' first, like a method: a kernel is a "
                           "plain function of arrays and numbers; define it at module level (or as a "
                           "@staticmethod without self) and pass what it needs as arguments", filename, fn_def)
    if graph_while is not None and graph_while.split(".")[0] not in names:
        raise syntax_error(f"graph_while={graph_while!r} names no parameter of {fn.__name__}"
                           f"({', '.join(names)}); pass the name of the int32 flag parameter "
                           "(or of a struct parameter's field: 'state.flag')", filename, fn_def)
    body = list(fn_def.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # docstring
    if body and isinstance(body[-1], ast.Return) and body[-1].value is None:
        body = body[:-1]  # a trailing bare return is a no-op
    check_body(body, filename, "kernel")
    splitter = _Splitter(filename, fn_def, globals_, closure, ndrange_obj)
    tasks: list[Task] = []
    body: Region = splitter.regions(body, tasks)
    for task in tasks:
        splitter.unwrap_serial(task.body)
    splitter.check_nested_ndrange(tasks)
    analyse_names(tasks, set(names), filename)
    if graph_while is not None:  # the decorator's shorthand: a do-while region around the whole body
        body = Sequence((DeviceLoop(graph_while, body, fn_def.lineno),))
    assert tuple(leaf_tasks(body)) == tuple(tasks)
    src = KernelSource(fn.__name__, fn.__qualname__, filename, fn_def.lineno, fn_def, params,
                       tuple(tasks), globals_, closure, graph_while, body)
    from ..lower.updates import task_updates

    for task in tasks:  # `*=` on a shared element and friends are reported at decoration
        task_updates(src, task)
    return src


def parse_func(fn) -> KernelSource:
    fn_def, filename, globals_, closure = parse_function(fn, "@qgraph.func")
    params = parse_params(fn_def, filename, "@qgraph.func")
    check_body(fn_def.body, filename, "func")
    return KernelSource(fn.__name__, fn.__qualname__, filename, fn_def.lineno, fn_def, params, (),
                        globals_, closure)
