"""The generated call path of a CUDA launcher: resolve, look up, lock, run.

`launch_function` writes one straight-line function per launcher. Its first lines are the
same-arguments fast path: a call whose arguments are the very objects of the last call
(qgraph arrays by their parameter bytes, numbers by identity) replays the last call's graph
instance with one `cuGraphLaunch`, skipping resolution, both lookups and the replay frame.
Then the new-numbers fast path: the same arrays with new annotated numbers (the time of a
step) update that instance's changed nodes and launch it (`TaskGraph.renumber`).
The general path below it resets what that fast path remembers and records it again after a
plain graph replay, so it always describes the instance as the last call left it.
"""

from __future__ import annotations

import threading

from ..args.devices import OtherDevice, device_checks
from ..args.fast_paths import Hop, fixed_scalar_path
from ..args.kinds import FlagKind, ScalarKind, arg_type
from ..args.resolve import resolution
from ..driver.device import capturing, driver, kernel_failure, stream_handle
from ..lang import generated
from ..lang.generated import Lines
from ..runtime import call_hooks
from ..runtime.arrays import Ndarray
from .checks import display_names, element_annotations, fixed_scalar_types, frozen_number_lines

NEVER = object()  # matches no argument: the fast path's memory when it remembers nothing


def forgotten(n: int) -> tuple:
    """What the fast paths remember when they remember nothing (n arguments): the arguments,
    then the instance's exec handle, its TaskGraph and the parameter bytes it was set up for."""
    return (NEVER,) * n + (None, None, None)


def device_resolution(launcher, ns: dict, elsewhere: str, mutable_flag: str = "", hop: Hop | None = None) -> Lines:
    """Argument resolution on the launcher's device; an argument living on another one runs
    `elsewhere` (a qgraph array runs `hop` where given: args.resolve.resolution)."""
    src = launcher.src
    out = Lines()
    with out.block("try:"):
        out.add(resolution(display_names(src), fixed_scalar_types(src), "cuda", ns, Ndarray,
                           elements=element_annotations(src), mutable_flag=mutable_flag,
                           device_checks=device_checks(launcher.device), hop=hop))
    ns["_OtherDevice"] = OtherDevice
    with out.block("except _OtherDevice:"):
        out.line(elsewhere)
    return out


def resolve_function(launcher):
    """resolve(a0, ..., an) -> (key, parameter bytes), for compile(), inspect() and the plain dispatch
    (launcher.bind; the kernel chose the device already)."""
    src = launcher.src
    n = len(src.param_names)
    ns: dict = {}
    out = Lines.of_body(frozen_number_lines(src, ns))
    out.add(device_resolution(launcher, ns, "raise"))
    out.line(f"return {_numbered('s', n)}, {_numbered('v', n)}")
    return generated.function(out.function(f"resolve({', '.join(f'a{k}' for k in range(n))})"), "resolve",
                              f"argument resolution of kernel {src.qualname} (cuda)", ns)


def _numbered(prefix: str, n: int) -> str:
    """`(s0, s1)`, `(s0,)`, `()`: the tuple display of n numbered locals."""
    return f"({', '.join(f'{prefix}{k}' for k in range(n))}{',' if n == 1 else ''})"


def _probes(src) -> tuple[list[str], list[str]]:
    """Per argument: the fast path's test against the remembered m[k], and what to remember.
    A qgraph array is remembered by its parameter bytes (one object per array, kept alive
    here instead of the array), anything else by identity."""
    tests, remember = [], []
    for k, fixed in enumerate(fixed_scalar_types(src)):
        if fixed is not None:  # an annotated scalar parameter: never an array
            tests.append(f"a{k} is m[{k}]")
            remember.append(f"a{k}")
        else:
            tests.append(f"(type(a{k}) is _Ndarray and a{k}._abi is m[{k}] or a{k} is m[{k}])")
            remember.append(f"v{k} if type(a{k}) is _Ndarray else a{k}")
    return tests, remember


def _locked(out: Lines, body: Lines) -> None:
    """`body` under the device's lock, made current on this thread first."""
    with out.block("if _ident() != _dev._thread:"):
        out.line("_dev.make_current()")
    out.line("_acquire()")
    with out.block("try:"):
        out.add(body)
    with out.block("finally:"):
        out.line("_release()")


