"""`python -m qgraph precompile`: compile and cache kernels from the shell, for deployment images.

    python -m qgraph precompile mypkg.solver:step float32[2d] float32[2d] float
    python -m qgraph precompile mypkg/solver.py:warm_up

A kernel is compiled for the signature its type texts spell (as error messages print them);
anything else callable named so is a warm-up function, run as it is (it can call
qgraph.compile or the kernels themselves). Either way the compile cache is filled, so a
later process's first calls load from it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time


def resolve_target(target: str):
    """The object `module:name` (a module path, or a .py file) names."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{target!r}: expected module:name (e.g. mypkg.solver:step or path/to/solver.py:step)")
    if module_name.endswith(".py"):
        path = os.path.abspath(module_name)
        if not os.path.exists(path):
            raise ValueError(f"{target!r}: no file {module_name}")
        name = os.path.splitext(os.path.basename(path))[0]
        sys.path.insert(0, os.path.dirname(path))  # as `python path/to/solver.py` would see its siblings
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # importable by name: its compiled CPU code can be cached
        spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{target!r}: module {module.__name__} has no {attr!r}") from None


def precompile(target: str, types: list[str]) -> str:
    """Compile `target` (a kernel, for `types`) or run it (a warm-up function); a report line."""
    import qgraph
    from qgraph.args.examples import example_arguments

    found = resolve_target(target)
    arch = qgraph.current_arch()
    started = time.perf_counter()
    if isinstance(found, qgraph.Kernel):
        if not types:
            params = ", ".join(p.name for p in found._source.params if p.source is None)
            raise ValueError(f"{target} is a kernel: give the type of each argument ({params}) as signature texts, "
                             "e.g. float32[1d] float32[2d] float int32")
        loads = found.stats.cache_loads
        signature = qgraph.compile(found, *example_arguments(types, arch))
        how = "loaded from the compile cache" if found.stats.cache_loads > loads else "compiled"
        return (f"{found.__name__}({', '.join(signature)}) on {arch}: {how} in "
                f"{time.perf_counter() - started:.2f} s")
    if types:
        raise ValueError(f"{target} is not a kernel, so it takes no types: name a kernel, or a warm-up function "
                         "without them")
    if not callable(found):
        raise ValueError(f"{target} is neither a kernel nor a warm-up function")
    found()
    qgraph.sync()
    return f"ran {getattr(found, '__name__', target)}() on {arch} in {time.perf_counter() - started:.2f} s"
