"""Processes for the multi-GPU examples: one rank's qgraph and torch.distributed set-up, and a
local launcher (spawned processes, one per GPU) that reports a failing or silent rank instead of
leaving its peers waiting."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import qgraph


def init_rank(arch: str, rank: int, world: int, local_rank: int | None = None, init_method: str = "env://") -> None:
    """qgraph and torch.distributed for one rank: cuda -> device local_rank with NCCL, cpu -> gloo."""
    import torch
    import torch.distributed as dist

    local_rank = rank if local_rank is None else local_rank
    if arch == "cuda":
        count = qgraph.device_count()
        if local_rank >= count:
            raise RuntimeError(f"rank {rank} wants CUDA device {local_rank} but this host has {count}; "
                               f"run at most {count} processes per host (torchrun --nproc-per-node={count})")
        qgraph.init("cuda", device=local_rank)
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", init_method=init_method, rank=rank, world_size=world,
                                device_id=torch.device("cuda", local_rank))
    else:
        qgraph.init("cpu")
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned(rank: int, world: int, arch: str, port: int, fn: Callable, kwargs: dict, results) -> None:
    import torch.distributed as dist

    try:
        init_rank(arch, rank, world, init_method=f"tcp://127.0.0.1:{port}")
        out = fn(**kwargs)
        results.put((rank, "ok", out if rank == 0 else None))
    except BaseException as e:  # reported to the parent, which raises it
        import traceback

        results.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(nprocs: int, arch: str, fn: Callable, timeout: float = 600.0, **kwargs):
    """Run fn(**kwargs) on nprocs local processes (one per GPU on cuda); rank 0's result.

    For tests and single-host runs without torchrun. fn must be a module-level function. On the
    CPU the ranks fork from multiprocessing's fork server, which imports torch.distributed and
    qgraph once per process (3.5 s of CPU time a rank otherwise): environment variables are the
    server's, as they were at the first CPU launch. CUDA ranks start as fresh processes."""
    import multiprocessing
    import queue

    if arch == "cpu":
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["torch.distributed", "qgraph", __name__]
                                   + ([fn.__module__] if fn.__module__ != "__main__" else []))
    else:
        ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_spawned, args=(r, nprocs, arch, port, fn, kwargs, results)) for r in range(nprocs)]
    for p in procs:
        p.start()
    out, errors, answered, deadline = None, [], 0, time.monotonic() + timeout
    try:
        while answered < nprocs and not errors:
            try:
                rank, status, value = results.get(timeout=1.0)
            except queue.Empty:
                dead = [f"rank {r}: exited with code {p.exitcode} before answering (a script that calls launch() "
                        "needs `if __name__ == \"__main__\":` around it: ranks start by importing it)"
                        for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead:  # a rank that died without a word (a crash, or a spawn failure) would hang its peers
                    errors += dead
                elif time.monotonic() > deadline:
                    errors.append(f"no answer from {nprocs - answered} rank(s) within {timeout:.0f} s")
                continue
            answered += 1
            if status == "error":
                errors.append(f"rank {rank}: {value}")
            elif rank == 0:
                out = value
    finally:
        for p in procs:
            p.join(timeout=30 if not errors else 2)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise RuntimeError("launch: a rank failed\n" + "\n".join(errors))
    return out


def torchrun_world() -> int | None:
    """The world size when this process is one of torchrun's ranks, else None."""
    return int(os.environ["WORLD_SIZE"]) if "RANK" in os.environ and "WORLD_SIZE" in os.environ else None


def run_everywhere(arch: str, nprocs: int, fn: Callable, **kwargs):
    """fn(**kwargs) on every rank, for an example's command line: under torchrun on this process's rank
    (its process group set up and torn down here; None on every rank but 0), else on `nprocs` local
    processes started here (launch); rank 0's result."""
    if torchrun_world() is None:
        return launch(nprocs, arch, fn, **kwargs)
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    init_rank(arch, rank, torchrun_world(), int(os.environ.get("LOCAL_RANK", 0)))
    try:
        result = fn(**kwargs)
    finally:
        dist.destroy_process_group()
    return result if rank == 0 else None


if __name__ == "__main__":  # a module the examples import
    import sys

    from qgraph.examples.command_line import helper_module

    sys.exit(helper_module("ranks", __doc__, ("heat_multi_gpu",)))
