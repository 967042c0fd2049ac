"""Lowering kernel statements for a backend: qgraph builtins and funcs become generated names.

Everything is built as AST with the user's line numbers and file name, so numba's error
messages and tracebacks point at the user's source lines.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

import numpy as np

from .. import roles
from ..front import ast_clone
from ..front import builtins as lang
from ..front.parse import UNRESOLVED, KernelSource, Task, collect_names
from ..roles import role_of
from .math_calls import NUMPY_AS_MATH, ROUNDING, lower_min_max

PREFIX = "_qg_"
RUNNER = "_qg_run"


def task_name(task: Task) -> str:
    return f"_qg_task_{task.index}"


# --------------------------------------------------------------------------- call rewriting


CPU_ATOMICS = {name: PREFIX + name for name in lang.ATOMICS}
# math functions numba compiles for CUDA but not for the CPU (compiler.cpu_math provides them)
CPU_MATH = {math.fmod: "_qg_fmod", math.remainder: "_qg_remainder", **ROUNDING}
CUDA_MATH = {**ROUNDING, **NUMPY_AS_MATH}
CUDA_ATOMICS = {name: f"_qg_cuda.atomic.{name[len('atomic_'):]}" for name in lang.ATOMICS}


@dataclass
class Symbols:
    """Objects the kernel code calls that each backend provides under generated names.

    `atomics` maps qgraph.atomic_* to the backend's spelling (a name or a dotted path:
    numba-cuda types its atomics only as attributes of the cuda module).
    """

    atomic_paths: dict[str, str] = field(default_factory=lambda: dict(CPU_ATOMICS))
    atomics: set[str] = field(default_factory=set)
    math_paths: dict = field(default_factory=lambda: dict(CPU_MATH))  # function -> the backend's spelling
    # @qgraph.func specialisations (lang.flat.view.FuncSpecs.defs): (FunctionDef, Func, its source)
    specialised: list = field(default_factory=list)
    func_precision: object = None  # lang.types.func_precision.FuncPrecision, when Python numbers are typed weakly

    def typing_funcs(self, default_float: str):
        """The helpers' weak typing (lang.types.func_precision), which `weak_typed` types helper calls
        with and points them at their instances; None without helpers."""
        if not self.specialised:
            return None
        if self.func_precision is None:
            from ..types.func_precision import FuncPrecision

            self.func_precision = FuncPrecision(self.specialised, default_float, _func_locals)
        return self.func_precision

    def atomic(self, op: str) -> str:
        """The backend's spelling of qgraph.atomic_<op> (and note that it is used)."""
        self.atomics.add(f"atomic_{op}")
        return self.atomic_paths[f"atomic_{op}"]

    def replacement(self, obj: object, src: KernelSource, node: ast.AST) -> str | None:
        if obj is UNRESOLVED:
            return None
        path = self.math_paths.get(obj) if isinstance(obj, (type(math.sqrt), np.ufunc)) else None
        if path is not None:
            return path
        for name, fn in lang.ATOMICS.items():
            if obj is fn:
                self.atomics.add(name)
                return self.atomic_paths[name]
        if obj is lang.ndrange:
            raise src.error("qgraph.ndrange is only allowed as the iterator of a top-level for loop "
                            "of a kernel", node)
        if obj is lang.serial:
            raise src.error("qgraph.serial is only allowed as the iterator of a for loop in a kernel body, e.g. "
                            "`for i in qgraph.serial(range(n)):` (loops in a @qgraph.func are serial already)", node)
        kind = role_of(obj)
        if kind == roles.KERNEL:
            raise src.error(f"a kernel cannot call another kernel ({obj.__name__}); make the shared "
                            "code a @qgraph.func", node)
        if kind == roles.FUNC:  # lang.flat.view specialises every call before lowering
            raise src.error(f"internal error: the call of {obj.__name__} was not specialised; please report "
                            "this", node)
        return None


class CallRewriter(ast.NodeTransformer):
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
            obj = self.src.resolve(node.func)
            if obj is lang.stop_gradient:  # the value itself: only the adjoint reads the mark
                return node.args[0]
            path = self.symbols.replacement(obj, self.src, node)
            if path is not None:
                node.func = dotted(path, node.func)
        return node


def dotted(path: str, at: ast.AST) -> ast.expr:
    """`a.b.c` as a Name/Attribute chain located at `at`."""
    parts = path.split(".")
    expr: ast.expr = ast.copy_location(ast.Name(parts[0], ast.Load()), at)
    for attr in parts[1:]:
        expr = ast.copy_location(ast.Attribute(expr, attr, ast.Load()), at)
    return expr


def lower_statements(src: KernelSource, stmts: list[ast.stmt], local_names: set[str],
                     symbols: Symbols, updates: ast.NodeTransformer | None = None) -> list[ast.stmt]:
    """Deep copies of `stmts` with qgraph builtins and funcs replaced by generated names.

    `updates` (an updates.UpdateRewriter) first rewrites a parallel task's element updates.
    """
    copies = lower_min_max(src.resolve, [ast_clone.clone(s) for s in stmts], local_names)
    if updates is not None:
        copies = [updates.visit(s) for s in copies]
    rewriter = CallRewriter(src, local_names, symbols)
    lowered = [rewriter.visit(s) for s in copies]
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


