"""Weak literals inside @qgraph.func helpers: a helper's parameters take the types its call
sites pass, so `x * 0.5` in a helper called with a float32 `x` stays float32, as it does in
a kernel body (lang.precision).

Each task's typing records the argument types of every helper call (as numba will see them:
a weak Python number is the kernel's default float); a helper's parameter then has the join
of what all its call sites pass (float32 with float64 is float64, so no call site loses
precision). Helpers are typed callers first, so a helper's own calls are recorded before
the helpers they call are typed.
"""

from __future__ import annotations

import ast

from .precision import UNKNOWN, WEAK, join, weak_typed


class FuncPrecision:
    """The argument types recorded at @qgraph.func call sites, and the helpers typed with them."""

    def __init__(self, names: list[str], default_float: str) -> None:
        self.calls: dict[str, list[tuple]] = {name: [] for name in names}
        self.default = default_float

    def record(self, typer, body: list[ast.stmt]) -> None:
        """`weak_typed`'s on_typed hook: note the argument types of every helper call in `body`."""
        for node in (n for stmt in body for n in ast.walk(stmt)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.calls:
                self.calls[node.func.id].append(tuple(self._as_passed(typer.of(a)) for a in node.args))

    def _as_passed(self, t: object) -> object:
        return self.default if t == WEAK else t

    def param_types(self, name: str, params: list[str]) -> dict:
        """Each parameter's type: the join over the call sites (UNKNOWN where they disagree)."""
        out = {}
        for k, param in enumerate(params):
            seen = [call[k] if k < len(call) else UNKNOWN for call in self.calls.get(name, [])]
            t = seen[0] if seen else UNKNOWN
            for other in seen[1:]:
                t = t if t == other else (UNKNOWN if isinstance(t, tuple) or isinstance(other, tuple)
                                          else join(t, other))
            out[param] = t if t is not None else UNKNOWN
        return out

    def typed_bodies(self, specialised: list, local_names_of) -> dict[str, list[ast.stmt]]:
        """Helper name -> its body with weak literals typed; callers first (see the module docstring)."""
        bodies = {}
        for fdef, _fn, fsrc in reversed(specialised):
            params = [a.arg for a in fdef.args.args]
            bodies[fdef.name] = weak_typed(fsrc, fdef.body, self.param_types(fdef.name, params), (),
                                           local_names_of(fdef), self.default, on_typed=self.record)
        return bodies
