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
from ..args.kinds import FlagKind, ScalarKind, arg_type
from ..args.resolve import fixed_scalar_test, resolver_lines
from ..driver.device import capturing, driver, kernel_failure, stream_handle
from ..lang import generated
from ..runtime.arrays import Ndarray
from . import step_body, step_capture
from .checks import display_names, element_annotations, fixed_scalar_types, frozen_number_lines

NEVER = object()  # matches no argument: the fast path's memory when it remembers nothing


def forgotten(n: int) -> tuple:
    """What the fast paths remember when they remember nothing (n arguments): the arguments,
    then the instance's exec handle, its TaskGraph and the parameter bytes it was set up for."""
    return (NEVER,) * n + (None, None, None)


def resolution_lines(launcher, ns: dict, elsewhere: str, mutable_flag: str = "", hop: str = "") -> list[str]:
    """Argument resolution on the launcher's device; an argument living on another one runs
    `elsewhere` (a qgraph array runs `hop` where given: args.resolve.resolver_lines)."""
    src = launcher.src
    lines = ["    try:"]
    lines += resolver_lines(display_names(src), fixed_scalar_types(src), "cuda", ns, Ndarray, indent="        ",
                            elements=element_annotations(src), mutable_flag=mutable_flag,
                            device_checks=device_checks(launcher.device), hop=hop)
    ns["_OtherDevice"] = OtherDevice
    return lines + ["    except _OtherDevice:", f"        {elsewhere}"]


def resolve_function(launcher):
    """resolve(a0, ..., an) -> key, for compile() (Kernel._compile chose the device already)."""
    src = launcher.src
    n = len(src.param_names)
    ns: dict = {}
    lines = frozen_number_lines(src, ns)
    lines += resolution_lines(launcher, ns, "raise")
    lines.append(f"    return ({', '.join(f's{k}' for k in range(n))}{',' if n == 1 else ''})")
    source = f"def resolve({', '.join(f'a{k}' for k in range(n))}):\n" + "\n".join(lines) + "\n"
    return generated.function(source, "resolve", f"argument resolution of kernel {src.qualname} (cuda)", ns)


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


def _number_lines(src, ns: dict, n: int) -> list[str]:
    """The new-numbers fast path: a call whose arrays (and other arguments) are the last call's
    and whose annotated numbers are new updates the remembered instance's nodes in place and
    launches it, skipping resolution and the instance rotation of a graph miss (a simulation
    step passing the time). Empty for a kernel without annotated numbers."""
    fixed = fixed_scalar_types(src)
    numbers = [k for k, fix in enumerate(fixed) if fix is not None and isinstance(arg_type(fix), ScalarKind)]
    if not numbers:
        return []
    tests, _ = _probes(src)
    same = [test for k, test in enumerate(tests) if k not in numbers]
    lines = [f"    if {' and '.join(same + [f'm[{n}] is not None', 'stream is None', 'not _steps[0]'])}:"]
    for k in numbers:  # converted as argument resolution's fast path converts them (else: the general path)
        kind = arg_type(fixed[k])
        ns[f"_nconv{k}"], ns[f"_nown{k}"] = kind.pack, kind.dtype.type
        lines += [f"        t = type(a{k})",
                  f"        w{k} = _nconv{k}(a{k}) if {fixed_scalar_test(k, f'a{k}', kind, ns)} or t is _nown{k} "
                  "else None"]
    held = [f"w{k}" if k in numbers else f"mp[{k}]" for k in range(n)]
    kept = [f"a{k}" if k in numbers else f"m[{k}]" for k in range(n)]
    comma = "," if n == 1 else ""
    return lines + [f"        if {' and '.join(f'w{k} is not None' for k in numbers)}:",
                    f"            mp = m[{n + 2}]",
                    f"            p = ({', '.join(held)}{comma})",
                    "            if _ident() != _dev._thread:",
                    "                _dev.make_current()",
                    "            _acquire()",
                    "            try:",
                    "                if _again[0] is m:",
                    f"                    inst = m[{n + 1}].renumber(mp, p, ({', '.join(f'a{k}' for k in range(n))}"
                    f"{comma}), _stream)",
                    "                    if inst is not None:",
                    f"                        _again[0] = ({', '.join(kept)}, inst.exec, m[{n + 1}], p)",
                    "                        return",
                    "            finally:",
                    "                _release()"]


