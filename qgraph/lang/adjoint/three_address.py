"""A flattened task body in three-address form (lang.adjoint.ir), for its adjoint.

Every operation gets a name of its own, so the reverse sweep can refer to any value the
forward computation made. @qgraph.func helpers are inlined (their returns turned into one
exit), `and`/`or` and `x if c else y` become branches (so a guarded load stays guarded),
and a load of an element this task stored before is the stored value (`forwarded`): the
adjoint runs after the task, when the array holds what the task left there, so it cannot
read such values back. A load that may read what the task wrote at another index is an
"unknown" value: fine unless the gradient needs it (lang.adjoint.reverse says so then).
"""

from __future__ import annotations

import ast
import copy

from ..front import builtins as lang
from ..front.parse import KernelSource
from .ir import Atomic, Body, Branch, CountedLoop, Jump, Let, Store, WhileLoop, cannot, names_in
from .source_facts import arrays_stored, constant, dump, index_expr, one_exit, result_arity


class ThreeAddress:
    """Builds the three-address form of one task body (see the module docstring)."""

    def __init__(self, src: KernelSource, arrays: set[str], funcs: dict[str, ast.FunctionDef], prefix: str) -> None:
        self.src = src
        self.arrays = arrays  # the array parameters (flat names)
        self.funcs = funcs  # @qgraph.func instances by generated name
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
            self.body.lets.setdefault(s.target, []).append(s)
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
            result = self.inline(self.funcs[node.func.id], [self.atom(a) for a in node.args], node)
            if isinstance(result, tuple):
                raise self.error("a helper's tuple result used as one value", node)
            return result
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.error(f"`{ast.unparse(node)}`: keyword or starred arguments", node)
        fn = self.resolve(node.func)
        if fn in lang.ATOMICS.values():
            return self.atomic(fn.__name__.removeprefix("atomic_"), node, line)
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

    # -- statements --------------------------------------------------------------------------

    def block(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, node: ast.stmt) -> None:
        line = node.lineno
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                return
            value = self.tuple_value(node.value) if isinstance(targets[0], ast.Tuple) else self.atom(node.value)
            for target in targets:
                self.assign(target, value, line)
        elif isinstance(node, ast.AugAssign):
            self.aug_assign(node, line)
        elif isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Call):
                self.atom(node.value)  # an atomic's effect, a helper's; a value nobody reads is dropped later
        elif isinstance(node, ast.If):
            self.branch(node, line)
        elif isinstance(node, ast.For):
            self.counted_loop(node, line)
        elif isinstance(node, ast.While):
            self.while_loop(node, line)
        elif isinstance(node, (ast.Break, ast.Continue)):
            self.emit(Jump("break" if isinstance(node, ast.Break) else "continue", line))
        elif not isinstance(node, ast.Pass):
            raise self.error(f"the statement `{ast.unparse(node).splitlines()[0]}`", node)

    def tuple_value(self, value: ast.expr) -> tuple:
        if isinstance(value, ast.Tuple):
            return tuple(self.atom(v) for v in value.elts)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in self.funcs:
            result = self.inline(self.funcs[value.func.id], [self.atom(a) for a in value.args], value)
            if isinstance(result, tuple):
                return result
        raise self.error(f"unpacking `{ast.unparse(value)}`", value)

    def assign(self, target: ast.expr, value, line: int) -> None:
        if isinstance(target, ast.Tuple):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.error("unpacking a value of another length", line)
            for t, v in zip(target.elts, value):
                self.assign(t, v, line)
        elif isinstance(target, ast.Name):
            self.set_local(target.id, value, line)
        elif isinstance(target, ast.Subscript) and self.array_of(target.value) is not None:
            self.store(target, value, None, line)
        else:
            raise self.error(f"assigning to `{ast.unparse(target)}`", line)

    def set_local(self, name: str, value: ast.expr, line: int) -> None:
        if name in self.carried:
            self.emit(Let(self.carried[name], value, line, "copy"))
        else:
            self.env[name] = self.let(value, line, "copy")

    def aug_assign(self, node: ast.AugAssign, line: int) -> None:
        target = node.target
        if isinstance(target, ast.Name):
            value = self.atom(node.value)
            self.set_local(target.id, self.let(ast.BinOp(self.atom(target), node.op, value), line), line)
        elif isinstance(target, ast.Subscript) and self.array_of(target.value) is not None:
            if isinstance(node.op, (ast.Add, ast.Sub)):
                self.store(target, self.atom(node.value), node.op, line)
            else:  # a *= v on a thread's own element (lang.lower.updates rejects shared ones): load, multiply, store
                old = self.atom(copy.deepcopy(target))
                self.store(target, self.let(ast.BinOp(old, node.op, self.atom(node.value)), line), None, line)
        else:
            raise self.error(f"updating `{ast.unparse(target)}`", node)

    def store(self, target: ast.Subscript, value: ast.expr, op, line: int) -> None:
        array = self.array_of(target.value)
        parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        index = tuple(self.atom(p) for p in parts)
        key = (array, dump(index))
        # a += v: the element's old value, so a later read of a[index] is known (old + v)
        old = self.load(array, index, line, ast.unparse(target)) if op is not None else None
        self.emit(Store(array, index, value, op, line))
        self.forget(array)
        self.memory[key] = value if op is None else self.let(ast.BinOp(old, op, value), line)

    def forget(self, array: str) -> None:
        """Stores to `array` at one index: what is known of its other elements no longer holds."""
        for key in [k for k in self.memory if k[0] == array]:
            del self.memory[key]
        self.written.add(array)

    def branch(self, node: ast.If, line: int) -> None:
        test = self.atom(node.test)
        branch = Branch(test, [], [], line)
        before_env, before_memory = dict(self.env), dict(self.memory)
        ends = []
        for side, stmts in ((branch.then, node.body), (branch.orelse, node.orelse)):
            self.env, self.memory = dict(before_env), dict(before_memory)
            out, _ = self.capture(lambda s=stmts: self.block(s), branch)
            side.extend(out)
            ends.append((self.env, self.memory))
        (then_env, then_memory), (else_env, else_memory) = ends
        # a local, or an array element the branches stored, known on both sides: one merge name
        self.env = {k: self.merge(branch, then_env[k], else_env[k], line) for k in then_env.keys() & else_env.keys()}
        self.memory = {k: self.merge(branch, then_memory[k], else_memory[k], line)
                       for k in then_memory.keys() & else_memory.keys()}
        self.emit(branch)

    def merge(self, branch: Branch, a: ast.expr, b: ast.expr, line: int) -> ast.expr:
        """`a` (the value at the end of the then side) or `b` (else), as one atom after `branch`."""
        if dump((a,)) == dump((b,)):
            return a
        merged = self.fresh("m")
        for side, value in ((branch.then, a), (branch.orelse, b)):
            side.append(Let(merged, value, line, "copy", blocks=self.blocks + (branch,)))
            self.body.lets.setdefault(merged, []).append(side[-1])
        return ast.Name(merged, ast.Load())

    def loop_carried(self, body: list[ast.stmt], line: int) -> frozenset[str]:
        """Locals the loop body assigns that exist before it: updated in place, from pass to pass."""
        assigned = set()
        for n in (n for s in body for n in ast.walk(s)):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                assigned.add(n.id)
        made = set()
        for name in sorted(assigned & self.env.keys()):
            if name not in self.carried:
                variable = self.fresh("c")
                self.emit(Let(variable, self.env[name], line, "copy"))
                self.body.lets.setdefault(variable, [])
                self.carried[name] = variable
                self.env[name] = ast.Name(variable, ast.Load())
                self.body.carried[variable] = name
                made.add(name)
        for array in arrays_stored(body, self.arrays):  # an earlier pass may have written anything there
            self.forget(array)
        return frozenset(made)

    def end_loop(self, made: frozenset[str], before_env: dict) -> None:
        for name in made:
            del self.carried[name]
        self.env = {name: value for name, value in self.env.items() if name in before_env}

    def counted_loop(self, node: ast.For, line: int) -> None:
        if node.orelse:
            raise self.error("for ... else", node)
        it = node.iter
        if not (isinstance(it, ast.Call) and self.resolve(it.func) in (range, lang.serial)) \
                or not isinstance(node.target, ast.Name):
            raise self.error(f"the loop `for {ast.unparse(node.target)} in {ast.unparse(it)}` (use range)", node)
        if self.resolve(it.func) is lang.serial:
            it = it.args[0]
        args = [constant(a) or self.atom(a) for a in it.args]  # range(n - 1, -1, -1): a constant step
        start, stop, step = (ast.Constant(0), args[0], ast.Constant(1)) if len(args) == 1 else \
            (args[0], args[1], args[2] if len(args) == 3 else ast.Constant(1))
        before_env = dict(self.env)
        made = self.loop_carried(node.body, line)
        var = self.fresh("k")
        loop = CountedLoop(var, start, stop, step, [], line, frozenset(self.carried[n] for n in made))
        self.env[node.target.id] = ast.Name(var, ast.Load())
        out, _ = self.capture(lambda: self.block(node.body), loop)
        loop.body = out
        for array in arrays_stored(node.body, self.arrays):
            self.forget(array)
        self.end_loop(made, before_env)
        self.emit(loop)

    def while_loop(self, node: ast.While, line: int) -> None:
        if node.orelse:
            raise self.error("while ... else", node)
        before_env = dict(self.env)
        made = self.loop_carried(node.body, line)
        loop = WhileLoop([], ast.Constant(True), [], line, frozenset(self.carried[n] for n in made))
        test_body, test = self.capture(lambda: self.atom(node.test), loop)
        body, _ = self.capture(lambda: self.block(node.body), loop)
        loop.test_body, loop.test, loop.body = test_body, test, body
        for array in arrays_stored(node.body, self.arrays):
            self.forget(array)
        self.end_loop(made, before_env)
        self.emit(loop)

    # -- helpers inlined ---------------------------------------------------------------------

    def inline(self, fdef: ast.FunctionDef, args: list[ast.expr], at: ast.AST):
        """A @qgraph.func call, inlined: its result as an atom, or a tuple of atoms."""
        arity = result_arity(fdef)
        results = [self.fresh("r") for _ in range(max(arity, 1))]
        saved = self.env, self.carried
        self.env = {p.arg: a for p, a in zip(fdef.args.args, args)}
        self.carried = {}
        try:
            self.block(one_exit(copy.deepcopy(fdef.body), results, arity, self.error, fdef))
            missing = [r for r in results if r not in self.env]
            if missing:
                raise self.error(f"{fdef.name} does not return a value on every path", at)
            values = tuple(self.env[r] for r in results)
        finally:
            self.env, self.carried = saved
        return values if arity else values[0]


def three_address(src: KernelSource, body: list[ast.stmt], arrays: set[str], funcs: dict, prefix: str) -> Body:
    builder = ThreeAddress(src, arrays, funcs, prefix)
    builder.out = builder.body.stmts
    builder.block(body)
    return builder.body


__all__ = ["three_address", "names_in"]
