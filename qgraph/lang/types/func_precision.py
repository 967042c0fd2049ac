"""Weak literals inside @qgraph.func helpers, and the types of what helpers return.

A helper is typed per call: the types its call site passes (Python numbers stay weak) pick
an *instance* of the helper whose body is typed with exactly those types, and the call is
pointed at it. So `x * 0.5` in a helper called with a float32 `x` stays float32, as it does
in a kernel body (lang.types.precision), and the caller knows what the call returns: a helper
returning `s * dx, s * dy` of float32 values makes `gx, gy = force(dx, dy)` float32 in the
caller, so `fx = 0.0; fx += gx` accumulates in float32. Each return value is made the
helper's result type (the join over its returns). Helpers called with different types get
one instance each, as numba compiles one per argument types anyway; nested helper calls
are instantiated while their caller's instance is typed.
"""

from __future__ import annotations

import ast

from .precision import result_type, weak_typed
from .weak_types import UNKNOWN


class FuncPrecision:
    """The instances of a kernel's @qgraph.func specialisations (lang.flat.view.FuncSpecs)
    per argument types, their typed bodies and result types."""

    def __init__(self, specialised: list, default_float: str, local_names_of) -> None:
        self.sources = {fdef.name: (fdef, fsrc) for fdef, _, fsrc in specialised}
        self.default = default_float
        self.local_names_of = local_names_of  # FunctionDef -> its parameters and locals
        self.results: dict[tuple, object] = {}  # (helper, argument types) -> result type
        self.instances: dict[tuple, str] = {}  # (helper, argument types) -> the instance's name
        self.bodies: dict[str, list[ast.stmt]] = {}  # instance name -> its typed body
        self.of_instance: dict[str, tuple] = {}  # instance name -> (helper, argument types)
        self._typing: set[tuple] = set()

    def knows(self, name: str) -> bool:
        return name in self.sources or name in self.of_instance

    def result(self, name: str, types: tuple) -> object:
        """The type of a call of `name` (a helper or one of its instances) with arguments of `types`;
        None while an argument's type is still being inferred."""
        if name in self.of_instance:
            name, types = self.of_instance[name]
        if any(t is None for t in types):
            return None
        key = (name, types)
        if key not in self.results:
            if key in self._typing:  # recursion is rejected earlier (lang.flat.view); never loop here
                return UNKNOWN
            self._typing.add(key)
            try:
                fdef, fsrc = self.sources[name]
                self.results[key] = result_type(fsrc, fdef.body, self._params(fdef, types), self.local_names_of(fdef),
                                                self)
            finally:
                self._typing.discard(key)
        return self.results[key]

    def instantiate(self, typer, body: list[ast.stmt]) -> None:
        """Point every helper call in `body` (typed by `typer`) at the instance for its argument types."""
        for node in (n for stmt in body for n in ast.walk(stmt)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.sources:
                types = tuple(UNKNOWN if t is None else t for t in (typer.of(a) for a in node.args))
                node.func = ast.copy_location(ast.Name(self.instance(node.func.id, types), ast.Load()), node.func)

    def instance(self, name: str, types: tuple) -> str:
        """The name of `name`'s instance for arguments of `types`, typed on first use (the first
        instance keeps the helper's name)."""
        key = (name, types)
        if key not in self.instances:
            count = sum(1 for helper, _ in self.instances if helper == name)
            instance = name if count == 0 else f"{name}_{count}"
            self.instances[key] = instance
            self.of_instance[instance] = key
            fdef, fsrc = self.sources[name]
            self.bodies[instance] = weak_typed(fsrc, fdef.body, self._params(fdef, types), (),
                                               self.local_names_of(fdef), self.default, self,
                                               self.result(name, types))
        return self.instances[key]

    def defs(self, name: str) -> list[tuple[str, list[ast.stmt]]]:
        """(instance name, typed body) of each instance of helper `name`; a helper no typed code
        calls keeps its name and its body typed with unknown parameters."""
        found = [(instance, self.bodies[instance]) for (helper, _), instance in self.instances.items()
                 if helper == name]
        if found:
            return found
        fdef, fsrc = self.sources[name]
        return [(name, weak_typed(fsrc, fdef.body, self._params(fdef, ()), (), self.local_names_of(fdef),
                                  self.default, self))]

    @staticmethod
    def _params(fdef: ast.FunctionDef, types: tuple) -> dict:
        params = [a.arg for a in fdef.args.args]
        return {p: types[k] if k < len(types) else UNKNOWN for k, p in enumerate(params)}
