"""Running many fuzzed programs: in this process (the quick test), or in worker processes that are
restarted when a program kills one, runs past its time, or after a number of programs (numba's
memory grows with every kernel it compiles)."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from multiprocessing.connection import wait
from pathlib import Path

from .check import Result, check
from .programs import generate

RECYCLE = 60  # programs per worker process before it is replaced


def fuzz(seeds: Iterable[int], workdir: str | Path | None = None,
         progress: Callable[[Result], None] | None = None) -> list[Result]:
    """Check programs `seeds` in this process (qgraph initialised by the caller)."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="qgraph-fuzz-"))
    out = []
    for seed in seeds:
        out.append(check(generate(seed), workdir))
        if progress is not None:
            progress(out[-1])
    return out


def _worker(conn, arch: str) -> None:
    """A worker process: programs in by seed, results out as dicts, until it is sent None."""
    import qgraph

    qgraph.init(arch)
    workdir = Path(tempfile.mkdtemp(prefix="qgraph-fuzz-"))
    while True:
        seed = conn.recv()
        if seed is None:
            return
        conn.send(asdict(check(generate(seed), workdir)))


class _Pool:
    """Worker processes fed one seed at a time, so a worker that dies names the seed that killed it."""

    def __init__(self, arch: str, jobs: int, timeout: float, cache: Path) -> None:
        self.arch, self.jobs, self.timeout, self.cache = arch, jobs, timeout, cache
        self.ctx = multiprocessing.get_context("spawn")
        self.busy: dict = {}  # connection -> [process, seed, started, programs done]
        self.started = 0

    def _start(self):
        # each worker its own compile cache: two processes writing one numba cache can crash
        os.environ["QGRAPH_CACHE_DIR"] = str(self.cache / f"w{self.started % self.jobs}")
        self.started += 1
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child, self.arch), daemon=True)
        proc.start()
        child.close()
        return parent, proc

    def run(self, seeds: list[int], progress: Callable[[Result], None]) -> list[Result]:
        todo, results = list(reversed(seeds)), []
        idle = [self._start() for _ in range(min(self.jobs, len(seeds)))]
        for conn, proc in idle:
            self._feed(conn, proc, todo, 0)
        while self.busy:
            ready = wait([c for c in self.busy] + [v[0].sentinel for v in self.busy.values()], timeout=1.0)
            for conn in list(self.busy):
                proc, seed, started, done = self.busy[conn]
                result = None
                if conn in ready or proc.sentinel in ready:
                    try:
                        result = Result(**conn.recv())
                    except (EOFError, OSError):
                        proc.join(5)
                        result = Result(seed, "crash", "?", [], f"the worker process died (exit code "
                                                                f"{proc.exitcode}) running this program")
                elif time.monotonic() - started > self.timeout:
                    proc.kill()
                    result = Result(seed, "crash", "?", [], f"no verdict after {self.timeout:.0f} s (killed)")
                if result is None:
                    continue
                if not result.source and result.verdict != "right":
                    result.source = generate(seed).source
                results.append(result)
                progress(result)
                del self.busy[conn]
                alive = proc.is_alive() and not (result.verdict == "crash" and self.arch == "cuda")
                if alive and done + 1 < RECYCLE and todo:
                    self._feed(conn, proc, todo, done + 1)
                    continue
                self._stop(conn, proc)
                if todo:
                    self._feed(*self._start(), todo, 0)
        return results

    def _feed(self, conn, proc, todo: list[int], done: int) -> None:
        if not todo:
            self._stop(conn, proc)
            return
        seed = todo.pop()
        conn.send(seed)
        self.busy[conn] = [proc, seed, time.monotonic(), done]

    @staticmethod
    def _stop(conn, proc) -> None:
        if proc.is_alive():
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        conn.close()


def run_workers(seeds: list[int], arch: str, jobs: int, timeout: float,
                progress: Callable[[Result], None]) -> list[Result]:
    """Check `seeds` in `jobs` worker processes; results in the order they finish."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("NUMBA_NUM_THREADS", str(max(1, cores // jobs)))
    cache = Path(os.environ.get("QGRAPH_FUZZ_CACHE") or tempfile.mkdtemp(prefix="qgraph-fuzz-cache-"))
    saved = os.environ.get("QGRAPH_CACHE_DIR")
    try:
        return _Pool(arch, jobs, timeout, cache).run(seeds, progress)
    finally:
        if saved is None:
            os.environ.pop("QGRAPH_CACHE_DIR", None)
        else:
            os.environ["QGRAPH_CACHE_DIR"] = saved
