"""The user documentation: the site builds with --strict, every runnable example runs on the
CPU backend, and the API and environment references name everything they must."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers.forked_programs import run_programs

import qgraph

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BLOCK_TIMEOUT_S = 240


def code_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line of the opening fence, info string, code) of every fenced block in a Markdown file."""
    blocks = []
    lines = path.read_text().splitlines()
    k = 0
    while k < len(lines):
        opening = re.match(r"^([ \t]*)(`{3,}|~{3,})(.*)$", lines[k])
        if opening is None:
            k += 1
            continue
        indent, fence, info = opening.groups()
        start, body = k + 1, []
        k += 1
        while k < len(lines) and not re.match(rf"^[ \t]*{re.escape(fence)}[ \t]*$", lines[k]):
            line = lines[k]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            k += 1
        blocks.append((start, info.strip(), "\n".join(body) + "\n"))
        k += 1
    return blocks


def runnable_blocks() -> list[tuple[str, str]]:
    """(id, code) of every ```python block (``python no-run`` blocks are skipped)."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for line, info, code in code_blocks(page):
            if info.split()[:1] == ["python"] and info != "python no-run":
                assert info == "python", f"{page.name}:{line}: fence info {info!r}: use 'python' or 'python no-run'"
                found.append((f"{page.name}:{line}", code))
    return found


BLOCKS = runnable_blocks()


def test_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install mkdocs, or the 'test' extra)")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()


@pytest.fixture(scope="module")
def block_results():
    """Run every runnable block in a process of its own (forked from one that imported qgraph and
    numba once: 1.7 s of start-up per block), up to four at a time, on the CPU backend."""
    with tempfile.TemporaryDirectory(prefix="qgraph-docs-") as workdir:
        env = dict(os.environ, QGRAPH_ARCH="cpu", QGRAPH_CACHE_DIR=os.path.join(workdir, "cache"))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        env.setdefault("NUMBA_NUM_THREADS", "1")  # blocks run concurrently: one numba thread each
        env.pop("QGRAPH_GRAPH_WHILE", None)
        env.pop("QGRAPH_GRAPHS", None)
        programs = {}
        for block_id, code in BLOCKS:
            script = Path(workdir) / (re.sub(r"\W", "_", block_id) + ".py")
            script.write_text(code)
            programs[block_id] = [str(script)]
        done = run_programs(programs, env, Path(workdir), BLOCK_TIMEOUT_S, workers=max(1, min(4, os.cpu_count() or 1)))
        return {block_id: (rc, out + err) for block_id, (rc, out, err) in done.items()}


@pytest.mark.parametrize("block_id,code", BLOCKS, ids=[b for b, _ in BLOCKS])
def test_example_runs_on_cpu(block_id, code, block_results):
    assert code.lstrip().startswith("import qgraph"), f"{block_id}: a runnable block starts with `import qgraph`"
    rc, output = block_results[block_id]
    assert rc == 0, f"{block_id} failed (exit code {rc}):\n{code}\n--- output ---\n{output}"


def test_error_lines_the_examples_say_they_print_are_the_lines_printed(block_results):
    """`print(e)  # kernel k, line n (...)` in an example is checked against what it printed."""
    claims = [(block_id, kernel, line) for block_id, code in BLOCKS
              for kernel, line in re.findall(r"print\(.*\)\s*#.*?\bkernel (\w+), line (\d+)\b", code)]
    assert claims, "no example shows a printed error line"
    for block_id, kernel, line in claims:
        output = block_results[block_id][1]
        assert f"kernel {kernel}, line {line} (" in output, f"{block_id} printed:\n{output}"


def test_there_are_runnable_examples():
    assert len(BLOCKS) >= 5


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def test_api_reference_names_every_public_name():
    text = (DOCS / "api.md").read_text()
    missing = [name for name in qgraph.__all__ if not _mentions(text, name)]
    assert not missing, f"docs/api.md does not mention: {missing}"


def test_environment_page_names_every_variable():
    names = set()
    for source in (ROOT / "qgraph").rglob("*.py"):
        names.update(re.findall(r"\bQGRAPH_[A-Z0-9_]+\b", source.read_text()))
    assert names, "no QGRAPH_ variables found in the sources"
    text = (DOCS / "environment.md").read_text()
    missing = sorted(name for name in names if not _mentions(text, name))
    assert not missing, f"docs/environment.md does not mention: {missing}"
