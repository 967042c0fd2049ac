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


def runnable_blocks() -> list[tuple[str, str, bool]]:
    """(id, code, needs PyTorch) of every ```python block (``python no-run`` blocks are skipped;
    ``python torch`` ones need PyTorch, which the test extra leaves out: they are marked `torch`)."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for line, info, code in code_blocks(page):
            if info.split()[:1] == ["python"] and info != "python no-run":
                assert info in ("python", "python torch"), \
                    f"{page.name}:{line}: fence info {info!r}: use 'python', 'python torch' or 'python no-run'"
                found.append((f"{page.name}:{line}", code, info == "python torch"))
    return found


BLOCKS = [(block_id, code) for block_id, code, _ in runnable_blocks()]
TORCH_BLOCKS = {block_id for block_id, _, torch in runnable_blocks() if torch}
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def test_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install mkdocs, or the 'test' extra)")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()


def _error_line_claims() -> list[tuple[str, str, str]]:
    """(block, kernel, line) of each `print(e)  # kernel k, line n (...)` in an example."""
    return [(block_id, kernel, line) for block_id, code in BLOCKS
            for kernel, line in re.findall(r"print\(.*\)\s*#.*?\bkernel (\w+), line (\d+)\b", code)]


def _wanted_blocks(session) -> set[str]:
    """The blocks the selected tests read (every block in a whole run, the ``python torch`` ones under
    `-m torch`), less those that need PyTorch where it is not installed."""
    wanted = set()
    for item in session.items:
        name = getattr(item, "originalname", None)
        if name == "test_example_runs_on_cpu":
            wanted.add(item.callspec.params["block_id"])
        elif name == test_error_lines_the_examples_say_they_print_are_the_lines_printed.__name__:
            wanted.update(block_id for block_id, _, _ in _error_line_claims())
    return wanted if HAVE_TORCH else wanted - TORCH_BLOCKS


@pytest.fixture(scope="module")
def block_results(request):
    """Run every runnable block the selected tests read in a process of its own (forked from one that
    imported qgraph and numba once: 1.7 s of start-up per block), up to four at a time, on the CPU backend."""
    wanted = _wanted_blocks(request.session)
    with tempfile.TemporaryDirectory(prefix="qgraph-docs-") as workdir:
        env = dict(os.environ, QGRAPH_ARCH="cpu", QGRAPH_CACHE_DIR=os.path.join(workdir, "cache"))
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        env.setdefault("NUMBA_NUM_THREADS", "1")  # blocks run concurrently: one numba thread each
        env.pop("QGRAPH_GRAPH_WHILE", None)
        env.pop("QGRAPH_GRAPHS", None)
        programs = {}
        for block_id, code in BLOCKS:
            if block_id not in wanted:
                continue
            script = Path(workdir) / (re.sub(r"\W", "_", block_id) + ".py")
            script.write_text(code)
            programs[block_id] = [str(script)]
        done = run_programs(programs, env, Path(workdir), BLOCK_TIMEOUT_S, workers=max(1, min(4, os.cpu_count() or 1)))
        return {block_id: (rc, out + err) for block_id, (rc, out, err) in done.items()}


@pytest.mark.parametrize("block_id,code", [
    pytest.param(block_id, code, id=block_id, marks=[pytest.mark.torch] if block_id in TORCH_BLOCKS else [])
    for block_id, code in BLOCKS])
def test_example_runs_on_cpu(block_id, code, block_results):
    assert code.lstrip().startswith("import qgraph"), f"{block_id}: a runnable block starts with `import qgraph`"
    if block_id in TORCH_BLOCKS and not HAVE_TORCH:
        pytest.skip('needs PyTorch: pip install ".[torch]"')
    rc, output = block_results[block_id]
    assert rc == 0, f"{block_id} failed (exit code {rc}):\n{code}\n--- output ---\n{output}"


def test_error_lines_the_examples_say_they_print_are_the_lines_printed(block_results):
    """`print(e)  # kernel k, line n (...)` in an example is checked against what it printed."""
    claims = _error_line_claims()
    assert claims, "no example shows a printed error line"
    assert not {block_id for block_id, _, _ in claims} & TORCH_BLOCKS, "a printed error line in a block needing torch"
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


# --- the pages agree with each other and with the code ---------------------------------------------------------------

USER_PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]


def test_user_docs_cite_no_tracker_issues():
    """"issue 31", "issue 32's goal": the project's tracker is not the user's; say what was measured or built."""
    found = [f"{page.name}:{k}: {line.strip()}" for page in USER_PAGES
             for k, line in enumerate(page.read_text().splitlines(), 1)
             if re.search(r"\b(issues?|pull requests?) #?\d+", line, re.I)]
    assert not found, "tracker references in user docs:\n" + "\n".join(found)


def _first_cell_messages(row: str) -> list[str]:
    """The code spans of a troubleshooting table row's first cell (the messages it lists)."""
    spans, pos = [], 1
    token = re.compile(r"(`+)(.+?)\1|\s\|\s")
    while (m := token.search(row, pos)) is not None and m.group(1) is not None:
        spans.append(m.group(2).strip())
        pos = m.end()
    return spans


