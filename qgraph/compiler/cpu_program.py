"""Compile a kernel for the CPU: numba functions for groups of tasks, and a runner.

Parallel tasks become `prange` loops of `numba.njit(parallel=True)` functions; the runner
calls them in task order (for graph_while inside a do-while loop on the flag, in compiled
code). numba specialises per argument types; compiled code is cached on disk under the
qgraph cache directory, keyed by the generated code's fingerprint.
"""

from __future__ import annotations

import ast
import os
import sys

from ..lang import generated
from ..lang.cpu import codegen as cpu_codegen
from ..lang.front.parse import KernelSource
from ..lang.lower.debug_checks import DebugPlan
from ..lang.lower.lowering import PREFIX
from ..lang.lower.math_calls import MAX, MIN, ROUNDING_FUNCTIONS
from ..lang.options import DEFAULT_OPTIONS, KernelOptions
from . import numba_adapter as adapter
from .cache_keys import CacheKey, cache_key
from .code_cache import report_unusable
from .compile_depth import room_to_recurse
from .compile_gc import rare_collections
from .cpu_interrupts import SerialTaskInterrupted, chunk_functions, interrupted, thread_functions
from .cpu_math import cpu_math
from .llvm_cpu import FormEmitter, function_listing
from .random_code import random_functions
from .toolchain import toolchain_versions_digest


def _disk_cache(cache_dir: str, fingerprint: str) -> tuple[str, str, CacheKey] | None:
    """(directory, fingerprint, key) of the kernel's numba cache files; None, said once per directory,
    when the disk will not let the cache's key be read or made (nothing there could be trusted)."""
    directory = os.path.join(cache_dir, "cpu", toolchain_versions_digest())
    try:
        return directory, fingerprint, cache_key(cache_dir)
    except OSError as e:
        report_unusable(directory, e, "write", cache_dir)
        return None


def _trip_count(start, stop, step):
    if step == 0:
        raise ValueError("range() arg 3 must not be zero")
    if step > 0:
        n = (stop - start + step - 1) // step
    else:
        n = (start - stop - step - 1) // (-step)
    return n if n > 0 else 0


_TRIP_COUNT: list = []


def _trip_count_function():
    """`_trip_count` for compiled code, made once per process (each kernel that uses it would compile it again)."""
    if not _TRIP_COUNT:
        _TRIP_COUNT.append(adapter.njit(_trip_count, parallel=False, cache=None, called_from_python=False))
    return _TRIP_COUNT[0]