def _same_arguments(n: int, tests: list[str]) -> Lines:
    """The same-arguments fast path: the very objects of the last call replay its instance."""
    out, replay = Lines(), Lines()
    with replay.block("if _again[0] is m:"):  # still so under the lock: replay the instance
        replay.line(f"r = _glaunch(m[{n}], _stream)[0]")
        with replay.block("if r:"):
            replay.line("raise _gfail(r, 'cuGraphLaunch')")
        replay.line("_stats.replays += 1", "return")
    out.line("m = _again[0]")
    with out.block(f"if {' and '.join(tests + ['stream is None', 'not _hooked[0]'])}:"):
        _locked(out, replay)
    return out


def _new_numbers(src, ns: dict, n: int) -> Lines:
    """The new-numbers fast path: a call whose arrays (and other arguments) are the last call's
    and whose annotated numbers are new updates the remembered instance's nodes in place and
    launches it, skipping resolution and the instance rotation of a graph miss (a simulation
    step passing the time). Empty for a kernel without annotated numbers."""
    fixed = fixed_scalar_types(src)
    numbers = [k for k, fix in enumerate(fixed) if fix is not None and isinstance(arg_type(fix), ScalarKind)]
    out = Lines()
    if not numbers:
        return out
    tests, _ = _probes(src)
    same = [test for k, test in enumerate(tests) if k not in numbers]
    held = [f"w{k}" if k in numbers else f"mp[{k}]" for k in range(n)]
    kept = [f"a{k}" if k in numbers else f"m[{k}]" for k in range(n)]
    update = Lines()
    with update.block("if _again[0] is m:"):
        update.line(f"inst = m[{n + 1}].renumber(mp, p, {_numbered('a', n)}, _stream)")
        with update.block("if inst is not None:"):
            update.line(f"_again[0] = ({', '.join(kept)}, inst.exec, m[{n + 1}], p)", "return")
    with out.block(f"if {' and '.join(same + [f'm[{n}] is not None', 'stream is None', 'not _hooked[0]'])}:"):
        for k in numbers:  # converted as argument resolution's fast path converts them (else: the general path)
            path = fixed_scalar_path(k, f"a{k}", fixed[k], "cuda", ns)
            out.line(f"t = type(a{k})", f"w{k} = {path.value} if {path.guard} else None")
        with out.block(f"if {' and '.join(f'w{k} is not None' for k in numbers)}:"):
            out.line(f"mp = m[{n + 2}]", f"p = ({', '.join(held)}{',' if n == 1 else ''})")
            _locked(out, update)
    return out


