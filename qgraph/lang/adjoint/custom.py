"""Custom adjoints of helpers (`@f.adjoint` on a `@qgraph.func f`), as Warp's `@wp.func_grad` and
JAX's `custom_vjp`: the user gives a helper's gradient, and the adjoint generator calls it instead
of differentiating the helper's body.

At decoration (`checked_adjoint`), the adjoint is checked against the helper: its parameters are the
helper's inputs, then one adjoint per result; it returns one adjoint per input (`None`, compiled as
0.0, for an input without one; an integer input's is ignored whatever it is). In an adjoint task,
a call of such a helper stays a call (a "custom" Let, `custom_call`), and its reverse
(`reverse_call`) calls the adjoint, specialised for the call's argument types as any helper is
(`CustomAdjoints`), with the call's arguments and its results' adjoints, adding what it returns into
the arguments' adjoints. Both are compiled helpers of the adjoint kernel, on every backend.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from .. import roles
from ..front import ast_clone
from ..front.parse import KernelSource, syntax_error
from ..roles import role_of
from ..types.vector_types import VectorType
from .ir import Let
from .source_facts import result_arity


@dataclass(frozen=True)
class Custom:
    """A helper specialisation with a custom adjoint: `adjoint`, the name of the adjoint's
    specialisation for the same argument types; `results`, the values a call of it assigns (a
    vector's components each); `packed`, whether the adjoint returns a tuple (else one value)."""

    helper: str
    adjoint: str
    results: int
    packed: bool


def custom_adjoint(helper, fn, make_func: Callable):
    """The adjoint `fn` of the @qgraph.func `helper`, checked, as a Func made by `make_func`."""
    if role_of(fn) == roles.FUNC:  # @f.adjoint over @qgraph.func: the function itself
        fn = fn.fn
    if not callable(fn) or not hasattr(fn, "__code__"):
        raise TypeError(f"@{helper.__name__}.adjoint decorates a Python function (def), got {fn!r}")
    if getattr(helper, "custom_adjoint", None) is not None:
        first = helper.custom_adjoint.source
        raise syntax_error(
            f"@{helper.__name__}.adjoint is used twice: {helper.__name__} has its adjoint "
            f"({first.name}, line {first.lineno}) already; a helper has one custom adjoint: keep one "
            "of them",
            fn.__code__.co_filename,
            fn.__code__.co_firstlineno,
        )
    adjoint = make_func(fn)
    adjoint.source = checked_adjoint(helper.source, adjoint.source)
    return adjoint


def checked_adjoint(helper: KernelSource, adjoint: KernelSource) -> KernelSource:
    """`adjoint` (the source of `helper`'s custom adjoint) checked against the helper, its `None`
    adjoints compiled as 0.0; raises QgraphSyntaxError naming the line and the signature it needs."""
    names = [p.name for p in helper.params]
    outputs = result_arity(helper.fn_def) or 1
    seeds = ["adj_ret"] if outputs == 1 else [f"adj_ret{k}" for k in range(outputs)]
    where = f"@{helper.name}.adjoint"
    if not names:
        raise adjoint.error(f"{where}: {helper.name} takes no inputs, so there are no adjoints to give", adjoint.fn_def)
    if len(adjoint.params) != len(names) + outputs or any(p.keyword_only for p in adjoint.params):
        given = ", ".join(p.name for p in adjoint.params)
        results = "its result" if outputs == 1 else f"each of its {outputs} results"
        raise adjoint.error(
            f"{where}: the adjoint takes {helper.name}'s inputs and then the adjoint of {results}, "
            f"{len(names) + outputs} parameters: def {adjoint.name}({', '.join(names + seeds)}); "
            f"got def {adjoint.name}({given})",
            adjoint.fn_def,
        )
    returns = [n for n in ast.walk(adjoint.fn_def) if isinstance(n, ast.Return)]
    if not returns:
        raise adjoint.error(
            f"{where}: the adjoint returns nothing; it returns one adjoint per input of "
            f"{helper.name}: {_example(names)}",
            adjoint.fn_def,
        )
    for node in returns:
        count = 0 if node.value is None else len(node.value.elts) if isinstance(node.value, ast.Tuple) else 1
        if count != len(names):
            raise adjoint.error(
                f"{where}: the adjoint returns {count} value{'s' if count != 1 else ''} here; it "
                f"returns one adjoint per input of {helper.name} ({len(names)}): {_example(names)}"
                " (None for an input without a gradient)",
                node,
            )
    return dataclasses.replace(adjoint, fn_def=_NoneAsZero().visit(ast_clone.clone(adjoint.fn_def)))


def _example(names: list[str]) -> str:
    return "return " + ", ".join(f"adj_{n}" for n in names)


class _NoneAsZero(ast.NodeTransformer):
    """An adjoint's `None` results as 0.0: no gradient, in a tuple of numbers both backends compile."""

    def visit_Return(self, node: ast.Return) -> ast.Return:
        values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        for k, v in enumerate(values):
            if isinstance(v, ast.Constant) and v.value is None:
                values[k] = ast.copy_location(ast.Constant(0.0), v)
        if not isinstance(node.value, ast.Tuple):
            node.value = values[0]
        return node


class CustomAdjoints:
    """The helpers with custom adjoints among one flattened kernel's specialisations (`specs`, its
    lang.flat.view.FuncSpecs), their adjoints specialised on first use."""

    def __init__(self, specs) -> None:
        self.specs = specs
        self.found: dict[str, Custom | None] = {}

    def of(self, name: str, error: Callable, at: ast.AST) -> Custom | None:
        """The Custom of the specialisation called `name`, or None where it has no custom adjoint;
        `error(message, node)` makes the error for a call the custom adjoint cannot serve."""
        if name in self.found:
            return self.found[name]
        defs = {fdef.name: (fdef, fn) for fdef, fn, _ in self.specs.defs}
        fdef, fn = defs[name]
        adjoint = getattr(fn, "custom_adjoint", None)
        if adjoint is None:
            self.found[name] = None
            return None
        types, ret = next((key[1], entry[1]) for key, entry in self.specs.entries.items() if entry[0] == name)
        for p, t in zip(fn.source.params, types):
            if t is not None and not isinstance(t, VectorType):
                raise error(_array_input(fn.__name__, p.name), at)
        results = _returned(fdef)
        arity = result_arity(fn.source.fn_def)
        items = getattr(ret, "items", None)  # a tuple holding vectors (lang.flat.tuples.TupleType): its items
        outputs = tuple(items) if isinstance(items, tuple) else (None,) * arity if arity else (ret,)
        if len(outputs) != (arity or 1) or sum(t.size if t is not None else 1 for t in outputs) != results:
            raise error(
                f"`{fn.__name__}` has a custom adjoint, and the adjoint of its result here is not "
                "one value per item of it; please report this",
                at,
            )
        adjoint_name, _ = self.specs.specialise(adjoint, types + outputs)
        adef = next(d for d, _, _ in self.specs.defs if d.name == adjoint_name)
        inputs = sum(t.size if isinstance(t, VectorType) else 1 for t in types)
        for node in (n for n in ast.walk(adef) if isinstance(n, ast.Return)):
            count = len(node.value.elts) if isinstance(node.value, ast.Tuple) else 1
            if count != inputs:
                raise adjoint.source.error(
                    f"@{fn.__name__}.adjoint: the adjoint returns {count} number{'s' if count != 1 else ''} here, "
                    f"and {fn.__name__}'s inputs at this call have {inputs} ({_described(fn.source, types)}); "
                    "return one adjoint per input, a vector of the same type for a vector input",
                    node,
                )
        packed = any(isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple) for n in ast.walk(adef))
        self.found[name] = Custom(fn.__name__, adjoint_name, results, packed)
        return self.found[name]


