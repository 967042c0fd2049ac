"""The adjoint of one task body in three-address form: recompute what is needed, then sweep back.

Activity first: a value is *active* when it is a float that depends on an element of an
array with a gradient and flows into a store or atomic on such an array. Only active values
get an adjoint (`_qg_d_<name>`), so an update like `x[i] += dt * v[i]` has an adjoint that
reads no primal value at all. The reverse sweep walks the statements backwards: an operation
adds its result's adjoint, times each partial derivative (lang.adjoint.rules), into its
active operands'; a load adds into the gradient array's element (`+=`, which lang.lower.updates
makes atomic or a reduction where threads can collide); a store reads and clears the
gradient of the element it overwrote; `+=` on an array passes the element's gradient on.
Branches are re-taken, counted loops run backwards, recomputing each pass the values that
do not depend on what the loop carries (a gradient that needs a carried value is an error
naming it). The values the sweep reads are recomputed first, from the arrays as the task
found them; `reads` names those arrays, so a tape can keep them when a later call
overwrites them.
"""

from __future__ import annotations

import ast

from ..types.weak_types import FLOATS, INT
from . import ir
from .custom import reverse_call
from .ir import Atomic, Body, Branch, CountedLoop, Jump, Let, Store, WhileLoop, names_in, range_call, render, walk
from .rules import MINUS_ONE, ONE, callee_name, partials


def adjoint_name(array: str) -> str:
    """The parameter holding the gradient of array parameter `array`."""
    return f"_qg_adj_{array}"


def _d(name: str) -> str:
    return f"_qg_d{name.removeprefix('_qg_')}"


def _name(n: str, store: bool = False) -> ast.Name:
    return ast.Name(n, ast.Store() if store else ast.Load())


def _element(array: str, index: tuple, store: bool = False) -> ast.Subscript:
    idx = index[0] if len(index) == 1 else ast.Tuple(list(index), ast.Load())
    return ast.Subscript(_name(adjoint_name(array)), idx, ast.Store() if store else ast.Load())


def _add(target: ast.expr, value: ast.expr, sub: bool = False) -> ast.AugAssign:
    return ast.AugAssign(target, ast.Sub() if sub else ast.Add(), value)


def _zero(name: str) -> ast.Assign:
    return ast.Assign([_name(name, True)], ast.Constant(0.0))


