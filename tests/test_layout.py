"""The package's structure: no import cycles, modules of a readable size, layers kept apart."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "qgraph"
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
            targets = [stem] + [f"{stem}.{a.name}" for a in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("qgraph"):
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
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