def _array_input(helper: str, param: str) -> str:
    return (
        f"`{helper}` has a custom adjoint (@{helper}.adjoint), and its parameter `{param}` is given an array or "
        f"a struct here; a custom adjoint's inputs are numbers and vectors: read the elements in the kernel and "
        f"pass those to {helper}"
    )


def _returned(fdef: ast.FunctionDef) -> int:
    """How many values a flattened helper's calls assign (a vector's components each)."""
    for node in ast.walk(fdef):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
            return len(node.value.elts)
    return 1


def _described(src: KernelSource, types: tuple) -> str:
    return ", ".join(
        f"{p.name}: {t.name}" if isinstance(t, VectorType) else f"{p.name}: a number" for p, t in zip(src.params, types)
    )


def custom_call(builder, custom: Custom, name: str, args: list[ast.expr], line: int):
    """A call of the helper specialisation `name` with a custom adjoint, kept a call in the
    three-address form `builder` (lang.adjoint.three_address) builds: its result as an atom, or a
    tuple of atoms."""
    for param, arg in zip(builder.funcs[name].args.args, args):
        if builder.array_of(arg) is not None:
            raise builder.error(_array_input(custom.helper, param.arg), line)
    value = ast.Call(ast.Name(name, ast.Load()), args, [])
    if custom.results == 1:
        return builder.let(value, line, "custom", adjoint=custom)
    parts = tuple(builder.fresh("r") for _ in range(custom.results))
    builder.emit(Let(parts[0], value, line, "custom", parts=parts, adjoint=custom))
    return tuple(ast.Name(p, ast.Load()) for p in parts)


def reverse_call(let: Let, active: set[str], d: Callable[[str], str], fresh: Callable[[], str]) -> list[ast.stmt]:
    """The reverse of a "custom" Let: the adjoint called with the call's arguments and the adjoints
    of its results (`d(name)`; 0.0 for a result the gradient does not reach), what it returns added
    into the active arguments' adjoints, the results' adjoints cleared."""
    if not active & set(let.targets):
        return []
    custom: Custom = let.adjoint
    args = list(let.value.args)
    seeds = [ast.Name(d(t), ast.Load()) if t in active else ast.Constant(0.0) for t in let.targets]
    outs = [fresh() for _ in args]
    target = (
        ast.Tuple([ast.Name(o, ast.Store()) for o in outs], ast.Store())
        if custom.packed
        else ast.Name(outs[0], ast.Store())
    )
    call = ast.Call(ast.Name(custom.adjoint, ast.Load()), [copy.copy(a) for a in args] + seeds, [])
    out: list[ast.stmt] = [ast.Assign([target], call)]
    for arg, o in zip(args, outs):
        if isinstance(arg, ast.Name) and arg.id in active:
            out.append(ast.AugAssign(ast.Name(d(arg.id), ast.Store()), ast.Add(), ast.Name(o, ast.Load())))
    out += [ast.Assign([ast.Name(d(t), ast.Store())], ast.Constant(0.0)) for t in let.targets if t in active]
    return out
