"""A flattened task body in three-address form (lang.adjoint.ir), for its adjoint.

Every operation gets a name of its own, so the reverse sweep can refer to any value the
forward computation made. @qgraph.func helpers are inlined (their returns turned into one
exit; one with a custom adjoint stays a call, lang.adjoint.custom), `and`/`or` and
`x if c else y` become branches (so a guarded load stays guarded), and a load of an element
this task stored before is the stored value (`forwarded`): the adjoint runs after the task,
when the array holds what the task left there, so it cannot read such values back. A load
that may read what the task wrote at another index is an "unknown" value: fine unless the
gradient needs it (lang.adjoint.reverse says so then).
"""

from __future__ import annotations

import ast

from ..front import ast_clone
from ..front import builtins as lang
from ..front.parse import KernelSource
from .custom import custom_call
from .expressions import Expressions
from .ir import Body, Branch, CountedLoop, Jump, Let, Store, WhileLoop, names_in
from .source_facts import arrays_stored, constant, dump, jumps, one_exit, result_arity, structured_jumps


class ThreeAddress(Expressions):
    """Builds the three-address form of one task body (see the module docstring)."""

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
            result = self.helper(value)
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
                old = self.atom(ast_clone.clone(target))
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
        body = structured_jumps(node.body)
        made = self.loop_carried(body, line)
        var = self.fresh("k")
        count = self.pass_counter(line) if any(jumps(s) for s in body) else None
        carried = frozenset(self.carried[n] for n in made) | ({count} if count else set())
        loop = CountedLoop(var, start, stop, step, [], line, carried, count=count)
        self.env[node.target.id] = ast.Name(var, ast.Load())

        def passes() -> None:
            if count is not None:  # the passes the loop ran, its break included: the adjoint runs as many
                self.emit(Let(count, ast.BinOp(ast.Name(count, ast.Load()), ast.Add(), ast.Constant(1)), line))
            self.block(body)

        loop.body, _ = self.capture(passes, loop)
        for array in arrays_stored(body, self.arrays):
            self.forget(array)
        self.end_loop(made, before_env)
        self.emit(loop)

    def pass_counter(self, line: int) -> str:
        """A variable counting the passes of a loop that may break, as a loop-carried value."""
        count = self.fresh("n")
        self.emit(Let(count, ast.Constant(0), line, "copy"))
        self.body.carried[count] = "the count of its passes"
        return count

    def while_loop(self, node: ast.While, line: int) -> None:
        if node.orelse:
            raise self.error("while ... else", node)
        before_env = dict(self.env)
        source_body = structured_jumps(node.body)
        made = self.loop_carried(source_body, line)
        loop = WhileLoop([], ast.Constant(True), [], line, frozenset(self.carried[n] for n in made))
        test_body, test = self.capture(lambda: self.atom(node.test), loop)
        body, _ = self.capture(lambda: self.block(source_body), loop)
        loop.test_body, loop.test, loop.body = test_body, test, body
        for array in arrays_stored(source_body, self.arrays):
            self.forget(array)
        self.end_loop(made, before_env)
        self.emit(loop)

    # -- helpers inlined ---------------------------------------------------------------------

    def helper(self, node: ast.Call):
        """A @qgraph.func call: inlined, or kept a call where the user gave the helper's adjoint."""
        args = [self.atom(a) for a in node.args]
        custom = self.custom.of(node.func.id, self.error, node) if self.custom is not None else None
        if custom is not None:
            return custom_call(self, custom, node.func.id, args, node.lineno)
        return self.inline(self.funcs[node.func.id], args, node)

    def inline(self, fdef: ast.FunctionDef, args: list[ast.expr], at: ast.AST):
        """A @qgraph.func call, inlined: its result as an atom, or a tuple of atoms."""
        arity = result_arity(fdef)
        results = [self.fresh("r") for _ in range(max(arity, 1))]
        saved = self.env, self.carried
        self.env = {p.arg: a for p, a in zip(fdef.args.args, args)}
        self.carried = {}
        try:
            self.block(one_exit(ast_clone.clone(fdef.body), results, arity, self.error, fdef))
            missing = [r for r in results if r not in self.env]
            if missing:
                raise self.error(f"{fdef.name} does not return a value on every path", at)
            values = tuple(self.env[r] for r in results)
        finally:
            self.env, self.carried = saved
        return values if arity else values[0]


def three_address(src: KernelSource, body: list[ast.stmt], arrays: set[str], funcs: dict, prefix: str,
                  custom=None) -> Body:
    """`body` in three-address form; `custom`: the helpers with custom adjoints (lang.adjoint.custom)."""
    builder = ThreeAddress(src, arrays, funcs, prefix)
    builder.custom = custom
    builder.out = builder.body.stmts
    builder.block(structured_jumps(body))  # a parallel task's `continue` ends its iteration
    return builder.body


__all__ = ["three_address", "names_in"]