class Reverse:
    """The adjoint of one task body (see the module docstring)."""

    def __init__(self, src, body: Body, types: dict, grads: set[str], resolve, prefix: str,
                 parallel: tuple[str, ...] = ()) -> None:
        self.src = src
        self.parallel = parallel  # a parallel task's loop variables: its iterations must not read what others write
        self.body = body
        self.types = types  # name -> weak type (lang.types.weak_types)
        self.grads = grads  # arrays whose gradients the adjoint accumulates
        self.resolve = resolve
        self.prefix = prefix
        self.count = 0
        self.active = self._activity()
        # arrays whose values the adjoint reads -> whether the task may have overwritten an element read
        self.reads: dict[str, bool] = {}
        self.stores: dict[str, list] = {}
        for st in ir.walk(body.stmts):
            if isinstance(st, (Store, Atomic)):
                self.stores.setdefault(st.array, []).append(st.index)
        self.declared: set[str] = set()  # primal names recomputed inside blocks (declared up front)

    def error(self, message: str, line: int) -> Exception:
        return ir.cannot(self.src, message, line)

    def fresh(self) -> str:
        self.count += 1
        return f"_qg_{self.prefix}g{self.count}"

    # -- activity ----------------------------------------------------------------------------

    def _activity(self) -> set[str]:
        lets = [s for s in walk(self.body.stmts) if isinstance(s, Let)]
        # integers and bools carry no gradient; a value the weak types could not place (a call
        # they do not model, such as math.exp2) may be a float: it gets one, or its rule's error
        is_float = {t for let in lets for t in let.targets if self.types.get(t) != INT}
        varied: set[str] = set()
        changed = True
        while changed:
            changed = False
            for let in lets:
                if let.target in varied or not is_float & set(let.targets):
                    continue
                if (let.kind in ("load", "unknown") and let.array in self.grads) or \
                        (let.kind in ("op", "copy", "custom") and names_in(let.value) & varied):
                    varied |= is_float & set(let.targets)
                    changed = True
        useful = {n for s in walk(self.body.stmts) if isinstance(s, (Store, Atomic)) and s.array in self.grads
                  for n in names_in(s.value)}
        changed = True
        while changed:
            changed = False
            for let in lets:
                if useful & set(let.targets) and let.kind in ("op", "copy", "custom"):
                    new = (names_in(let.value) & varied) - useful
                    if new:
                        useful |= new
                        changed = True
        return varied & useful

    # -- the reverse sweep -------------------------------------------------------------------

    def sweep(self, stmts: list) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for s in reversed(stmts):
            out += self.statement(s)
        return out

    def statement(self, s) -> list[ast.stmt]:
        if isinstance(s, Let):
            return self.let(s)
        if isinstance(s, Store):
            return self.store(s)
        if isinstance(s, Atomic):
            return self.atomic(s)
        if isinstance(s, Branch):
            then, orelse = self.sweep(s.then), self.sweep(s.orelse)
            if not then and not orelse:
                return []
            return [ast.If(s.test, then or [ast.Pass()], orelse)]
        if isinstance(s, CountedLoop):
            return self.counted_loop(s)
        if isinstance(s, WhileLoop):
            if self.sweep(s.test_body) or self.sweep(s.body):
                raise self.error("a gradient through a while loop in a task (write it as a for loop over range)",
                                 s.line)
        return []

    def let(self, let: Let) -> list[ast.stmt]:
        if let.kind == "custom":  # the user's adjoint of a helper (lang.adjoint.custom)
            return reverse_call(let, self.active, _d, self.fresh)
        if let.target not in self.active:
            return []
        d = _name(_d(let.target))
        out: list[ast.stmt] = []
        if let.kind in ("load", "unknown"):
            if let.kind == "load":
                self._no_race(let)
            out.append(_add(_element(let.array, let.index, True), d))
        else:
            found = partials(let.value, _name(let.target), self.resolve)
            operands = [a for a in ast.walk(let.value) if isinstance(a, ast.Name) and a.id in self.active]
            if found is None:
                if operands:
                    raise self.error(f"`{callee_name(let.value)}` has no derivative rule", let.line)
                found = []
            for atom, partial in found:
                if not (isinstance(atom, ast.Name) and atom.id in self.active):
                    continue
                target = _name(_d(atom.id), True)
                if partial == ONE:
                    out.append(_add(target, d))
                elif partial == MINUS_ONE:
                    out.append(_add(target, d, sub=True))
                else:
                    out.append(_add(target, ast.BinOp(d, ast.Mult(), partial)))
        out.append(_zero(_d(let.target)))
        return out

    def store(self, s: Store) -> list[ast.stmt]:
        if s.array not in self.grads:
            return []
        value_active = isinstance(s.value, ast.Name) and s.value.id in self.active
        if s.op is not None:  # a += v: v's gradient is the element's; the element's stays
            if not value_active:
                return []
            return [_add(_name(_d(s.value.id), True), _element(s.array, s.index), isinstance(s.op, ast.Sub))]
        out: list[ast.stmt] = []
        if value_active:
            g = self.fresh()
            out += [ast.Assign([_name(g, True)], _element(s.array, s.index)),
                    _add(_name(_d(s.value.id), True), _name(g))]
            out.insert(1, ast.Assign([_element(s.array, s.index, True)], ast.Constant(0.0)))
        else:
            out.append(ast.Assign([_element(s.array, s.index, True)], ast.Constant(0.0)))
        return out

    def atomic(self, s: Atomic) -> list[ast.stmt]:
        if s.array not in self.grads or not (isinstance(s.value, ast.Name) and s.value.id in self.active):
            return []
        if s.name in ("add", "sub"):
            return [_add(_name(_d(s.value.id), True), _element(s.array, s.index), s.name == "sub")]
        raise self.error(f"a gradient through qgraph.atomic_{s.name} (only atomic_add and atomic_sub have one); "
                         "a value that only steers the loop (a convergence measure) carries none: pass "
                         f"qgraph.stop_gradient(value) to atomic_{s.name}", s.line)

    def counted_loop(self, loop: CountedLoop) -> list[ast.stmt]:
        body = self.sweep(loop.body)
        if not body:
            return []
        if not isinstance(loop.step, ast.Constant) or not isinstance(loop.step.value, int) or loop.step.value == 0:
            raise self.error("a gradient through a loop whose step is not a constant", loop.line)
        step = loop.step.value
        # what loops carry changes from pass to pass, except a variable made fresh in each pass
        # (an inner loop's accumulator set inside this one: its first Let is in the body)
        inside = {id(s) for s in walk(loop.body)}
        changing = {let.target for let in walk(loop.body) if isinstance(let, Let) and let.target in self.body.carried
                    and id(self.body.lets[let.target][0]) not in inside}
        recompute = self.recompute(loop.body, _free(body), changing, loop)
        trips, r = self.fresh(), self.fresh()
        if loop.count is not None:  # a loop that may break: the passes the forward pass counted
            count = _name(loop.count)
        elif step > 0:  # max(0, (stop - start + step - 1) // step)
            span = ast.BinOp(ast.BinOp(loop.stop, ast.Sub(), loop.start), ast.Add(), ast.Constant(step - 1))
            count = ast.BinOp(span, ast.FloorDiv(), ast.Constant(step))
        else:
            span = ast.BinOp(ast.BinOp(loop.start, ast.Sub(), loop.stop), ast.Add(), ast.Constant(-step - 1))
            count = ast.BinOp(span, ast.FloorDiv(), ast.Constant(-step))
        # var = start + (trips - 1 - r) * step: the passes in reverse order
        back = ast.BinOp(ast.BinOp(ast.BinOp(_name(trips), ast.Sub(), ast.Constant(1)), ast.Sub(), _name(r)),
                         ast.Mult(), ast.Constant(step))
        pass_body = [ast.Assign([_name(loop.var, True)], ast.BinOp(loop.start, ast.Add(), back))] + recompute + body
        return [ast.Assign([_name(trips, True)], count),
                ast.For(_name(r, True), range_call(ast.Constant(0), _name(trips), ast.Constant(1)), pass_body, [])]

    # -- what the sweep reads ----------------------------------------------------------------

    def recompute(self, stmts: list, names: set[str], forbidden: set[str], region) -> list[ast.stmt]:
        """The statements of `stmts` (the top level, or a loop's body) that compute `names`
        and what they depend on; an error if that includes a value a loop changes from pass to pass."""
        inside = {id(s) for s in walk(stmts)}
        lets = {n: [let for let in found if id(let) in inside] for n, found in self.body.lets.items()}
        need: set[str] = set()
        blocks: set[int] = set()
        todo = list(names)
        while todo:
            n = todo.pop()
            if n in need or not lets.get(n):
                continue
            if n in forbidden:
                source = self.body.carried.get(n, n)
                raise self.error(f"the gradient needs `{source}` from every pass of this loop (it changes from "
                                 "pass to pass); compute it in a separate loop or store it in an array",
                                 region.line)
            need.add(n)
            for let in lets[n]:
                if let.kind in ("unknown", "returned"):
                    raise self.error(f"the gradient needs {let.why}", let.line)
                if let.kind == "load":
                    self._no_race(let)
                    clobbered = any(_may_alias(let.index, index) for index in self.stores.get(let.array, ()))
                    self.reads[let.array] = self.reads.get(let.array, False) or clobbered
                todo += names_in(let.value)
                for b in let.blocks:
                    if id(b) in inside and id(b) not in blocks:
                        blocks.add(id(b))
                        todo += self._block_names(b)
                        for branch in _jump_branches(b):  # a loop recomputed takes its breaks as it did
                            if id(branch) not in blocks:
                                blocks.add(id(branch))
                                todo += names_in(branch.test)
        for n in need:
            if any(let.blocks and id(let.blocks[-1]) in inside for let in lets[n]):
                self.declared.add(n)
        # a pass of `region` recomputed in the reverse loop takes none of region's own jumps (its count did)
        return render(self._select(stmts, need, blocks, keep_jumps=region is None))

    def _no_race(self, load: Let) -> None:
        """A parallel task's load the gradient uses, of an array the task stores at another index:
        iterations read what others write, in an order neither the forward pass nor its adjoint fixes."""
        if not self.parallel:
            return
        if any(_other_iterations(load.index, index, self.parallel) for index in self.stores.get(load.array, ())):
            raise self.error(f"the task reads `{load.array}` at one index and writes it at another: in a parallel "
                             "loop, iterations would read what other iterations write (a race, in the forward pass "
                             "too); write the results into another array, or make the loop serial "
                             "(for ... in qgraph.serial(range(...)))", load.line)

    def _block_names(self, b) -> list[str]:
        if isinstance(b, Branch):
            return list(names_in(b.test))
        if isinstance(b, CountedLoop):
            return list(names_in(b.start) | names_in(b.stop) | names_in(b.step))
        if isinstance(b, WhileLoop):
            return list(names_in(b.test))
        return []

    def _select(self, stmts: list, need: set[str], blocks: set[int], keep_jumps: bool = True) -> list:
        """The statements of `stmts` computing `need`, in the blocks `blocks` (ids); `keep_jumps`:
        with the break statements of the loop `stmts` belongs to (those of loops inside always)."""
        out = []
        for s in stmts:
            if isinstance(s, Let) and need & set(s.targets):
                out.append(s)
            elif isinstance(s, Branch) and id(s) in blocks:
                out.append(Branch(s.test, self._select(s.then, need, blocks, keep_jumps),
                                  self._select(s.orelse, need, blocks, keep_jumps), s.line))
            elif isinstance(s, CountedLoop) and id(s) in blocks:
                out.append(CountedLoop(s.var, s.start, s.stop, s.step, self._select(s.body, need, blocks), s.line))
            elif isinstance(s, WhileLoop) and id(s) in blocks:
                out.append(WhileLoop(self._select(s.test_body, need, blocks), s.test,
                                     self._select(s.body, need, blocks), s.line))
            elif isinstance(s, Jump) and keep_jumps:
                out.append(s)
        return out