def launch_function(launcher, strict: bool = False):
    """launch(a0, ..., stream): the same-arguments fast path, then resolve inline, look up, run.
    `strict`: the launch of calls routed here from another device, which routes no further."""
    src = launcher.src
    n = len(src.param_names)
    d = driver()
    ns: dict = {"_ident": threading.get_ident, "_dev": launcher.device, "_get": launcher._specs.get,
                "_specialise": launcher._specialise, "_switch": launcher._switch, "_last": launcher._last,
                "_stream": launcher.device.stream_handle, "_shandle": stream_handle, "_FLAG_OK": FlagKind.SHAPE_OK,
                "_flag_error": launcher._flag_error, "_acquire": launcher.target.lock.acquire,
                "_hold": launcher.lifetimes.hold, "_release": launcher.target.lock.release,
                "_again": launcher.again, "_forgotten": forgotten(n), "_glaunch": d.cuGraphLaunch,
                "_gfail": kernel_failure(src.name), "_stats": launcher.stats, "_Ndarray": Ndarray,
                "_steps": step_body.ACTIVE, "_step": step_capture.intercept, "_launcher": launcher}
    comma = "," if n == 1 else ""
    args = ", ".join(f"a{k}" for k in range(n))
    lines = frozen_number_lines(src, ns)
    tests, remember = _probes(src)
    if not n:  # no argument to compare: the memory is its instance, or None
        tests.append("m[0] is not None")
    fast = not launcher.options.debug  # a debug call reads the checks' record after every launch
    if fast:
        lines += ["    m = _again[0]",
                  f"    if {' and '.join(tests + ['stream is None', 'not _steps[0]'])}:",
                  "        if _ident() != _dev._thread:",
                  "            _dev.make_current()",
                  "        _acquire()",
                  "        try:",
                  "            if _again[0] is m:",  # still so under the lock: replay the instance
                  f"                r = _glaunch(m[{n}], _stream)[0]",
                  "                if r:",
                  "                    raise _gfail(r, 'cuGraphLaunch')",
                  "                _stats.replays += 1",
                  "                return",
                  "        finally:",
                  "            _release()"]
        lines += _number_lines(src, ns, n)
    lines.append("    pure = True")
    # `pure` stays True when every argument is a qgraph array, a number or a cached struct.
    # An argument on another device sends the call there: a qgraph array straight to that
    # device's strict launch (which routes nothing further), anything else through Kernel._route
    ns["_route"], ns["_hop"] = launcher.kernel._route, launcher.kernel._hop
    hop = "" if strict else f"return _hop({{a}}._device)({args}{', ' if n else ''}stream)"
    lines += resolution_lines(launcher, ns, f"return _route(({args}{comma}), stream, {strict})", mutable_flag="pure",
                              hop=hop)
    lines += ["    if _ident() != _dev._thread:",  # after resolution: a routed call sets only its own device
              "        _dev.make_current()",
              f"    key = ({', '.join(f's{k}' for k in range(n))}{comma})",
              f"    p = ({', '.join(f'v{k}' for k in range(n))}{comma})",
              f"    call_args = ({args}{comma})"]
    shape = FlagKind.shape_field
    for k in launcher._flags:
        lines += [f"    if p[{k}][{shape.start}:{shape.stop}] not in _FLAG_OK:",
                  f"        raise _flag_error({k}, p[{k}])"]
    # inside a @qgraph.graph function (any thread recording one), the call is recorded, not launched
    lines += ["    if _steps[0] and _step(_launcher, key, call_args, p, stream):",
              "        return"]
    # a stream given with stream= may be capturing into another library's graph: record into it
    ns["_capturing"], ns["_record"] = capturing, launcher._capture.record
    # the device's lock: calls from several threads must not interleave their parameter
    # writes, node updates and launches (the GIL serialises Python anyway: no parallelism lost)
    lines += ["    _acquire()",
              "    try:",
              "        _again[0] = _forgotten",  # whatever this call does to the graph instances
              "        if stream is None:",
              "            s = _stream",
              "        else:",
              "            s = _shandle(stream)",
              "            if _capturing(s):",
              "                return _record(key, call_args, p, s)",
              "        spec = _get(key)",
              "        if spec is None:",
              "            spec = _specialise(key, call_args)",
              "        if spec is not _last[0]:",
              "            _switch(spec)",
              # qgraph arrays are freed in order on qgraph's stream, after every launch queued there:
              # only foreign arrays (their allocators do not wait for it) and other streams need holding
              "        if not pure or stream is not None:",
              "            _hold(s, call_args)",
              "        inst = spec.run(call_args, p, s)"]  # a plain graph replay returns its instance
    if fast:
        lines += ["        if inst is not None and pure and stream is None and spec.again:",
                  f"            _again[0] = ({', '.join(remember)}{', ' if n else ''}inst.exec, spec.graph, p)"]
    else:  # every call waits for the device and reads the record of the checks
        ns.update({"_read": launcher._record.read, "_failed": launcher._check_failed})
        lines += ["        found = _read(s)", "        if found is not None:", "            _failed(spec, found)"]
    lines += ["    finally:",
              "        _release()"]
    source = f"def launch({args}{', ' if n else ''}stream):\n" + "\n".join(lines) + "\n"
    return generated.function(source, "launch", f"launch of kernel {src.qualname} (cuda)", ns)
