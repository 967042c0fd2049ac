"""Run many independent Python programs, each in a process of its own, without paying for an
interpreter, `import qgraph` and numba's start-up per program: one server process imports them
(and has numba compile a trivial function, which loads its compiler) once, then forks a child per
program. A child is the fresh process `python script.py args` would be as far as the program can
tell: its own `__main__`, `sys.argv`, `sys.path[0]`, working directory, exit status, stdout and
stderr, and the interpreter's normal exit (atexit handlers run). Environment variables are the
server's: those read at import are fixed for every program.

Run as a program by `run_programs`: `python forked_programs.py JOBS.json RESULTS.json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run_programs(
    programs: dict[str, list[str]], env: dict[str, str], cwd: Path, timeout_s: float, workers: int
) -> dict[str, tuple[int | None, str, str]]:
    """{id: (exit status, or None when it ran past timeout_s; stdout; stderr)} of every program (its
    command line after `python`: a script and its arguments), run at most `workers` at a time.
    A server that fails to start fails every program with its output."""
    cwd = Path(cwd)
    outputs = {key: [str(cwd / f"forked-{n}.{stream}") for stream in ("out", "err")] for n, key in enumerate(programs)}
    jobs, results = cwd / "forked-jobs.json", cwd / "forked-results.json"
    listed = [[key, argv, outputs[key]] for key, argv in programs.items()]
    jobs.write_text(json.dumps({"workers": workers, "timeout_s": timeout_s, "cwd": str(cwd), "programs": listed}))
    server = subprocess.run(
        [sys.executable, __file__, str(jobs), str(results)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s * len(programs) + 120,
    )
    if server.returncode != 0 or not results.exists():
        said = f"the fork server failed (exit status {server.returncode}):\n{server.stdout}{server.stderr}"
        return {key: (server.returncode or 1, "", said) for key in programs}
    status = json.loads(results.read_text())
    return {key: (status[key], *(Path(path).read_text() for path in outputs[key])) for key in programs}


def _warm_up() -> None:
    """What every program's first compile would load: numba's compiler and qgraph."""
    import numba
    import numpy  # noqa: F401

    import qgraph  # noqa: F401

    @numba.njit(cache=False)
    def plus_one(x):
        return x + 1

    plus_one(1.0)


def _child(argv: list[str], stdout: str, stderr: str, cwd: str) -> None:
    """Become `python *argv`: never returns (the program's end, or its exception, exits the process)."""
    import runpy

    for fileno, path in ((1, stdout), (2, stderr)):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, fileno)
        os.close(fd)
    os.chdir(cwd)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")
    sys.exit(0)


def _serve(jobs_path: str, results_path: str) -> None:
    jobs = json.loads(Path(jobs_path).read_text())
    _warm_up()
    waiting, running, status = list(jobs["programs"]), {}, {}
    errors = {key: err for key, _, (_, err) in jobs["programs"]}
    while waiting or running:
        while waiting and len(running) < jobs["workers"]:
            key, argv, (stdout, stderr) = waiting.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(argv, stdout, stderr, jobs["cwd"])
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
                with open(errors[key], "a") as err:
                    err.write(f"\ntimed out after {jobs['timeout_s']} s\n")
        time.sleep(0.01)
    Path(results_path).write_text(json.dumps(status))


if __name__ == "__main__":
    _serve(*sys.argv[1:3])