def _troubleshooting_row_for(message: str) -> str | None:
    """The troubleshooting row whose message template (`<name>` any text, `...` the rest) the
    message starts with."""
    for row in (DOCS / "troubleshooting.md").read_text().splitlines():
        if row.startswith("| "):
            for template in _first_cell_messages(row):
                pattern = re.sub(r"\\\.\\\.\\\.", ".*", re.sub(r"<[^<>]+>", ".+?", re.escape(template)))
                if re.match(pattern, message, re.S):
                    return row
    return None


def test_gradient_limits_raise_what_troubleshooting_and_differentiable_say():
    """A struct field with a gradient and `kernel.grad` after an in-place update raise (once the
    troubleshooting page called both silently wrong gradients, while differentiable.md said they raise)."""
    import numpy as np

    qgraph.init("cpu")

    @qgraph.kernel
    def square_in_place(x):
        for i in range(x.shape[0]):
            x[i] = x[i] * x[i]

    @qgraph.struct
    class Holder:
        a: object

    @qgraph.kernel
    def double(s: Holder, y):
        for i in range(y.shape[0]):
            y[i] = 2.0 * s.a[i]

    x = qgraph.from_numpy(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    square_in_place(x)
    a, y = qgraph.from_numpy(np.ones(3), requires_grad=True), qgraph.from_numpy(np.zeros(3), requires_grad=True)
    double(Holder(a), y)
    messages = []
    for kernel, args in ((square_in_place, (x,)), (double, (Holder(a), y))):
        with pytest.raises(qgraph.QgraphError) as raised:
            kernel.grad(*args)
        messages.append(str(raised.value).splitlines()[0])
    with pytest.raises(qgraph.QgraphError) as raised, qgraph.Tape():
        double(Holder(a), y)
    messages.append(str(raised.value).splitlines()[0])
    missing = [m for m in messages if _troubleshooting_row_for(m) is None]
    assert not missing, f"docs/troubleshooting.md has no row for: {missing}"
    text = " ".join((DOCS / "differentiable.md").read_text().split())
    assert "Arrays inside a `@qgraph.struct` argument get no gradient: `kernel.grad` and the tape raise" in text
    assert "`kernel.grad` after a call that overwrote what its adjoint reads raises" in text
    trouble = (DOCS / "troubleshooting.md").read_text()
    assert not re.search(r"gradient[^|\n]*\bsilently\b", trouble, re.I), "a gradient said to be wrong silently"


def test_what_stops_and_counts_an_interchanged_repeat_is_said_alike_and_is_true():
    """api.md once called kernel.cancel() CUDA-only and control-flow.md said an interchanged repeat
    cannot be stopped, while watching.md's table said both backends stop it."""
    import numpy as np

    qgraph.init("cpu")

    @qgraph.kernel
    def decay(x, k: int):
        for _ in qgraph.repeat(k):
            for i in range(x.shape[0]):
                x[i] = x[i] * 0.5 + 1.0

    kept = decay.variant(interchange=False)
    x = qgraph.from_numpy(np.zeros(16))
    for kernel, iterations in ((decay, ()), (kept, (3,))):
        kernel(x, 3)
        assert kernel.stats.iterations == iterations
        with pytest.raises(qgraph.LoopCancelled):  # on the CPU: by a progress callback, as by kernel.cancel()
            kernel(x, 10**12, progress=lambda passes, values: False)
    pages = {name: " ".join((DOCS / name).read_text().split()) for name in ("api.md", "watching.md",
                                                                           "control-flow.md")}
    bullet = re.search(r"- `kernel\.cancel\(\)`: (.*?)(?= - `kernel\.)", pages["api.md"]).group(1)
    assert "CUDA" not in bullet or "CPU" in bullet, f"api.md: kernel.cancel() reads as one backend's: {bullet}"
    for name in ("watching.md", "control-flow.md"):
        assert re.search(r"interchanged.{0,200}no entry in `kernel\.stats\.iterations`", pages[name]), name
    for name, text in pages.items():
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", text):
            assert not ("interchanged" in sentence and re.search(r"\bcannot (stop|be stopped|be cancelled|cancel)\b",
                                                                   sentence)), f"{name}: {sentence}"
