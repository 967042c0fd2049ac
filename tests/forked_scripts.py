"""Run many independent Python scripts, each in a process of its own, without paying for an
interpreter, `import qgraph` and numba's start-up per script: one server process imports them
(and has numba compile a trivial function, which loads its compiler) once, then forks a child per
script. A child is the fresh process `python script.py` would be as far as the script can tell:
its own `__main__`, `sys.argv`, `sys.path[0]`, working directory and exit status, stdout and
stderr in a file of its own, and the interpreter's normal exit (atexit handlers run).

Run as a program by `run_scripts`: `python forked_scripts.py JOBS.json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run_scripts(
    scripts: dict[str, Path], env: dict[str, str], cwd: Path, timeout_s: float, workers: int
) -> dict[str, tuple[int | None, str]]:
    """{id: (exit status, or None when it ran past timeout_s; its stdout and stderr)} of every script,
    run at most `workers` at a time. A server that fails to start fails every script with its output."""
    jobs = Path(cwd) / "forked-jobs.json"
    outputs = {key: Path(cwd) / f"forked-{n}.out" for n, key in enumerate(scripts)}
    jobs.write_text(
        json.dumps(
            {
                "workers": workers,
                "timeout_s": timeout_s,
                "cwd": str(cwd),
                "scripts": [[key, str(path), str(outputs[key])] for key, path in scripts.items()],
            }
        )
    )
    results = Path(cwd) / "forked-results.json"
    server = subprocess.run(
        [sys.executable, __file__, str(jobs), str(results)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s * len(scripts) + 120,
    )
    if server.returncode != 0 or not results.exists():
        said = f"the fork server failed (exit status {server.returncode}):\n{server.stdout}{server.stderr}"
        return {key: (server.returncode or 1, said) for key in scripts}
    status = json.loads(results.read_text())
    return {key: (status[key], outputs[key].read_text()) for key in scripts}


def _warm_up() -> None:
    """What every script's first compile would load: numba's compiler and qgraph."""
    import numba
    import numpy  # noqa: F401

    import qgraph  # noqa: F401

    @numba.njit(cache=False)
    def plus_one(x):
        return x + 1

    plus_one(1.0)


def _child(script: str, output: str, cwd: str) -> None:
    """Become `python script`: never returns (the script's end, or its exception, exits the process)."""
    import runpy

    fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(cwd)
    sys.argv = [script]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    sys.exit(0)


def _serve(jobs_path: str, results_path: str) -> None:
    jobs = json.loads(Path(jobs_path).read_text())
    _warm_up()
    waiting, running, status = list(jobs["scripts"]), {}, {}
    while waiting or running:
        while waiting and len(running) < jobs["workers"]:
            key, script, output = waiting.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(script, output, jobs["cwd"])
            running[pid] = (key, time.monotonic())
        pid, code = os.waitpid(-1, os.WNOHANG)
        if pid:
            key, _ = running.pop(pid)
            status[key] = os.waitstatus_to_exitcode(code)
            continue
        for pid, (key, started) in list(running.items()):
            if time.monotonic() - started > jobs["timeout_s"]:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                running.pop(pid)
                status[key] = None
                with open(dict((k, o) for k, _, o in jobs["scripts"])[key], "a") as out:
                    out.write(f"\ntimed out after {jobs['timeout_s']} s\n")
        time.sleep(0.01)
    Path(results_path).write_text(json.dumps(status))


if __name__ == "__main__":
    _serve(*sys.argv[1:3])
