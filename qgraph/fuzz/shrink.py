"""Shrinking a failing fuzz case: delete lines and blocks of its source while the verdict (and a
key phrase of its detail) stays, so the reproducer handed to whoever fixes it is a few lines."""

from __future__ import annotations

import ast
import tempfile
from collections.abc import Callable
from pathlib import Path

from .check import check
from .programs import generate

KEEP = ("import", "from", "def run", "def grad", "def train", "@", "V3", '"""')


def _block_end(lines: list[str], k: int) -> int:
    """The line after the block that starts at line k (the line and everything indented under it)."""
    indent = len(lines[k]) - len(lines[k].lstrip())
    end = k + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return end


def shrink(seed: int, key: str = "", workdir: str | Path | None = None,
           log: Callable[[str], None] | None = None) -> str:
    """The smallest source (by greedy line and block deletion) of program `seed` whose check still
    gives its verdict, with `key` in the detail where given; qgraph initialised by the caller."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="qgraph-fuzz-shrink-"))
    program = generate(seed)
    first = check(program, workdir)
    want = (first.verdict, key or first.detail.split(":")[0])
    tries = [0]

    def same(lines: list[str]) -> bool:
        text = "\n".join(lines) + "\n"
        try:
            ast.parse(text)
        except SyntaxError:
            return False
        program.source = text
        if program.source64 is not None:
            program.source64 = text.replace("qgraph.f32)", "qgraph.f64)")
        tries[0] += 1
        program.variant = f"_try{tries[0]}"  # a module of its own per try (the same data and seeds)
        r = check(program, workdir)
        return r.verdict == want[0] and want[1] in r.detail

    lines = generate(seed).source.splitlines()
    changed = True
    while changed:
        changed = False
        k = 0
        while k < len(lines):
            if not lines[k].strip() or lines[k].lstrip().startswith(KEEP) or lines[k].startswith("def "):
                k += 1
                continue
            for end in (_block_end(lines, k), k + 1):
                if same(lines[:k] + lines[end:]):
                    lines = lines[:k] + lines[end:]
                    changed = True
                    if log is not None:
                        log(f"{len(lines)} lines after {tries[0]} tries")
                    break
            else:
                k += 1
    return "\n".join(lines) + "\n"
