"""A Python program run in a child process that prints "ready" once it is set to be interrupted,
then (optionally) gets SIGINT from outside, as Ctrl-C in a terminal would send it: the tests of
Ctrl-C and signal handlers during compiled loops (a signal that gets lost fails them, not hangs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers.paths import ROOT


def run_signalled(script_text: str, tmp_path: Path, args: tuple[str, ...] = (), sigint_after: float | None = None,
                  timeout_s: float = 60) -> tuple[str, float]:
    """(stdout, seconds from the SIGINT, or from "ready" without one, to the child's end) of the
    program `script_text` run with this checkout's qgraph and tests/helpers on its path and a cache
    of its own; it must exit 0."""
    script = tmp_path / "child.py"
    script.write_text(script_text)
    paths = [str(ROOT), str(ROOT / "tests")] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    env = dict(os.environ, QGRAPH_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join(paths))
    child = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        if sigint_after is not None:
            time.sleep(sigint_after)  # the kernel is running
        sent = time.perf_counter()
        if sigint_after is not None:
            child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=timeout_s)
        after = time.perf_counter() - sent
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 0, err
    return out, after
