"""The README's example kernel and front door stay true."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_front_door_has_exactly_two_commands_install_and_tests():
    block = re.search(r"<!-- front-door -->\n```sh\n(.*?)```\n<!-- /front-door -->", readme(), re.S).group(1)
    commands = [c for c in block.splitlines() if c.strip()]
    assert len(commands) == 2
    assert "pip install" in commands[0] and "python -m qgraph demo" in commands[0]
    assert "pip install" in commands[1] and "pytest" in commands[1]


def test_readme_kernel_runs_to_convergence(tmp_path):
    code = re.search(r"```python\n(.*?)```", readme(), re.S).group(1)
    script = tmp_path / "readme_example.py"
    script.write_text(code + """
import numpy as np
n = 24
u0 = np.zeros((n, n)); u0[0, :] = 1.0
u, un = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
change, flag = qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
relax(u, un, change, flag, 1e-6)
print(change.to_numpy()[0] <= 1e-6, flag.to_numpy()[0])
""")
    env = dict(os.environ, QGRAPH_ARCH="cpu")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "0"]


def test_the_test_command_s_parallel_runner_is_in_the_test_extra():
    """`-n`/`--dist` are pytest-xdist's options: the extra the same command installs must bring it."""
    command = re.search(r"<!-- front-door -->\n```sh\n.*\n(.*)\n```", readme()).group(1)
    with open(os.path.join(ROOT, "pyproject.toml")) as f:  # no tomllib before Python 3.11
        extra = re.search(r"^test = \[(.*)\]$", f.read(), re.M).group(1)
    assert ".[test]" in command and " -n " in command
    assert '"pytest-xdist>=' in extra


def _extra(name: str) -> str:
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        return re.search(rf"^{name} = \[(.*)\]$", f.read(), re.M).group(1)


def test_the_test_extra_is_lean_and_the_torch_tests_have_their_own_command_which_ci_runs():
    """PyTorch (754 MB for the CPU build, several GB for pip's default CUDA build on Linux) is out of
    `[test]`; the README's third command installs it and runs the tests marked `torch`, and CI runs it."""
    assert "torch" not in _extra("test")
    assert '"torch>=' in _extra("torch")
    block = re.search(r"<!-- torch-tests -->\n```sh\n(.*?)```\n<!-- /torch-tests -->", readme(), re.S).group(1)
    commands = [c for c in block.splitlines() if c.strip()]
    assert len(commands) == 1 and '".[torch,jax]"' in commands[0] and commands[0].endswith(' -m "torch or jax"')
    assert '"jax>=' in _extra("jax") and "jax" not in _extra("test")
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    assert "<!-- torch-tests -->" in ci and "<!-- front-door -->" in ci


def _imports_torch(node: ast.AST) -> bool:
    """Whether a function or module body skips without PyTorch (importorskip("torch...") or find_spec("torch")),
    but for a branch on CUDA (`if arch == "cuda":`), which runs on the GPU host."""
    if isinstance(node, ast.If) and "cuda" in ast.unparse(node.test):
        return any(_imports_torch(stmt) for stmt in node.orelse)
    if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("importorskip", "find_spec") and node.args
            and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).split(".")[0] == "torch"):
        return True
    return any(_imports_torch(child) for child in ast.iter_child_nodes(node))


def test_every_test_that_needs_torch_on_the_cpu_is_marked_torch():
    """Else the lean front door skips it and the torch command, `-m torch`, never selects it: it would run
    nowhere but on the GPU host. A test taking the `cuda` fixture runs there, in the whole suite."""
    unmarked = []
    for path in sorted((Path(ROOT) / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        marked = "pytest.mark.torch" in ast.unparse(tree)  # the module's pytestmark, or its torch tests' params
        module_level = any(_imports_torch(stmt) for stmt in tree.body
                           if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
        if module_level and not marked:
            unmarked.append(str(path.relative_to(ROOT)))
        for fn in (s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name.startswith("test")):
            if _imports_torch(fn) and not marked and "cuda" not in [a.arg for a in fn.args.args]:
                unmarked.append(f"{path.relative_to(ROOT)}::{fn.name}")
    assert not unmarked, f"tests that need PyTorch on the CPU without pytest.mark.torch: {unmarked}"
