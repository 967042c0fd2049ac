"""The binder: a generated `__call__` (and `compile`, `inspect`, `grad`) with the kernel's own
parameters, so Python binds a call's arguments (and names the kernel in a binding error) and the
launch gets them by position, implicit parameters (module arrays, the random state) read in.
The one generated piece of the call path before the launcher's resolver."""

from __future__ import annotations

from collections.abc import Callable

from ..lang import generated
from ..lang.front.parse import KernelSource
from ..lang.front.regions import control_regions
from ..tracebacks import user_error


def bind_class(kernel_cls: type, src: KernelSource, fn: Callable, progress, runtime_names: dict) -> type:
    """A Kernel subclass whose __call__ has the kernel's own parameters (fast binding); `runtime_names`:
    `_qg_state` (the runtime state, whose generation a call checks) and `_qg_rng_state`."""
    params = []
    ns: dict = {**runtime_names, "_qg_globals": fn.__globals__, "_qg_cells": fn.__closure__,
                "_qg_progress": progress}  # the calls' default progress=
    positional_defaults = fn.__defaults__ or ()
    user_params = [p for p in src.params if p.source is None]  # implicit ones are read by the binder
    first_default = len([p for p in user_params if not p.keyword_only]) - len(positional_defaults)
    star_done = False
    for k, p in enumerate(user_params):
        if p.keyword_only and not star_done:
            params.append("*")
            star_done = True
        if p.keyword_only:
            default = (fn.__kwdefaults__ or {}).get(p.name, _NO_DEFAULT)
        else:
            default = positional_defaults[k - first_default] if k >= first_default else _NO_DEFAULT
        if default is _NO_DEFAULT:
            params.append(p.name)
        else:
            ns[f"_qg_default_{k}"] = default
            params.append(f"{p.name}=_qg_default_{k}")
    if not star_done:
        params.append("*")
    params.append("stream=None")
    names = [p.name if p.source is None else p.source for p in src.params]
    ns["_qg_user_error"] = user_error
    call = generated.Lines()
    with call.block("if _qg_self.generation != _qg_state.generation:"):
        call.line("_qg_self.attach()")
    loops = any(True for _ in control_regions(src.body))  # kernel(..., progress=True): runtime.progress
    if loops:
        with call.block("if progress:"):
            call.line(f"return _qg_self.launch_watched(progress, ({', '.join(names)},), stream)")
    call.line(f"return _qg_self.launch({', '.join([*names, 'stream'])})")
    body = _at_boundary(call)
    params_call = params + (["progress=_qg_progress"] if loops else [])
    # _qg_: no parameter can be named so
    call = generated.function(body.function(f"__call__(_qg_self, {', '.join(params_call)})"), "__call__",
                              f"binder of kernel {src.qualname}", ns)
    # Python names the function in a binding error ("kernel step() missing 1 required positional
    # argument: 'v'"): the kernel's name there costs nothing on the call path
    call.__qualname__ = f"kernel {src.qualname}"
    # compile(...) binds like a call and compiles that signature without running it; inspect(...)
    # binds like a call too, and reports the code of that signature
    compile_ = _binder("compile", "precompile_values", src, params, names, ns,
                       "Compile (or load from the compile cache) the signature of these example arguments "
                       "without running the kernel; returns the signature's type texts.")
    inspect_ = _binder("inspect", "inspect_values", src, params, names, ns,
                       "The code qgraph generates for the signature of these example arguments (compiled or "
                       "loaded without running the kernel): a qgraph.KernelCode; print it for a report.")
    grad = _binder("grad", "grad_values", src, params, names, ns,
                   "Run the adjoint of a call with these arguments: the gradients of its outputs, in the `.grad` "
                   "of its array arguments (requires_grad=True), flow back into the `.grad` of its inputs.")
    return type(f"Kernel_{src.name}", (kernel_cls,),
                {"__call__": call, "compile": compile_, "inspect": inspect_, "grad": grad, "__slots__": ()})


def _binder(method: str, target: str, src, params: list, names: list, ns: dict, doc: str):
    """kernel.<method>(...): binds its arguments like a call, then runs `Kernel.<target>` on them."""
    body = _at_boundary(generated.Lines().line(f"return _qg_self.{target}({', '.join(names)})"))
    fn = generated.function(body.function(f"{method}(_qg_self, {', '.join(params)})"), method,
                            f"{method} binder of kernel {src.qualname}", ns)
    fn.__qualname__ = f"kernel {src.qualname}.{method}"
    fn.__doc__ = doc
    return fn


def _at_boundary(statements: generated.Lines) -> generated.Lines:
    """`statements` in a `try` whose handler shortens the traceback of an error qgraph raised for the
    user's mistake (tracebacks.py) and re-raises it: free in Python 3.11 until something raises."""
    body = generated.Lines()
    with body.block("try:"):
        body.add(statements)
    with body.block("except Exception as _qg_e:"):
        body.line("_qg_user_error(_qg_e)", "raise")
    return body


_NO_DEFAULT = object()
