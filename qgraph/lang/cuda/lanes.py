"""Lanes: a small parallel loop whose body sums over an inner loop runs that loop on several threads.

An all-pairs force loop over N = 2048 bodies is 2048 threads: 16 blocks on a GPU of 132 SMs, each
thread 2048 dependent passes long, so the kernel takes the time of one warp's issue of all its
passes. When the parallel loop is that small, a 1-D task of the form

    for i in range(n):                  # the parallel loop
        <pre: values of i, no effects>  # run by every lane of i
        acc = 0.0                       # accumulators start at zero
        for j in range(a, b):           # the one inner loop
            <no effects; acc += ... / acc -= ...>
        <post: stores, anything>        # run by lane 0 of i

runs S lanes per i (S a power of two up to 32, the largest with n * S <= SPLIT_THREADS): lane l
takes j = a + l, a + l + S, ... and the lanes' partial sums meet by a shuffle tree within their warp
before lane 0 runs the rest. S is computed from the iteration count alike on the host (the grid,
`lanes_expr`) and in the kernel, so a large n runs S = 1: one lane, the loop as written. The sums
add in another order than the serial loop's (the CPU backend's): results agree within rounding.
"""

from __future__ import annotations

import ast

from ..front import ast_clone
from ..front.names import collect_names
from ..lower.lowering import assign, binop, call, dotted, name_node
from .loops import known_nonnegative, thread_index

SPLIT_THREADS = 1 << 17  # threads a split loop aims for: 8 blocks of 128 per SM on a 132-SM GPU
MAX_LANES = 32  # a warp: the lanes of one i share it, so their shuffles need no shared memory
_LOG2_MAX = MAX_LANES.bit_length() - 1


def lanes_expr(count: str) -> str:
    """Python expression of S for an iteration count expression (the host's half of the rule)."""
    return f"min({MAX_LANES}, 1 << max(0, ({SPLIT_THREADS} // max({count}, 1)).bit_length() - 1))"


