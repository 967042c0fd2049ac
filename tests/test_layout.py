"""The package's structure: no import cycles, imports pointing down the layers docs/architecture.md
states, modules of a readable size, numba kept in its layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "qgraph"
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAX_LINES = 400
LONGER_WITH_A_REASON: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every qgraph module `name` imports, at module level or inside functions."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [f"{stem}.{a.name}" for a in node.names]
            # `from . import runtime` imports the module, not its package's __init__ (the root's is the public API)
            targets = names + ([stem] if any(n not in modules for n in names) else [])
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("qgraph"):
                out.add(target)
    return out


def _graph(packages: bool = False) -> dict[str, set[str]]:
    """Module -> the qgraph modules it imports; with `packages`, also the package __init__s it runs."""
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    if packages:
        return graph
    for name in graph:  # importing a package runs its __init__, which is not an edge worth a cycle
        graph[name] = {t for t in graph[name] if modules[t].name != "__init__.py" or t == "qgraph.runtime"}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "qgraph"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    graph = _graph()
    assert graph["qgraph.a"] == {"qgraph.b"} and graph["qgraph.b"] == {"qgraph.a"}
    assert _cycles(graph) == [["qgraph.a", "qgraph.b", "qgraph.a"]]


def _layer_rows(text: str) -> list[list[str]]:
    """The modules of each row of the page's layer table, top row first: `cli.py` is qgraph.cli,
    `bench/` the package qgraph.bench and all below it, `__init__.py` the root package alone."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 3 and "`" in cells[1]:
            paths = re.findall(r"`([^`]+)`", cells[1])
            rows.append([".".join(["qgraph", *p.removesuffix("/").removesuffix(".py").split("/")])
                         .removesuffix(".__init__") for p in paths])
    return rows


def _layer_of(name: str, rows: list[list[str]]) -> int | None:
    """Index of the row holding `name`: the row naming the longest prefix of it (the root exactly)."""
    best = None
    for index, row in enumerate(rows):
        for listed in row:
            if (name == listed or listed != "qgraph" and name.startswith(listed + ".")) and \
                    (best is None or len(listed) > len(best[1])):
                best = (index, listed)
    return None if best is None else best[0]


def _upward_imports(graph: dict[str, set[str]], rows: list[list[str]]) -> list[str]:
    return sorted(f"{name} -> {target}" for name, targets in graph.items() for target in targets
                  if _layer_of(target, rows) < _layer_of(name, rows))


def test_imports_point_down_the_layers_the_architecture_page_states():
    """docs/architecture.md's layer table is the order: a module imports (function-level imports
    included) only modules of its own row or of rows below it, and every module has a row."""
    rows = _layer_rows(ARCHITECTURE.read_text())
    modules = _modules()
    assert len(rows) > 5, "docs/architecture.md has no layer table under '## Layers'"
    stale = [m for row in rows for m in row if m not in modules]
    assert not stale, f"the layer table names modules that do not exist: {stale}"
    unplaced = sorted(m for m in modules if _layer_of(m, rows) is None)
    assert not unplaced, f"modules without a row in docs/architecture.md's layer table: {unplaced}"
    upward = _upward_imports(_graph(packages=True), rows)
    assert not upward, "imports pointing up docs/architecture.md's layers: " + "; ".join(upward)


def test_the_layer_check_finds_an_upward_import():
    rows = _layer_rows("\n## Layers\n| modules | why |\n|---|---|\n| `cli.py`, `bench/` | top |\n"
                       "| `__init__.py`, `bench/measure.py` | names |\n| `lang/` | bottom |\n## Next\n")
    assert rows == [["qgraph.cli", "qgraph.bench"], ["qgraph", "qgraph.bench.measure"], ["qgraph.lang"]]
    assert [_layer_of(m, rows) for m in ("qgraph.bench.suite", "qgraph.bench.measure", "qgraph", "qgraph.lang.x")] \
        == [0, 1, 1, 2]
    graph = {"qgraph.cli": {"qgraph"}, "qgraph.bench.measure": {"qgraph.lang.x", "qgraph.bench.suite"},
             "qgraph.lang.x": {"qgraph.lang.y"}, "qgraph.lang.y": {"qgraph"}}
    assert _upward_imports(graph, rows) == ["qgraph.bench.measure -> qgraph.bench.suite", "qgraph.lang.y -> qgraph"]


def test_modules_stay_readable():
    too_long = {}
    for name, path in _modules().items():
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and name not in LONGER_WITH_A_REASON:
            too_long[name] = lines
    assert not too_long, f"modules over {MAX_LINES} lines (split them, or give a reason): {too_long}"


def _imports_numba(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n == "numba" or n.startswith("numba.") for n in names):
            return True
    return False


def test_numba_stays_in_the_compiler_layer():
    """The driver layer and the launch path never import numba (a warm cache runs without it);
    numba's internals are reached from compiler/ only (argument kinds name public numba types)."""
    allowed = {"qgraph.args.kinds"}
    offenders = sorted(name for name, path in _modules().items()
                       if _imports_numba(path) and not name.startswith(("qgraph.compiler", "qgraph.bench"))
                       and name not in allowed)
    assert offenders == []
    private = sorted(name for name, path in _modules().items()
                     if "numba.core" in path.read_text() and not name.startswith("qgraph.compiler"))
    assert private == []


def _own_dispatch(source: str) -> list[int]:
    """Lines that look a method up by a node's type name (`getattr(self, "s_" + type(node).__name__)`)."""
    return [n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
            and getattr(n.func, "id", None) == "getattr" and len(n.args) > 1 and isinstance(n.args[0], ast.Name)
            and isinstance(n.args[1], (ast.BinOp, ast.JoinedStr)) and "__name__" in ast.unparse(n.args[1])]


def test_ast_passes_dispatch_through_node_visitor():
    """Every pass over kernel code is an ast.NodeVisitor or NodeTransformer: a `visit_<Node>` method per
    node it handles, `generic_visit` for the rest; no pass keeps a method prefix of its own."""
    assert _own_dispatch("def f(self, node):\n    return getattr(self, 'e_' + type(node).__name__)(node)\n") == [2]
    found = {name: lines for name, path in _modules().items() if (lines := _own_dispatch(path.read_text()))}
    assert found == {}, f"use visit_<Node> methods (ast.NodeVisitor) instead of a prefix of its own: {found}"


# ------------------------------------------------------------------ one owner per concept

# the modules that may reach numba's private names: the adapter (numba_cache.py is its half for numba's
# on-disk CPU cache), and the import gate that must run before numba is imported (so it cannot import the
# adapter, which imports numba)
NUMBA_ADAPTERS = ("qgraph.compiler.numba_adapter", "qgraph.compiler.numba_cache", "qgraph.compiler.numba_probes")
PUBLIC_UNDERSCORES = {"_fields", "_attributes", "_getframe", "_asdict", "_replace", "_make"}  # ast, sys, NamedTuple
# qgraph's marks on objects it decorates (a user's struct class, a Kernel or Func the front end meets
# as a callee without importing decorator.py), read where no import could reach the class
MARKS = ("_qgraph_", "_qg_")


def _own_names(tree: ast.AST) -> set[str]:
    """The private names a module defines itself: its functions, classes and module-level names,
    what its classes assign to `self.`/`cls.` or in their bodies, and their `__slots__` entries."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            own.add(node.attr)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            own |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return own


def _private_reaches(name: str, path: Path) -> list[str]:
    """`x._name` (x not self/cls) where this module does not define `_name`, read or written, and
    every `from ... import _name`."""
    tree = ast.parse(path.read_text())
    own = _own_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in own or node.attr in PUBLIC_UNDERSCORES or node.attr.startswith(MARKS) \
                    or name in NUMBA_ADAPTERS:
                continue
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and name not in NUMBA_ADAPTERS:
            found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: from {'.' * node.level}{node.module or ''} "
                      f"import {a.name}"
                      for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_module_reaches_into_another_modules_private_names():
    """Each concept has one owner: other modules use its public methods and names, never a field or
    function whose name starts with `_` that they do not define themselves (docs/architecture.md)."""
    found = [r for name, path in sorted(_modules().items()) for r in _private_reaches(name, path)]
    assert not found, f"{len(found)} private reaches:\n" + "\n".join(found)


def test_the_private_reach_check_finds_reads_and_imports(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "PACKAGE", tmp_path / "qgraph")
    module = tmp_path / "qgraph" / "m.py"
    module.parent.mkdir()
    module.write_text("from .other import _helper\n\n\nclass A:\n    def __init__(self):\n        self._mine = 1\n\n"
                      "    def f(self, b):\n        return b._mine + b._theirs + self._x + b.__class__\n")
    assert _private_reaches("qgraph.m", module) == ["qgraph/m.py:1: from .other import _helper",
                                                    "qgraph/m.py:9: ._theirs"]