class CpuProgram:
    """The numba runner(s) of one kernel; numba compiles one overload per signature."""

    def __init__(self, src: KernelSource, cache_dir: str | None, options: KernelOptions = DEFAULT_OPTIONS,
                 kinds: list | None = None, funcs: list | None = None) -> None:
        """`src` flattened (lang.flat.view) with argument kinds `kinds` (None: untyped code) and
        @qgraph.func specialisations `funcs`; `options` resolved (debug mode needs `kinds`)."""
        debug = DebugPlan.of(options.debug, src.param_names, kinds) if options.debug else None
        module = cpu_codegen.cpu_module(src, options, kinds, funcs, debug)
        fast_math = options.fast_math
        self.fingerprint = module.fingerprint
        self.unit_tasks = module.unit_tasks
        self.sites = debug.sites if debug is not None else []
        cache = None
        # numba can reload cached code only for functions whose module it can import again
        if cache_dir is not None and _importable(src) and all(_importable(s) for _, _, s in module.func_codes):
            cache = _disk_cache(cache_dir, module.fingerprint)
        from . import cpu_atomics
        from .numba_probes import import_cpu_array_math

        import_cpu_array_math()  # before numba loads its registries (compile or cache load): unprobed
        injected = {**adapter.cpu_names(),
                    "_qg_interrupted": interrupted(), **chunk_functions(), **thread_functions(),
                    "_qg_SerialTaskInterrupted": SerialTaskInterrupted,
                    "_qg_trip_count": _trip_count_function()}
        for name in module.atomics:
            injected[PREFIX + name] = cpu_atomics.BY_NAME[name]
        injected.update(random_functions("cpu"))  # compiled when a kernel draws (numba compiles lazily)
        injected.update(cpu_math())
        injected.update({MIN: min, MAX: max})  # numba's CPU min/max follow Python's rule (lang.lower.math_calls)
        injected.update({name: cpu for name, (cpu, _) in ROUNDING_FUNCTIONS.items()})  # numba's are right
        if debug is not None:
            from .debug_functions import cpu_functions

            injected.update(cpu_functions())

        namespaces = []
        raw: dict[str, object] = {}
        for name, tree, owner in module.func_codes:
            ns = generated.run_tree(tree, owner.filename, f"cpu {name}", _namespace(tree, owner, injected))
            raw[name] = ns[name]
            namespaces.append(ns)
        kernel_ns = generated.run_tree(module.tree, src.filename, f"cpu tasks of {src.qualname}",
                                       _namespace(module.tree, src, injected))
        namespaces.append(kernel_ns)

        compiled = {name: adapter.njit(raw[name], parallel=False, cache=cache, fastmath=fast_math,
                                       called_from_python=False) for name in module.funcs}
        for name, parallel in dict.fromkeys(module.units):  # units of the same code share a function
            compiled[name] = adapter.njit(kernel_ns[name], parallel=parallel, cache=cache, fastmath=fast_math,
                                          called_from_python=False)
        for ns in namespaces:  # numba reads globals at compile time: point them at the dispatchers
            ns.update(compiled)
        self.runner = adapter.njit(kernel_ns[module.runner], parallel=module.runner_parallel, cache=cache,
                                   fastmath=fast_math and not module.units)  # (the runner is the unit)
        # the serial form (lang.cpu.serial_form): every task inline, no parallel loop; emitted straight
        # to LLVM IR where the emitter covers it (compiler.llvm_cpu), else numba's
        self.serial_runner = None if module.serial_runner is None else \
            adapter.njit(kernel_ns[module.serial_runner], parallel=False, cache=cache, fastmath=fast_math)
        self._serial_numba, self._runner_numba = self.serial_runner, self.runner
        emitted = not fast_math and debug is None
        funcs = {name: (_function_def_in(tree, name), ns) for (name, tree, _), ns in zip(module.func_codes, namespaces)}
        key = module.fingerprint + toolchain_versions_digest()
        self._emitter = None if self.serial_runner is None or not emitted else \
            FormEmitter(_function_def(module, module.serial_runner), kernel_ns, injected, funcs, cache_dir, key)
        # the parallel form: the runner and its units, each parallel loop on numba's threads (lang.llvm.parallel)
        units = {name: (_returning(_function_def(module, name)), kernel_ns) for name in dict(module.units)}
        self._parallel_emitter = None if not emitted else \
            FormEmitter(_function_def(module, module.runner), kernel_ns, injected, {**funcs, **units}, cache_dir, key)
        self.module = module  # the generated code, for kernel.inspect
        self._hands_over = None  # the serial form's size check, run by the interpreter (lang.cpu.serial_form)
        if module.hands_over is not None:
            check = ast.Module([_function_def(module, module.hands_over)], [])
            names = {**injected, "_qg_threads": adapter.thread_count}  # (numba's is an intrinsic)
            self._hands_over = generated.run_tree(check, src.filename, f"cpu size check of {src.qualname}",
                                                  _namespace(check, src, names))[module.hands_over]
        # each unit's dispatcher by unit number (one unit and nothing around it: the runner itself)
        self.unit_dispatchers = [compiled[name] for name, _ in module.units] or [self.runner]


    def compile_for(self, values: tuple, serial: bool = False) -> None:
        """Compile the runner (or the serial form's) for the types of `values` (as a call with them
        would) without running it."""
        emitter = self._emitter if serial else self._parallel_emitter
        if emitter is not None:
            emitted = emitter.function_for(values)
            if serial:
                self.serial_runner = self._serial_numba if emitted is None else emitted
            else:
                self.runner = self._runner_numba if emitted is None else emitted
            if emitted is not None:
                return
        with rare_collections(), room_to_recurse():  # (compiler.compile_gc, compiler.compile_depth)
            (self.serial_runner if serial else self.runner).compile(adapter.numba_types(values))

    def hands_over(self, values: tuple) -> bool:
        """Whether the serial form would hand a call with `values` (the runner's) to the parallel form
        before running any task: such a first call need not compile the serial form."""
        return self._hands_over is not None and self._hands_over(*values) != 0

    def unit_code(self, unit: int, values: tuple) -> tuple[str, str, str | None, str | None, str]:
        """(function name, generated Python, LLVM IR, assembly, why those two are missing) of unit
        `unit` as the runner compiled for `values` calls it."""
        name = self.module.units[unit][0] if self.module.units else self.module.runner
        fdef = _function_def(self.module, name)
        if self.runner is not self._runner_numba:  # the emitted parallel form (lang.llvm.parallel)
            code = self._parallel_emitter.code_for(values)
            if code is None:
                return name, ast.unparse(fdef) + "\n", None, None, (
                    "the emitted parallel form's object code came from the compile cache: inspect in a process with "
                    "an empty QGRAPH_CACHE_DIR to see it")
            return (name, ast.unparse(fdef) + "\n", *function_listing(code, name), "")
        types = dict(zip([a.arg for a in _function_def(self.module, self.module.runner).args.args],
                         adapter.numba_types(values)))
        block = adapter.numba_types((0,))[0]  # an interchanged loop's block of passes (lang.cpu.loops.pass_block)
        llvm, asm, missing = adapter.cpu_machine_code(self.unit_dispatchers[unit],
                                                      tuple(types.get(a.arg, block) for a in fdef.args.args))
        return name, ast.unparse(fdef) + "\n", llvm, asm, missing

    def serial_code(self) -> str | None:
        """The generated Python of the serial form (lang.cpu.serial_form), None without one."""
        name = self.module.serial_runner
        return None if name is None else ast.unparse(_function_def(self.module, name)) + "\n"

    @property
    def cache_hits(self) -> int:
        """Signatures of the runner loaded from numba's disk cache so far."""
        hits = sum(sum(r.stats.cache_hits.values()) for r in (self._runner_numba, self._serial_numba) if r is not None)
        return hits + sum(e.loaded for e in (self._emitter, self._parallel_emitter) if e is not None)

    @property
    def serial_emitted(self) -> str | None:
        """Why the serial form was not emitted (None where it was, or where it was never compiled)."""
        return None if self._emitter is None else self._emitter.skipped

    @property
    def parallel_emitted(self) -> str | None:
        """Why the parallel form was not emitted (None where it was, or where it was never compiled)."""
        return None if self._parallel_emitter is None else self._parallel_emitter.skipped


def _function_def(module, name: str) -> ast.FunctionDef:
    return next(d for d in module.tree.body if isinstance(d, ast.FunctionDef) and d.name == name)


def _function_def_in(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(d for d in tree.body if isinstance(d, ast.FunctionDef) and d.name == name)


def _returning(fdef: ast.FunctionDef) -> ast.FunctionDef:
    """A unit as the emitter takes it: returning a status on every path (its end returns 0, unread; the
    runner reads the record's words), as an emitted helper returns one type."""
    return ast.fix_missing_locations(ast.FunctionDef(fdef.name, fdef.args, [*fdef.body, ast.Return(ast.Constant(0))],
                                                     fdef.decorator_list, fdef.returns, fdef.type_comment,
                                                     lineno=fdef.lineno, col_offset=fdef.col_offset))


def _importable(src: KernelSource) -> bool:
    return sys.modules.get(src.globals.get("__name__", "")) is not None


def _namespace(tree: ast.AST, src: KernelSource, injected: dict) -> dict:
    return generated.namespace(tree, src.globals, src.closure, injected)
