"""Device control-flow regions in a kernel body: `while qgraph.loop(flag):`,
`if qgraph.cond(flag): ... else: ...` and `for _ in qgraph.repeat(k):` as statements at the top
level of the body (or of another region's body) open a region whose body is split into tasks
(and regions) in turn (lang.front.regions). A mixin of the front end's splitter."""

from __future__ import annotations

import ast

from .builtins import CONTROL
from .names import collect_names, resolve_static
from .regions import USE_KERNEL, DeviceLoop, IfRegion, Region, RepeatLoop, Task


class RegionParser:
    """Needs `globals`, `closure`, `param_names`, `error(message, node)` and `regions(body, tasks)`."""

    def control(self, stmt: ast.stmt) -> str | None:
        """'loop', 'cond' or 'repeat' when `stmt` opens a device control-flow region."""
        call = stmt.test if isinstance(stmt, (ast.While, ast.If)) else stmt.iter if isinstance(stmt, ast.For) else None
        if not isinstance(call, ast.Call):
            return None
        obj = resolve_static(call.func, self.globals, self.closure)
        kind = next((k for k, fn in CONTROL.items() if obj is fn), None)
        expected = {ast.While: "loop", ast.If: "cond", ast.For: "repeat"}[type(stmt)]
        if kind is not None and kind != expected:
            spelling = {"loop": "while qgraph.loop(flag):", "cond": "if qgraph.cond(flag):",
                        "repeat": "for _ in qgraph.repeat(k):"}[kind]
            raise self.error(f"qgraph.{kind} opens a region only as `{spelling}`", stmt)
        return kind

    def region(self, stmt: ast.stmt, kind: str, tasks: list[Task]) -> Region:
        """The region `stmt` opens; its body is split into tasks (and regions) in turn."""
        call = stmt.iter if kind == "repeat" else stmt.test
        args = {kw.arg: kw.value for kw in call.keywords}
        allowed = {"loop": {"max_iterations", "unroll"}, "repeat": {"unroll"}}.get(kind, set())
        extra = [k for k in args if k not in allowed]
        if len(call.args) != 1 or extra or any(isinstance(a, ast.Starred) for a in call.args):
            what = "a flag (an int32 array parameter)" if kind != "repeat" else "a count (an integer parameter)"
            raise self.error(f"qgraph.{kind} takes one argument, {what}"
                             + {"loop": ", max_iterations= and unroll=", "repeat": " and unroll="}.get(kind, ""), stmt)
        name = self.region_name(call.args[0], kind, stmt)
        unroll = self.unroll_of(args.get("unroll"), kind)
        if kind == "repeat":
            if not isinstance(stmt.target, ast.Name) or stmt.orelse:
                raise self.error("write a device repeat loop as `for _ in qgraph.repeat(k):` (one name, no else)",
                                 stmt)
            if stmt.target.id != "_" and stmt.target.id in collect_names(stmt.body).loaded:
                raise self.error(f"the repeat loop's variable '{stmt.target.id}' does not exist on the device; "
                                 "count passes in an array if the body needs the number", stmt)
            return RepeatLoop(name, self.regions(stmt.body, tasks), stmt.lineno, unroll=unroll)
        if kind == "cond":
            return IfRegion(name, self.regions(stmt.body, tasks), self.regions(stmt.orelse, tasks), stmt.lineno)
        if stmt.orelse:
            raise self.error("while qgraph.loop(...) ... else is not supported; put the statements after the loop",
                             stmt)
        limit: object = USE_KERNEL
        if "max_iterations" in args:
            node = args["max_iterations"]
            limit = node.value if isinstance(node, ast.Constant) else ...
            if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
                raise self.error("max_iterations= of qgraph.loop is a positive int literal or None", node)
        return DeviceLoop(name, self.regions(stmt.body, tasks), stmt.lineno, test_first=True, max_iterations=limit,
                          unroll=unroll)

    def unroll_of(self, node: ast.expr | None, kind: str) -> object:
        """A region's unroll=: USE_KERNEL when not given, else a positive int literal or None (chosen)."""
        if node is None:
            return USE_KERNEL
        value = node.value if isinstance(node, ast.Constant) else ...
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise self.error(f"unroll= of qgraph.{kind} is a positive int literal (copies of the body per device "
                             "pass) or None (qgraph chooses)", node)
        return value

    def region_name(self, node: ast.expr, kind: str, at: ast.stmt) -> str:
        """The parameter (or struct field, 's.flag') a region reads."""
        text = ast.unparse(node)
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or root.id not in self.param_names or \
                not all(isinstance(n, (ast.Name, ast.Attribute)) for n in ast.walk(node) if isinstance(n, ast.expr)):
            what = "an int32 flag array" if kind != "repeat" else "an integer count"
            raise self.error(f"qgraph.{kind}({text}): pass a parameter of the kernel ({what}, or a struct "
                             "parameter's field such as s.flag); its value is read on the device", at)
        return text
