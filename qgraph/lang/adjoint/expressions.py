"""The expressions of a task body in three-address form (lang.adjoint.ir): each operation
emitted as a `Let` of its own, loads forwarded from the task's own stores where the index is
the same, `and`/`or` and `x if c else y` as branches, atomics as effects. The statements and
inlined helpers are lang.adjoint.three_address's.
"""

from __future__ import annotations

import ast
import copy

from ..front import builtins as lang
from ..front.parse import KernelSource
from .ir import Atomic, Body, Branch, Let, cannot
from .source_facts import dump, index_expr


class Expressions:
    """The expression half of the three-address builder: every operation a name of its own (see
    lang.adjoint.three_address, which adds statements and helpers)."""

    def __init__(self, src: KernelSource, arrays: set[str], funcs: dict[str, ast.FunctionDef], prefix: str) -> None:
        self.src = src
        self.arrays = arrays  # the array parameters (flat names)
        self.funcs = funcs  # @qgraph.func instances by generated name
        self.custom = None  # lang.adjoint.custom.CustomAdjoints: the helpers whose adjoints users give
        self.prefix = prefix
        self.count = 0
        self.env: dict[str, ast.expr] = {}  # a source local -> the atom holding its value now
        self.carried: dict[str, str] = {}  # a source local a loop carries -> its variable
        self.out: list = []
        self.blocks: tuple = ()
        self.body = Body([])
        self.memory: dict[tuple[str, str], ast.expr] = {}  # (array, index dump) -> the value stored there
        self.written: set[str] = set()  # arrays this task may have written at an unknown index

    # -- helpers -----------------------------------------------------------------------------

    def error(self, message: str, node) -> Exception:
        line = node if isinstance(node, int) else getattr(node, "lineno", None)
        return cannot(self.src, message, line)

    def fresh(self, hint: str = "a") -> str:
        self.count += 1
        return f"_qg_{self.prefix}{hint}{self.count}"

    def emit(self, s) -> None:
        s.blocks = self.blocks
        if isinstance(s, Let):
            for target in s.targets:
                self.body.lets.setdefault(target, []).append(s)
        self.out.append(s)

    def let(self, value: ast.expr, line: int, kind: str = "op", **extra) -> ast.Name:
        name = self.fresh()
        self.emit(Let(name, value, line, kind, **extra))
        return ast.Name(name, ast.Load())

    def capture(self, fn, block) -> tuple[list, object]:
        """Run `fn()` with statements going to a new list inside `block`: (the list, what fn returned)."""
        saved, saved_blocks = self.out, self.blocks
        self.out, self.blocks = [], self.blocks + (block,)
        try:
            result = fn()
            return self.out, result
        finally:
            self.out, self.blocks = saved, saved_blocks

    # -- expressions -------------------------------------------------------------------------

    def atom(self, node: ast.expr) -> ast.expr:
        """`node`'s value as a Name or a constant expression, with its operations emitted."""
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant):
            return node
        if isinstance(node, ast.Name):
            return copy.copy(self.env.get(node.id, node))
        if isinstance(node, ast.Attribute):  # x.shape, math.pi: no local, no element
            return node
        if isinstance(node, ast.Subscript):
            return self.subscript(node, line)
        if isinstance(node, ast.BinOp):
            return self.let(ast.BinOp(self.atom(node.left), node.op, self.atom(node.right)), line)
        if isinstance(node, ast.UnaryOp):
            return self.let(ast.UnaryOp(node.op, self.atom(node.operand)), line)
        if isinstance(node, ast.Compare):
            return self.let(ast.Compare(self.atom(node.left), node.ops, [self.atom(c) for c in node.comparators]),
                            line)
        if isinstance(node, ast.BoolOp):
            return self.bool_op(node, line)
        if isinstance(node, ast.IfExp):
            return self.choice(self.atom(node.test), node.body, node.orelse, line)
        if isinstance(node, ast.Call):
            return self.call(node, line)
        raise self.error(f"`{ast.unparse(node)}` ({type(node).__name__})", node)

    def array_of(self, node: ast.expr) -> str | None:
        """The array parameter `node` names (a helper's parameter names its argument)."""
        if isinstance(node, ast.Name):
            found = self.env.get(node.id, node)
            if isinstance(found, ast.Name) and found.id in self.arrays:
                return found.id
        return None

    def subscript(self, node: ast.Subscript, line: int) -> ast.expr:
        array = self.array_of(node.value)
        if array is None:
            return node  # x.shape[0]
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return self.load(array, tuple(self.atom(p) for p in parts), line, ast.unparse(node))

    def load(self, array: str, index: tuple, line: int, text: str) -> ast.expr:
        """The value of `array[index]` (atoms) here: what the task stored there, else a load."""
        key = (array, dump(index))
        if key in self.memory:
            return self.memory[key]
        value = ast.Subscript(ast.Name(array, ast.Load()), index_expr(index), ast.Load())
        if array in self.written:
            why = f"`{text}`, read after this task wrote `{array}` (it cannot be read back; split the task or keep " \
                  "the value in a local)"
            return self.let(value, line, "unknown", array=array, index=index, why=why)
        return self.let(value, line, "load", array=array, index=index)

    def bool_op(self, node: ast.BoolOp, line: int) -> ast.expr:
        acc = self.atom(node.values[0])
        for value in node.values[1:]:
            test = acc if isinstance(node.op, ast.And) else self.let(ast.UnaryOp(ast.Not(), acc), line)
            acc = self.choice(test, value, acc, line, keep_else=True)
        return acc

    def choice(self, test: ast.expr, then: ast.expr, orelse: ast.expr, line: int, keep_else: bool = False) -> ast.Name:
        """`then if test else orelse` as a branch assigning one merge name (`orelse` an atom with keep_else)."""
        merged = self.fresh("m")
        branch = Branch(test, [], [], line)
        for side, value, keep in ((branch.then, then, False), (branch.orelse, orelse, keep_else)):
            stmts, atom = self.capture(lambda v=value, k=keep: v if k else self.atom(v), branch)
            stmts.append(Let(merged, atom, line, "copy", blocks=self.blocks + (branch,)))
            self.body.lets.setdefault(merged, []).append(stmts[-1])
            side.extend(stmts)
        self.emit(branch)
        return ast.Name(merged, ast.Load())

    def call(self, node: ast.Call, line: int) -> ast.expr:
        if isinstance(node.func, ast.Name) and node.func.id in self.funcs:
            result = self.helper(node)
            if isinstance(result, tuple):
                raise self.error("a helper's tuple result used as one value", node)
            return result
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(f"`{ast.unparse(node)}`: keyword or starred arguments", node)
        fn = self.resolve(node.func)
        if fn in lang.ATOMICS.values():
            return self.atomic(fn.__name__.removeprefix("atomic_"), node, line)
        if fn is lang.stop_gradient:  # its value, recomputable, but never varied: no gradient flows through
            return self.let(self.atom(node.args[0]), line, "stopped")
        if fn in lang.RANDOM.values():
            raise self.error("random draws (qgraph.random, randn, randint) in a differentiated task", node)
        args = [self.atom(a) for a in node.args]
        if fn in (min, max) and len(args) > 2:  # pairwise from the left, as Python
            acc = args[0]
            for arg in args[1:]:
                acc = self.let(ast.Call(node.func, [acc, arg], []), line)
            return acc
        return self.let(ast.Call(node.func, args, []), line)

    def resolve(self, func: ast.expr) -> object:
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and (root.id in self.env or root.id in self.arrays):
            return None  # a local or an array: no callee of the language
        return self.src.resolve(func)  # UNRESOLVED: judged by the rules (lang.adjoint.rules), not here

    def atomic(self, name: str, node: ast.Call, line: int) -> ast.expr:
        target, index, value = node.args
        array = self.array_of(target)
        if array is None:
            raise self.error(f"`{ast.unparse(node)}`: the target is not an array parameter", node)
        target = ast.Name(array, ast.Load())
        parts = index.elts if isinstance(index, ast.Tuple) else [index]
        index_atoms = tuple(self.atom(p) for p in parts)
        atom = self.atom(value)
        self.emit(Atomic(name, target.id, index_atoms, atom, line))
        self.forget(target.id)
        old = ast.Subscript(ast.Name(target.id, ast.Load()), index_expr(index_atoms), ast.Load())
        return self.let(old, line, "returned", index=index_atoms, why=f"the value qgraph.atomic_{name} returned")
