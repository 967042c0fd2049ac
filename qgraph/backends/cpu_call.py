"""The CPU launch path, generated per kernel from named pieces (as backends/cuda_call.py on CUDA):
resolve the arguments inline, count a watched call's writes, hand a BoundCall to the listeners,
look the signature's runner up and call it, then read its status. The launcher hands over what
the generated code calls of it (CpuLauncher.call_parts); launcher.dispatch is the same, plainly.
"""

from __future__ import annotations

import threading

from ..args.resolve import resolver_lines
from ..compiler.cpu_interrupts import HANDOVER
from ..driver.device import stream_handle
from ..lang import generated
from ..lang.cpu.loops import RunnerStatus
from ..lang.front.writes import written_params
from ..lang.lower.debug_checks import CANCEL_WORD, YIELD_COUNT, YIELD_STEP
from ..runtime import call_hooks
from ..runtime.arrays import Ndarray
from .checks import display_names, element_annotations, fixed_scalar_types, flag_shape_error, frozen_number_lines


def resolve_function(launcher):
    """resolve(a0, ..., an) -> (key, values), for compile(), inspect() and the plain dispatch (launcher.bind)."""
    src = launcher.src
    n = len(src.param_names)
    ns: dict = {}
    comma = "," if n == 1 else ""
    lines = frozen_number_lines(src, ns)
    lines += resolver_lines(display_names(src), fixed_scalar_types(src), "cpu", ns, Ndarray,
                            elements=element_annotations(src), written=written_params(src))
    lines.append(f"    return ({', '.join(f's{k}' for k in range(n))}{comma}), "
                 f"({', '.join(f'v{k}' for k in range(n))}{comma})")
    source = f"def resolve({', '.join(f'a{k}' for k in range(n))}):\n" + "\n".join(lines) + "\n"
    return generated.function(source, "resolve", f"argument resolution of kernel {src.qualname} (cpu)", ns)

def launch_function(launcher):
    """launch(a0, ..., stream): resolve inline, the hook, look the runner up, call it."""
    src = launcher.src
    parts = launcher.call_parts()
    n = len(src.param_names)
    ns: dict = {"_get": parts["specs"].get, "_first_call": parts["first_call"], "_flag_error": flag_shape_error,
                "_src": src, "_stream_handle": stream_handle, "_rec": parts["record"],
                "_task_error": parts["task_error"], "_check_failed": parts["check_failed"],
                "_debug_lock": parts["debug_lock"], "_hooked": call_hooks.HOOKED, "_on_call": call_hooks.on_call,
                "_watching": call_hooks.WATCHING, "_note": call_hooks.note_writes,
                "_written": launcher.written,
                "_launcher": launcher, "_BoundCall": call_hooks.BoundCall}
    comma = "," if n == 1 else ""
    values = ", ".join(f"v{k}" for k in range(n))
    args = ", ".join(f"a{k}" for k in range(n))
    # stream= means nothing on the CPU, but a value that is no stream is the same error as on CUDA
    lines = ["    if stream is not None:", "        _stream_handle(stream)"]
    lines += frozen_number_lines(src, ns)
    lines += resolver_lines(display_names(src), fixed_scalar_types(src), "cpu", ns, Ndarray,
                            elements=element_annotations(src), written=written_params(src))
    lines.append(f"    key = ({', '.join(f's{k}' for k in range(n))}{comma})")
    if parts["extents"] is not None:  # the extents its loops make certain (backends.extent_checks)
        lines += parts["extents"].lines(ns, "v", f"({args}{comma})").rendered(1)
    lines += ["    if _watching[0]:",  # a tape needs arrays as its calls left them: this call's writes counted
              f"        _note(_written, ({args}{comma}))",
              # a call in a @qgraph.graph body (counted for its stats) or under a tape (which may run it)
              f"    if _hooked[0] and _on_call(_BoundCall(_launcher, key, ({args}{comma}), ({values}{comma}))):",
              "        return",
              *_overlap_lines(parts, ns),
              # kernel.cancel() stops this call from here on, also while it compiles: a fresh word
              *([f"    _rec[{CANCEL_WORD}] = 0"] if parts["loops"] else []),
              "    runner = _get(key)",
              "    if runner is None:",
              f"        return _first_call(key, ({values}{comma}), ({args}{comma}))"]
    for k in parts["flags"]:
        lines += [f"    if v{k}.shape not in ((), (1,)):",
                  f"        raise _flag_error(_src, {k}, v{k}.shape)"]
    if parts["yields"]:  # other threads let run if there are any
        ns.update({"_threads": threading.active_count, "_handover": HANDOVER})
        lines += ["    shared = _threads() > 1", "    if shared:", f"        _rec[{YIELD_COUNT}] = 1",
                  f"        _rec[{YIELD_STEP}] = 0", "        _handover.enter()",
                  "    else:", f"        _rec[{YIELD_COUNT}] = 0"]
    call = f"({values}{', ' if n else ''}_rec)"
    run = ["    try:", f"        r = runner{call}"]
    if not parts["loops"]:  # the serial form found the call too large for it: the parallel form, right away
        ns["_parallel_of"] = parts["parallel_of"]
        run += [f"        if r is not None and r == {int(RunnerStatus.NEEDS_PARALLEL)}:",
                f"            r = _parallel_of(key, ({values}{comma})){call}"]
    run += ["    except Exception as e:", "        raise _task_error(key, e) from None"]
    if parts["yields"]:
        run += ["    finally:", "        if shared:", "            _handover.leave()"]
    if launcher.options.debug:  # a failed check: its record, read now (one call at a time, so records do not mix)
        run = ["    with _debug_lock:"] + ["    " + line for line in run] + \
              ["        if _rec[0]:", "            _check_failed(key)"]
    lines += run
    if parts["loops"]:  # the runner's status: the guard stopped a loop, or Ctrl-C arrived
        ns.update({"_last": parts["last"], "_stopped": parts["stopped"]})
        lines += ["    _last[0] = r", "    if r[0]:", f"        _stopped(r, key, ({values}{comma}))"]
    else:  # None, CHUNK_INTERRUPTED when Ctrl-C stopped a chunked parallel loop, or NEEDS_PARALLEL
        ns["_unfinished"] = parts["unfinished"]
        lines += ["    if r is not None:", f"        _unfinished(r, key, ({values}{comma}))"]
    source = f"def launch({args}{', ' if n else ''}stream):\n" + "\n".join(lines) + "\n"
    return generated.function(source, "launch", f"launch of kernel {src.qualname} (cpu)", ns)

def _overlap_lines(parts: dict, ns: dict) -> list[str]:
    """The launch's check that the arrays of interchanged loops do not partially overlap."""
    overlap = parts["overlap"]
    if overlap is None:
        return []
    ns["_overlap"] = overlap.check
    return [f"    _overlap({', '.join(f'v{k}' for k in overlap.positions)})"]


def leaf_caller(runner, flat, n: int):
    """`run(v0, ..., vn)` calling the runner with every struct argument's leaves in place."""
    values = ", ".join(f"v{k}" for k in range(n))
    leaves = [f"v{k}" if j is None else f"v{k}[{j}]" for k, j in flat.slots]  # flat.slots: (argument, leaf)
    body = generated.Lines().line(f"return _runner({', '.join([*leaves, 'record'])})")
    return generated.function(body.function(f"run({values}, record)"), "run",
                              f"struct unpacking of kernel {flat.src.qualname}", {"_runner": runner})