def _jump_branches(loop) -> list[Branch]:
    """The branches on the paths to the break statements of `loop` (those of loops inside excluded)."""
    if not isinstance(loop, (CountedLoop, WhileLoop)):
        return []
    found: dict[int, Branch] = {}
    for j in walk(loop.body):
        if isinstance(j, Jump):
            blocks = j.blocks[j.blocks.index(loop) + 1:] if loop in j.blocks else ()
            if not any(isinstance(b, (CountedLoop, WhileLoop)) for b in blocks):
                found.update((id(b), b) for b in blocks)
    return list(found.values())


def _free(code: list[ast.stmt], assigned: frozenset = frozenset()) -> set[str]:
    """Names `code` reads before assigning them (the values it needs from before it)."""
    free: set[str] = set()
    done = set(assigned)
    for stmt in code:
        if isinstance(stmt, ast.If):
            free |= _reads(stmt.test) - done
            free |= _free(stmt.body, frozenset(done)) | _free(stmt.orelse, frozenset(done))
            done |= _stores(stmt)
        elif isinstance(stmt, (ast.For, ast.While)):
            head = stmt.iter if isinstance(stmt, ast.For) else stmt.test
            free |= _reads(head) - done
            inner = done | (_stores(stmt.target) if isinstance(stmt, ast.For) else set())
            free |= _free(stmt.body, frozenset(inner))
            done |= _stores(stmt)
        else:
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AugAssign)) else stmt
            free |= _reads(value) - done
            if isinstance(stmt, ast.AugAssign):
                free |= _reads(stmt.target) - done
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if not isinstance(target, ast.Name):
                        free |= _reads(target) - done
            done |= _stores(stmt)
    return free


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _stores(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _other_iterations(a: tuple, b: tuple, loop_vars: tuple[str, ...]) -> bool:
    """Whether subscripts `a` and `b` in a parallel loop over `loop_vars` may name one element in two
    different iterations: not where each loop variable is the same position of both, nor where a
    position holds two different constants."""
    if not _may_alias(a, b):
        return False
    pinned = {x.id for x, y in zip(a, b) if isinstance(x, ast.Name) and isinstance(y, ast.Name) and x.id == y.id}
    return not set(loop_vars) <= pinned


def _may_alias(a: tuple, b: tuple) -> bool:
    """Whether two subscripts may name one element: not when a position holds two different constants."""
    return not any(isinstance(x, ast.Constant) and isinstance(y, ast.Constant) and x.value != y.value
                   for x, y in zip(a, b))


def adjoint_statements(src, body: Body, types: dict, grads: set[str], resolve, prefix: str,
                       parallel: tuple[str, ...] = ()) -> tuple[list, dict]:
    """(the adjoint task body's statements, the arrays whose values it reads: name -> whether
    the task itself may have overwritten what is read, so only their value before it will do)."""
    rev = Reverse(src, body, types, grads, resolve, prefix, parallel)
    sweep = rev.sweep(body.stmts)
    forward = rev.recompute(body.stmts, _free(sweep), set(), None)
    declare = []
    for n in sorted(rev.declared):
        t = types.get(n)
        if t in FLOATS or t == "w":
            declare.append(ast.Assign([_name(n, True)], ast.Constant(0.0)))
        elif t == "i":
            declare.append(ast.Assign([_name(n, True)], ast.Constant(0)))
    zeros = [_zero(_d(n)) for n in sorted(rev.active)]
    return declare + zeros + forward + sweep, rev.reads
