"""Generated code: tracebacks show the generated line, QGRAPH_DUMP writes every source, task code
keeps only the globals it reads."""

from __future__ import annotations

import gc
import os
import re
import traceback
import weakref

import numpy as np
import pytest

import qgraph
from qgraph.lang.generated import Lines


# The suite's only module-level kernel named `scaled`: a dump holds the binders of the last kernel
# decorated with a name, so another one imported later would hide these from the dump test below.
@qgraph.kernel
def scaled(x, a: float):
    for i in range(x.shape[0]):
        x[i] = x[i] * a


def test_a_traceback_through_launch_code_shows_the_generated_line(arch, monkeypatch):
    # the full traceback: by default a user's error leaves qgraph's frames out (tests/test_tracebacks.py)
    monkeypatch.setenv("QGRAPH_TRACEBACK", "full")
    x = qgraph.from_numpy(np.ones(4))
    with pytest.raises(TypeError, match="argument 'a'") as info:
        scaled(x, "two")
    frames = traceback.extract_tb(info.value.__traceback__)
    launch = [f for f in frames if f.filename.startswith("<qgraph: launch of kernel scaled")]
    assert launch, [f.filename for f in frames]
    assert "_slow(a1" in launch[-1].line  # the generated statement itself, read through linecache


OFFSET = 0.5  # a global the kernel of the next test reads


@pytest.mark.usefixtures("collect_only_new_objects")
def test_a_compiled_kernel_keeps_only_the_globals_it_reads(arch):
    """Task code runs among the names it reads, not a copy of its module's globals: an object a
    script still held in a global while the kernel compiled (a step's argument, say) goes with its
    last reference, and the global the kernel reads is compiled in."""

    class Payload:
        pass

    globals()["_held_while_compiling"] = Payload()
    alive = weakref.ref(globals()["_held_while_compiling"])

    @qgraph.kernel
    def shifted(x, a: float):
        for i in range(x.shape[0]):
            x[i] = a + OFFSET

    x = qgraph.ndarray(qgraph.f64, (3,))
    shifted(x, 2.0)
    np.testing.assert_array_equal(x.to_numpy(), np.full(3, 2.5))
    del globals()["_held_while_compiling"]
    gc.collect()
    assert alive() is None


def test_qgraph_dump_writes_every_generated_source(arch, tmp_path, monkeypatch):
    monkeypatch.setenv("QGRAPH_DUMP", str(tmp_path))
    qgraph.init(arch)
    try:
        @qgraph.kernel(cuda_graph=True)
        def dumped(x, a: float):
            for i in range(x.shape[0]):
                x[i] = x[i] + a

        x = qgraph.from_numpy(np.zeros(16))
        dumped(x, 2.0)
        np.testing.assert_array_equal(x.to_numpy(), np.full(16, 2.0))
    finally:
        monkeypatch.delenv("QGRAPH_DUMP")
        qgraph.init(arch)
    names = os.listdir(tmp_path)
    texts = {n: (tmp_path / n).read_text() for n in names}
    assert any(n.startswith("launch_of_kernel") and "def launch(" in t for n, t in texts.items()), names
    assert any(n.startswith("bounds_of") and "_qg_bounds" in t for n, t in texts.items()), names
    prefix = "cuda_tasks_of_" if arch == "cuda" else "cpu_tasks_of_"
    # (on the cpu a parallel loop indexes by its prange counter: x[_qg_u0_0])
    assert any(n.startswith(prefix) and "dumped" in n and re.search(r"x\[\w+\] \+ a", t)
               for n, t in texts.items()), names
    if arch == "cuda":
        assert any(n.endswith(".ptx") and ".entry" in t for n, t in texts.items()), names
        assert any(n.startswith("graph_replay_of_kernel") for n in names), names