def lower_funcs(symbols: Symbols) -> list[tuple[ast.FunctionDef, object, KernelSource]]:
    """(FunctionDef, Func, source) of every @qgraph.func specialisation the kernel reaches: with
    weak typing, one per instance (lang.types.func_precision), each typed for its argument types."""
    defs = []
    for fdef, fn, fsrc in symbols.specialised:
        local_names = _func_locals(fdef)
        typed = [(fdef.name, fdef.body)]
        if symbols.func_precision is not None:
            typed = symbols.func_precision.defs(fdef.name)
        for name, body in typed:
            instance = ast_clone.clone(fdef)
            instance.name = name
            instance.body = lower_statements(fsrc, body, local_names, symbols)
            defs.append((instance, fn, fsrc))
    return defs


def _func_locals(fdef: ast.FunctionDef) -> set[str]:
    return {a.arg for a in fdef.args.args} | collect_names(fdef.body).stored


# --------------------------------------------------------------------------- AST helpers


def name_node(id_: str, at: ast.AST, store: bool = False) -> ast.Name:
    return ast.copy_location(ast.Name(id_, ast.Store() if store else ast.Load()), at)


def assign(target: str, value: ast.expr, at: ast.AST) -> ast.Assign:
    return ast.copy_location(ast.Assign([name_node(target, at, True)], value), at)


def call(fn: str, args: list[ast.expr], at: ast.AST) -> ast.Call:
    return ast.copy_location(ast.Call(name_node(fn, at), args, []), at)


def binop(left: ast.expr, op: ast.operator, right: ast.expr, at: ast.AST) -> ast.BinOp:
    return ast.copy_location(ast.BinOp(left, op, right), at)


def function_def(name: str, params: list[str], body: list[ast.stmt], lineno: int) -> ast.FunctionDef:
    args = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    fdef = ast.FunctionDef(name=name, args=args, body=body or [ast.Pass()], decorator_list=[],
                           returns=None, type_params=[])
    fdef.lineno = fdef.end_lineno = lineno
    fdef.col_offset = fdef.end_col_offset = 0
    return fix_lines(fdef)


def fix_lines(tree: ast.AST) -> ast.AST:
    """Fill missing positions and make every node's line range valid for compile()."""
    ast.fix_missing_locations(tree)
    for node in ast.walk(tree):
        if hasattr(node, "lineno"):
            if getattr(node, "end_lineno", None) is None or node.end_lineno < node.lineno:
                node.end_lineno = node.lineno
            if node.end_lineno == node.lineno and getattr(node, "end_col_offset", 0) < node.col_offset:
                node.end_col_offset = node.col_offset
    return tree


def module_of(defs: list[ast.stmt]) -> ast.Module:
    """Generated definitions as a module, line ranges made valid (run it with lang.generated)."""
    return fix_lines(ast.Module(body=defs, type_ignores=[]))


def task_locals(src: KernelSource, task: Task) -> set[str]:
    return set(src.param_names) | set(task.stored)


def zero_d_view(name: str) -> str:
    return f"_qg_0d_{name}"


def view_assignments(names, at: ast.AST) -> list[ast.stmt]:
    """`_qg_0d_x = x.reshape(1)` for each 0-d array parameter that needs a view."""
    out = []
    for name in sorted(names):
        reshape = ast.copy_location(ast.Attribute(name_node(name, at), "reshape", ast.Load()), at)
        out.append(assign(zero_d_view(name), ast.copy_location(
            ast.Call(reshape, [ast.copy_location(ast.Constant(1), at)], []), at), at))
    return out


def atomic_array(arg: ast.expr) -> ast.Name | None:
    """The array parameter an atomic's first argument updates: `x`, or `x` of `x.view(t)` (the
    integer view of a float min/max reduction's target, lang.cuda.reductions)."""
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "view":
        arg = arg.func.value
    return arg if isinstance(arg, ast.Name) else None


class ZeroDIndex(ast.NodeTransformer):
    """Inside a CPU parallel loop: `x[()]` -> `view[0]` and `atomic_*(x, (), v)` ->
    `atomic_*(view, 0, v)` for 0-d array parameters, `view` being `x.reshape(1)` (also
    through `x.view(t)`, see `atomic_array`).

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
            array = atomic_array(node.args[0])
            view = self._view(array, node.args[1]) if array is not None else None
            if view is not None:
                if node.args[0] is array:
                    node.args[0] = view
                else:  # x.view(t) -> view.view(t)
                    node.args[0].func.value = view
                node.args[1] = ast.copy_location(ast.Constant(0), node.args[1])
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        view = self._view(node.value, node.slice)
        if view is not None:
            node.value = view
            node.slice = ast.copy_location(ast.Constant(0), node.slice)
        return node