def lanes_of(count: int) -> int:
    """S for `count` iterations (what lanes_expr and the kernel compute)."""
    return min(MAX_LANES, 1 << max(0, (SPLIT_THREADS // max(count, 1)).bit_length() - 1))


def _zero(value: ast.expr) -> bool:
    """A literal zero, or a cast of one (`_qg_f32(0.0)`, as weak typing writes `fx = 0.0`)."""
    if isinstance(value, ast.Constant):
        return type(value.value) in (int, float) and value.value == 0
    return isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords and _zero(value.args[0])


def _stored_names(node: ast.AST) -> set[str]:
    return collect_names([node]).stored


def _loaded_names(node: ast.AST) -> set[str]:
    """Names `node` reads (an augmented assignment reads its target)."""
    return set(collect_names([node]).loaded)


class _Effects(ast.NodeVisitor):
    """Whether statements may do anything but compute locals: a store into an array, a call for its
    effect, an atomic, a random draw, a report, a call handed an array (a helper may store into it),
    a `break` (or a `return`, unless `returns`: the pre part's `continue` of the parallel loop)."""

    def __init__(self, arrays: set[str], returns: bool) -> None:
        self.arrays, self.returns = arrays, returns
        self.found = False

    def visit_Expr(self, node: ast.Expr) -> None:
        self.found = True

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Store):
            self.found = True
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = ast.unparse(node.func)
        if "atomic" in name or "rand" in name or "report" in name or name.startswith("_qg_st") or \
                any(isinstance(a, ast.Name) and a.id in self.arrays for a in node.args):
            self.found = True
        self.generic_visit(node)

    def visit_Break(self, node: ast.Break) -> None:
        self.found = True

    def visit_Return(self, node: ast.Return) -> None:
        self.found = self.found or not self.returns

    visit_Global = visit_Nonlocal = visit_Break


def _has_effects(stmts: list[ast.stmt], arrays: set[str], returns: bool = False) -> bool:
    finder = _Effects(arrays, returns)
    for s in stmts:
        finder.visit(s)
    return finder.found


def _accumulation(stmt: ast.stmt) -> tuple[str, ast.operator, ast.expr] | None:
    """(name, + or -, the added value) of `acc += e`, `acc -= e` or `acc = acc + e` / `acc - e`."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and \
            isinstance(stmt.op, (ast.Add, ast.Sub)):
        return stmt.target.id, stmt.op, stmt.value
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) and \
            isinstance(stmt.value, ast.BinOp) and isinstance(stmt.value.op, (ast.Add, ast.Sub)) and \
            isinstance(stmt.value.left, ast.Name) and stmt.value.left.id == stmt.targets[0].id:
        return stmt.targets[0].id, stmt.value.op, stmt.value.right
    return None


def _walk_statements(stmts: list[ast.stmt]):
    for s in stmts:
        yield s
        for field in ("body", "orelse"):
            yield from _walk_statements(getattr(s, field, []) or [])


def _reads_before_writes(stmts: list[ast.stmt], watched: set[str], defined: set[str]) -> bool:
    """Whether a name of `watched` may be read in an iteration before this iteration stores it (a
    value carried from the previous iteration, which another lane would not have)."""
    for s in stmts:
        if isinstance(s, ast.If):
            if _loaded_names(s.test) & (watched - defined):
                return True
            then, other = set(defined), set(defined)
            if _reads_before_writes(s.body, watched, then) or _reads_before_writes(s.orelse, watched, other):
                return True
            defined |= then & other
            continue
        if isinstance(s, (ast.For, ast.While)):
            inner = set(defined)
            head = s.iter if isinstance(s, ast.For) else s.test
            if _loaded_names(head) & (watched - defined) or _reads_before_writes(s.body, watched, inner):
                return True
            continue
        value = s.value if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)) else s
        if _loaded_names(value) & (watched - defined):
            return True
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id in watched - defined:
            return True
        defined |= _stored_names(s)
    return False


def _promoted(loop_body: list[ast.stmt], arrays: set[str], j: str, at: ast.AST):
    """Taichi's spelling `force[i] += f` in the inner loop: an element updated by `+=`/`-=` at an index
    the loop does not change, its array named nowhere else in the loop, becomes an accumulator
    (`_qg_pa<k>`, zero of the element type) added into the element after the loop. (a copy of the
    loop's body, the accumulators' zero statements, the elements' updates) or None: none such."""
    varying = _stored_names(ast.Module(loop_body, [])) | {j}
    updates = [s for s in _walk_statements(loop_body)
               if isinstance(s, ast.AugAssign) and isinstance(s.op, (ast.Add, ast.Sub))
               and isinstance(s.target, ast.Subscript) and isinstance(s.target.value, ast.Name)
               and s.target.value.id in arrays and not _loaded_names(s.target.slice) & varying]
    named = {id(s.target.value) for s in updates}
    elsewhere = {n.id for n in ast.walk(ast.Module(loop_body, [])) if isinstance(n, ast.Name) and id(n) not in named}
    updates = [s for s in updates if s.target.value.id not in elsewhere]
    if not updates:
        return None
    names: dict[str, str] = {}  # the element's text -> its accumulator
    for s in updates:
        names.setdefault(ast.unparse(s.target), f"_qg_pa{len(names)}")
    copied = ast_clone.clone(loop_body)  # rewritten there: the task keeps its body if it stays one lane
    pairs = zip(ast.walk(ast.Module(loop_body, [])), ast.walk(ast.Module(copied, [])))
    picked = {id(s) for s in updates}
    chosen = {id(c) for o, c in pairs if id(o) in picked}

    class Promote(ast.NodeTransformer):
        def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
            if id(node) not in chosen:
                return node
            acc = names[ast.unparse(node.target)]
            return ast.copy_location(ast.AugAssign(name_node(acc, node, True), node.op, node.value), node)

    promote = Promote()
    body = [promote.visit(s) for s in copied]
    firsts = {}
    for s in updates:
        firsts.setdefault(names[ast.unparse(s.target)], s.target)
    zeros = [assign(acc, ast.copy_location(ast.Call(name_node(f"_qg_dt_{t.value.id}", at), [ast.Constant(0)], []),
                                           at), at) for acc, t in firsts.items()]
    adds = [ast.copy_location(ast.AugAssign(ast.copy_location(ast.Subscript(
        name_node(t.value.id, at), t.slice, ast.Store()), at), ast.Add(), name_node(acc, at)), at)
        for acc, t in firsts.items()]
    return body, zeros, adds


def split_inner_loop(body: list[ast.stmt], at: ast.AST, is_range, arrays: set[str]) -> list[ast.stmt] | None:
    """The lowered body of a 1-D parallel task with its one inner loop run on `_qg_S` lanes (the
    kernel's prologue, `lane_prologue`, sets `_qg_lane` and `_qg_S`), or None where the body has not
    the form above (it then runs as written)."""
    loops = [k for k, s in enumerate(body) if isinstance(s, (ast.For, ast.While))]
    if len(loops) != 1 or not isinstance(body[loops[0]], ast.For):
        return None
    k = loops[0]
    pre, loop, post = body[:k], body[k], body[k + 1:]
    it = loop.iter
    if loop.orelse or not isinstance(loop.target, ast.Name) or not isinstance(it, ast.Call) or it.keywords \
            or not 1 <= len(it.args) <= 3 or not is_range(it.func) or any(isinstance(a, ast.Starred) for a in it.args):
        return None
    if len(it.args) == 3 and not (isinstance(it.args[2], ast.Constant) and it.args[2].value == 1):
        return None
    if any(isinstance(s, (ast.For, ast.While)) for s in _walk_statements(pre)):
        return None
    j = loop.target.id
    loop_body, adds = loop.body, []
    promoted = _promoted(loop.body, arrays, j, at)
    if promoted is not None:
        loop_body, zeros, adds = promoted
        pre = pre + zeros
    if _has_effects(pre, arrays, returns=True) or _has_effects(loop_body, arrays):
        return None
    # accumulators: zeroed last in pre, then only accumulated in the loop
    zeroed: dict[str, bool] = {}  # a zero, or a copy of one (a vector's components: `acc__0 = _qg_v2`)
    for s in pre:
        single = isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
        for name in _stored_names(s):
            copied = isinstance(s.value, ast.Name) and zeroed.get(s.value.id, False)
            zeroed[name] = single and (_zero(s.value) or copied)
    stored = set()
    accumulated: dict[str, list[ast.stmt]] = {}
    for s in _walk_statements(loop_body):
        if isinstance(s, (ast.If, ast.For, ast.While)):
            stored |= _stored_names(s.target) if isinstance(s, ast.For) else set()
            continue
        found = _accumulation(s)
        if found is not None and zeroed.get(found[0]) and found[0] not in _loaded_names(found[2]):
            accumulated.setdefault(found[0], []).append(s)
        else:
            stored |= _stored_names(s)
    accumulators = set(accumulated) - stored
    if not accumulators or accumulators != set(accumulated):
        return None
    # an accumulator is read only by its own updates; the loop's other names carry nothing between passes
    updates = {id(s) for ss in accumulated.values() for s in ss}
    for s in _walk_statements(loop_body):
        if id(s) in updates:
            read = _loaded_names(_accumulation(s)[2])
        elif isinstance(s, (ast.If, ast.While)):
            read = _loaded_names(s.test)
        elif isinstance(s, ast.For):
            read = _loaded_names(s.iter)
        else:
            read = _loaded_names(s)
        if read & accumulators:
            return None
    if _reads_before_writes(loop_body, stored - {j}, set()):
        return None
    if _loaded_names(ast.Module(post, [])) & (stored | {j}):  # a lane's last pass: not the loop's
        return None
    # the lanes' loop: j = a + lane, a + lane + S, ... (counted, as lang.cuda.loops.CountedLoops writes loops)
    start = it.args[0] if len(it.args) >= 2 else ast.copy_location(ast.Constant(0), at)
    stop = it.args[1] if len(it.args) >= 2 else it.args[0]
    counter, end = "_qg_jl", "_qg_el"
    lanes_loop = [assign(counter, call("_qg_i64", [binop(start, ast.Add(), name_node("_qg_lane", at), at)], at), at),
                  assign(end, call("_qg_i64", [stop], at), at),
                  ast.copy_location(ast.While(
                      ast.copy_location(ast.Compare(name_node(counter, at), [ast.Lt()], [name_node(end, at)]), at),
                      [assign(j, name_node(counter, at) if not _nonnegative_literal(start)
                              else known_nonnegative(name_node(counter, at), at), at),
                       ast.copy_location(ast.AugAssign(name_node(counter, at, True), ast.Add(),
                                                       name_node("_qg_S", at)), at)] + loop_body, []), at)]
    # the shuffle tree: lane 0 of each group of S ends with the group's sum
    tree = [assign("_qg_o", binop(name_node("_qg_S", at), ast.RShift(), ast.Constant(1), at), at)]
    shuffle = dotted("_qg_cuda.shfl_down_sync", at)
    combine = [assign(acc, binop(name_node(acc, at), ast.Add(), ast.copy_location(ast.Call(shuffle, [
        name_node("_qg_mask", at), name_node(acc, at), name_node("_qg_o", at)], []), at), at), at)
        for acc in sorted(accumulators)]
    combine.append(assign("_qg_o", binop(name_node("_qg_o", at), ast.RShift(), ast.Constant(1), at), at))
    tree.append(ast.copy_location(ast.While(
        ast.copy_location(ast.Compare(name_node("_qg_o", at), [ast.Gt()], [ast.Constant(0)]), at), combine, []), at))
    post = adds + post
    last = [ast.copy_location(ast.If(
        ast.copy_location(ast.Compare(name_node("_qg_lane", at), [ast.Eq()], [ast.Constant(0)]), at),
        post, []), at)] if post else []
    return pre + lanes_loop + tree + last


def _nonnegative_literal(start: ast.expr) -> bool:
    """A loop start whose lanes' counters (start + lane, stepping by the lane count) never go negative."""
    return isinstance(start, ast.Constant) and type(start.value) is int and start.value >= 0


def lane_prologue(at: ast.AST) -> list[ast.stmt]:
    """The split task's first statements: `_qg_lg` (log2 S) from the count `_qg_n` as lanes_of
    computes it (n <= SPLIT_THREADS >> k: no division), the thread's lane, its iteration `_qg_t`,
    and the shuffle mask of its group of lanes."""
    stmts = [assign("_qg_t0", thread_index(at), at), assign("_qg_lg", ast.Constant(0), at)]
    for k in range(1, _LOG2_MAX + 1):
        stmts.append(ast.copy_location(ast.If(
            ast.copy_location(ast.Compare(name_node("_qg_n", at), [ast.LtE()], [ast.Constant(SPLIT_THREADS >> k)]),
                              at), [assign("_qg_lg", ast.Constant(k), at)], []), at))
    stmts += [assign("_qg_S", binop(ast.Constant(1), ast.LShift(), name_node("_qg_lg", at), at), at),
              assign("_qg_lane", binop(name_node("_qg_t0", at), ast.BitAnd(),
                                       binop(name_node("_qg_S", at), ast.Sub(), ast.Constant(1), at), at), at),
              assign("_qg_t", binop(name_node("_qg_t0", at), ast.RShift(), name_node("_qg_lg", at), at), at)]
    # the group's lanes within the warp: S bits from the group's first lane
    first = binop(binop(name_node("_qg_t0", at), ast.BitAnd(), ast.Constant(31), at), ast.Sub(),
                  name_node("_qg_lane", at), at)
    stmts.append(assign("_qg_mask", binop(binop(binop(ast.Constant(1), ast.LShift(), name_node("_qg_S", at), at),
                                                ast.Sub(), ast.Constant(1), at), ast.LShift(), first, at), at))
    return [ast.fix_missing_locations(ast.copy_location(s, at)) for s in stmts]