def test_a_dump_never_writes_through_a_link_planted_at_its_name(tmp_path):
    """A shared QGRAPH_DUMP directory: a link at the (predictable) name of a dump file is not followed,
    so the run cannot be made to overwrite the link's target; a regular file there is the same source."""
    from qgraph.lang import generated

    target = tmp_path / "target.txt"
    target.write_text("precious")
    dump_dir = tmp_path / "dump"
    previous = generated.dump_dir()
    generated.configure(str(dump_dir))
    try:
        path = generated.dump("probe of kernel k", "def probe(): pass\n", "py")
        assert open(path).read() == "def probe(): pass\n"
        assert generated.dump("probe of kernel k", "def probe(): pass\n", "py") == path  # already there
        os.remove(path)
        os.symlink(target, path)
        assert generated.dump("probe of kernel k", "def probe(): pass\n", "py") is None
        assert target.read_text() == "precious"
    finally:
        generated.configure(previous)

def test_qgraph_dump_holds_the_binders_of_kernels_decorated_before_init(arch, tmp_path, monkeypatch):
    """A kernel's binders are generated when it is decorated (here: when this module was
    imported), before the init() that reads QGRAPH_DUMP: the dump still holds them."""
    monkeypatch.setenv("QGRAPH_DUMP", str(tmp_path))
    qgraph.init(arch)
    monkeypatch.delenv("QGRAPH_DUMP")
    qgraph.init(arch)
    texts = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert any(n.startswith("binder_of_kernel_scaled-") and "def __call__(_qg_self, x, a, *, stream=None)" in t
               for n, t in texts.items()), sorted(texts)
    assert any(n.startswith("compile_binder_of_kernel_scaled-") and "def compile(" in t
               for n, t in texts.items()), sorted(texts)


def test_cpu_loops_copy_their_index_only_when_arithmetic_reads_it(arch, tmp_path, monkeypatch):
    """A loop that uses its index only to index arrays carries no signed copy of it (a dead
    statement numba would type and lower in every loop); one that computes with it keeps it."""
    monkeypatch.setenv("QGRAPH_DUMP", str(tmp_path))
    qgraph.init(arch)
    try:
        @qgraph.kernel
        def two_loops(x, y, a: float):
            for i in range(x.shape[0]):
                x[i] = x[i] * a
            for i in range(y.shape[0]):
                y[i] = y[i] + i - 1

        rng = np.random.default_rng(7)
        x0, y0 = rng.random(37), rng.random(37)
        x, y = qgraph.from_numpy(x0), qgraph.from_numpy(y0)
        two_loops(x, y, 3.0)
        np.testing.assert_allclose(x.to_numpy(), x0 * 3.0)
        np.testing.assert_allclose(y.to_numpy(), y0 + np.arange(37) - 1)
    finally:
        monkeypatch.delenv("QGRAPH_DUMP")
        qgraph.init(arch)
    if arch == "cpu":
        (text,) = [p.read_text() for p in tmp_path.iterdir()
                   if p.name.startswith("cpu_tasks_of") and "two_loops" in p.name]
        for form in re.split(r"\n(?=def _qg_serial)", text):  # the parallel form's units, then the serial form
            assert len(re.findall(r"\bi = _qg_i64\(", form)) == 1, text  # only the second loop's
        assert re.search(r"x\[_qg_u0_\d+\] = x\[_qg_u0_\d+\] \* a", text), text


def test_lines_nest_blocks_and_pieces_where_they_are_added():
    """Generated sources are composed from pieces (lang.generated.Lines), never edited afterwards:
    a piece added inside a block takes that block's depth."""
    piece = Lines().line("x = 1")
    with piece.block("if x:"):
        piece.line("y = 2", "z = 3")
    out = Lines()
    with out.block("try:"):
        out.add(piece)
    with out.block("finally:"):
        out.line("w = 4")
    source = out.function("f()")
    assert source == ("def f():\n    try:\n        x = 1\n        if x:\n            y = 2\n            z = 3\n"
                      "    finally:\n        w = 4\n")
    assert Lines.of_body(out.rendered(1)).rendered() == out.rendered()  # text from older generators reads back
    namespace: dict = {}
    exec(source, namespace)
    assert namespace["f"]() is None
