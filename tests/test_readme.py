"""The README's example kernel and front door stay true."""

from __future__ import annotations

import os
import re
import subprocess
import sys

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