def launch_function(launcher, strict: bool = False):
    """launch(a0, ..., stream): the same-arguments fast path, then resolve inline, look up, run.
    `strict`: the launch of calls routed here from another device, which routes no further."""
    src = launcher.src
    n = len(src.param_names)
    d = driver()
    parts = launcher.call_parts()
    ns: dict = {"_ident": threading.get_ident, "_dev": launcher.device, "_get": parts["specs"].get,
                "_specialise": parts["specialise"], "_switch": parts["switch"], "_last": parts["last"],
                "_stream": launcher.device.stream_handle, "_shandle": stream_handle, "_FLAG_OK": FlagKind.SHAPE_OK,
                "_flag_error": parts["flag_error"], "_acquire": launcher.target.lock.acquire,
                "_hold": launcher.lifetimes.hold, "_release": launcher.target.lock.release,
                "_again": launcher.again, "_forgotten": forgotten(n), "_glaunch": d.cuGraphLaunch,
                "_gfail": kernel_failure(src.name), "_stats": launcher.stats, "_Ndarray": Ndarray,
                "_hooked": call_hooks.HOOKED, "_on_call": call_hooks.on_call, "_launcher": launcher,
                "_BoundCall": call_hooks.BoundCall,
                "_watching": call_hooks.WATCHING, "_note": call_hooks.note_writes,
                "_written": launcher.written}
    args = ", ".join(f"a{k}" for k in range(n))
    out = Lines.of_body(frozen_number_lines(src, ns))
    with out.block("if _watching[0]:"):  # a tape needs arrays as its calls left them: count this call's writes
        out.line(f"_note(_written, {_numbered('a', n)})")
    tests, remember = _probes(src)
    if not n:  # no argument to compare: the memory is its instance, or None
        tests.append("m[0] is not None")
    fast = not launcher.options.debug  # a debug call reads the checks' record after every launch
    if fast:
        out.add(_same_arguments(n, tests))
        out.add(_new_numbers(src, ns, n))
    # `pure` stays True when every argument is a qgraph array, a number or a cached struct.
    # An argument on another device sends the call there: a qgraph array straight to that
    # device's strict launch (which routes nothing further), anything else through Kernel._route
    out.line("pure = True")
    ns["_route"], ns["_hop"] = launcher.kernel.route, launcher.kernel.hop
    hop = None if strict else lambda a: f"return _hop({a}._device)({args}{', ' if n else ''}stream)"
    out.add(device_resolution(launcher, ns, f"return _route({_numbered('a', n)}, stream, {strict})",
                              mutable_flag="pure", hop=hop))
    with out.block("if _ident() != _dev._thread:"):  # after resolution: a routed call sets only its own device
        out.line("_dev.make_current()")
    out.line(f"key = {_numbered('s', n)}", f"p = {_numbered('v', n)}", f"call_args = {_numbered('a', n)}")
    if parts["extents"] is not None:  # arrays shorter than the loops over them (backends.extent_checks); a call
        # whose loops reach nothing then is not remembered by the fast paths, which skip this check
        out.add(parts["extents"].lines(ns, "a", "call_args", forgiven="pure = False"))
    shape = FlagKind.shape_field
    for k in parts["flags"]:
        with out.block(f"if p[{k}][{shape.start}:{shape.stop}] not in _FLAG_OK:"):
            out.line(f"raise _flag_error({k}, p[{k}])")
    # a tape or a @qgraph.graph body listening on some thread: the call is theirs first (runtime.call_hooks)
    with out.block("if _hooked[0] and _on_call(_BoundCall(_launcher, key, call_args, p, stream)):"):
        out.line("return")
    # the device's lock: calls from several threads must not interleave their parameter
    # writes, node updates and launches (the GIL serialises Python anyway: no parallelism lost)
    out.line("_acquire()")
    with out.block("try:"):
        out.add(_run_locked(parts, ns, fast, remember, n))
    with out.block("finally:"):
        out.line("_release()")
    return generated.function(out.function(f"launch({args}{', ' if n else ''}stream)"), "launch",
                              f"launch of kernel {src.qualname} (cuda)", ns)


def _run_locked(parts: dict, ns: dict, fast: bool, remember: list[str], n: int) -> Lines:
    """Under the lock: the stream (a capturing one records into another library's graph), the
    specialisation, the run, then what the fast paths remember (or, debugging, the record read)."""
    ns["_capturing"], ns["_record"] = capturing, parts["capture"]
    out = Lines()
    out.line("_again[0] = _forgotten")  # whatever this call does to the graph instances
    with out.block("if stream is None:"):
        out.line("s = _stream")
    with out.block("else:"):
        out.line("s = _shandle(stream)")
        with out.block("if _capturing(s):"):
            out.line("return _record(_BoundCall(_launcher, key, call_args, p, s))")
    out.line("runner = _get(key)")
    with out.block("if runner is None:"):
        out.line("runner = _specialise(key, call_args)")
    with out.block("if runner is not _last[0]:"):
        out.line("_switch(runner)")
    # qgraph arrays are freed in order on qgraph's stream, after every launch queued there:
    # only foreign arrays (their allocators do not wait for it) and other streams need holding
    with out.block("if not pure or stream is not None:"):
        out.line("_hold(s, call_args)")
    out.line("inst = runner.run(call_args, p, s)")  # a plain graph replay returns its instance
    if fast:
        with out.block("if inst is not None and pure and stream is None and runner.again:"):
            out.line(f"_again[0] = ({', '.join(remember)}{', ' if n else ''}inst.exec, runner.graph, p)")
    else:  # every call waits for the device and reads the record of the checks
        ns.update({"_read": parts["debug_record"].read, "_failed": parts["check_failed"]})
        out.line("found = _read(s)")
        with out.block("if found is not None:"):
            out.line("_failed(runner, found)")
    return out
