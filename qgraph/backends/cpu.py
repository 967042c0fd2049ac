"""CPU launches: a kernel call runs its numba runner; numba compiles one overload per signature."""

from __future__ import annotations

import threading

import numpy as np

from ..args.resolve import resolver_lines
from ..compiler.compile_signals import interruptible_compile
from ..compiler.numba_adapter import is_compile_error, is_typing_stage
from ..driver.device import stream_handle
from ..errors import runaway_error
from ..lang import generated
from ..lang.cpu.codegen import counted_loops
from ..lang.cpu.loops import RunnerStatus
from ..lang.front.interchange import checked_pairs, for_launch
from ..lang.front.regions import loop_limit
from ..lang.lower.debug_checks import (
    CANCEL_WORD,
    INTERRUPT_WORD,
    LOOP_PASSES,
    RECORD_WORDS,
    UNIT_WORD,
    YIELD_COUNT,
    YIELD_STEP,
)
from ..lang.options import KernelOptions
from ..lang.types.weak_types import param_type
from ..runtime.arrays import Ndarray
from ..runtime.cancel import cancelled_error
from . import step_body
from .checks import (
    check_signature,
    compile_error,
    display_names,
    element_annotations,
    fixed_scalar_types,
    flag_params,
    flag_shape_error,
    frozen_number_lines,
    host_bounds,
    numpy_overlap_check,
    written_params,
)
from .cpu_forms import FirstRunTimer
from .debug_report import check_failure, task_exception


class CpuLauncher:
    """Runs a kernel's numba runner; numba compiles one overload per signature."""

    def __init__(self, kernel, state, options: KernelOptions) -> None:
        self.kernel = kernel
        self.src = for_launch(kernel._source, options)  # elementwise repeat loops interchanged
        self.stats = kernel.stats
        # resolved once (Kernel._options_now). On the CPU deterministic mode only rejects float scatters: numba's
        # parallel loops split their range statically and combine partials in order (bit-identical per thread count)
        self.options = options
        self._specs: dict[tuple, object] = {}
        self._programs: dict[frozenset, object] = {}  # by the set of 0-d array parameters
        self._program_of: dict[tuple, object] = {}  # signature -> its CpuProgram (sites, units)
        self._flat_of: dict[tuple, object] = {}  # signature -> its flattened form (backends.checks.check_signature)
        # signature -> its parallel form, where _specs holds the serial one (lang.cpu.serial_form): compiled
        # the first time the serial form finds a call too large for it
        self._parallel: dict[tuple, object] = {}
        # the runner's record: debug checks' first failure, and the unit of tasks running (lang.lower.debug_checks)
        self._record = np.zeros(RECORD_WORDS, np.int64)
        self._debug_lock = threading.Lock()  # debug calls from several threads: one record, read after each
        self._bounds = None
        self._cache_dir = state.settings.cache_dir
        self._flags = flag_params(self.src)
        # first calls from several threads compile a signature once (a first run may compile the parallel form)
        self._lock = threading.RLock()
        self._loops = counted_loops(self.src.body)  # the runner's counts, in this order
        self._last = [None]  # the runner's (status, loop, passes per loop) of the last call
        stats = self.stats
        stats.used_graph = False
        stats.graph_nodes = 0
        stats.host_loop = False
        stats.cache_size = 0
        stats._iterations = (lambda: tuple(self._last[0][2:]) if self._last[0] is not None else ()) \
            if self._loops else None
        self.launch = self._generate_launch()
        self._resolve = None  # resolve(a0, ..., an) -> (key, values), generated for compile()

    def compile(self, args: tuple) -> tuple[str, ...]:
        """Compile (or load from the disk cache) the signature of `args` without running it."""
        if self._resolve is None:
            self._resolve = self._generate_resolve()
        key, values = self._resolve(*args)
        with self._lock:
            if key not in self._specs:
                runner, program, _, hits = self._compiled(key, values, args)
                if program.serial_runner is not None:  # a later process may call it with large arrays too
                    self._parallel_form(key, values)
                self._register(key, runner, program.cache_hits > hits)
        return key

    def inspect(self, args: tuple):
        """The code of the signature of `args` (backends.inspection), compiled (or loaded) without
        running it or registering it: a later call counts it as a call's compile would."""
        from .inspection import cpu_code

        if self._resolve is None:
            self._resolve = self._generate_resolve()
        key, values = self._resolve(*args)
        with self._lock:
            _, program, leaves, _ = self._compiled(key, values, args, serial=False)  # the units: tasks apart
        return cpu_code(self.kernel, self, key, program, leaves + (self._record,))

    def _compiled(self, key: tuple, values: tuple, args: tuple, serial: bool = True):
        """Check the signature `key` and compile its runner (or load it), the serial form's where it
        has one and `serial`: (runner, program, the runner's leaf values, the program's cache hits before)."""
        program, _ = self._prepare(key, args)
        serial = serial and program.serial_runner is not None
        hits = program.cache_hits
        leaves = self._compile_form(key, values, serial)
        runner = self._form(key, serial)
        if serial:  # until a call of it is timed (backends.cpu_forms)
            runner = FirstRunTimer(runner, bool(self._loops), lambda vals: self._parallel_of(key, vals),
                                   lambda timer, chosen: self._keep(key, timer, chosen))
        return runner, program, leaves, hits

    def _keep(self, key: tuple, timer: FirstRunTimer, chosen) -> None:  # the form `timer` chose, once registered
        if self._specs.get(key) is timer:
            self._specs[key] = chosen

    def _compile_form(self, key: tuple, values: tuple, serial: bool) -> tuple:
        """Compile (or load) one form of the prepared signature `key`; the runner's leaf values."""
        program, flat = self._program_of[key], self._flat_of[key]
        leaves = tuple(values[k] if j is None else values[k][j] for k, j in flat.slots)
        try:
            with interruptible_compile(self.src.name):  # a Ctrl-C meanwhile is never lost
                program.compile_for(leaves + (self._record,), serial)
        except Exception as e:
            if is_compile_error(e) and is_typing_stage(e):
                raise compile_error(self.src, key, e) from e
            raise
        return leaves

    def _form(self, key: tuple, serial: bool):
        """The runner of one form of `key`, taking each struct argument's leaves in place."""
        program, flat = self._program_of[key], self._flat_of[key]
        runner = program.serial_runner if serial else program.runner
        return _leaf_caller(runner, flat, len(key)) if flat.has_structs else runner

    def _parallel_form(self, key: tuple, values: tuple):
        """The parallel form of `key` (compiled the first time it is needed; call under self._lock)."""
        runner = self._parallel.get(key)
        if runner is None:
            self._compile_form(key, values, serial=False)
            runner = self._parallel[key] = self._form(key, serial=False)
            self.stats.parallel_forms += 1
        return runner

    def _parallel_of(self, key: tuple, values: tuple):
        """The parallel form of `key` (compiled the first time), from now on the signature's runner."""
        runner = self._parallel.get(key)
        if runner is None:
            with self._lock:
                runner = self._parallel_form(key, values)
        if key in self._specs:
            self._specs[key] = runner
        return runner

    def _run_parallel(self, key: tuple, values: tuple) -> None:  # a call the serial form handed over
        self._finish(key, self._run(key, self._parallel_of(key, values), values), values)

    def _generate_resolve(self):
        src = self.src
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

    def _generate_launch(self):
        """launch(a0, ..., stream): resolve inline, look the runner up, call it."""
        src = self.src
        n = len(src.param_names)
        ns: dict = {"_get": self._specs.get, "_first_call": self._first_call, "_flag_error": flag_shape_error,
                    "_src": src, "_stream_handle": stream_handle, "_rec": self._record,
                    "_task_error": self._task_error, "_check_failed": self._check_failed,
                    "_debug_lock": self._debug_lock, "_steps": step_body.ACTIVE, "_count": step_body.count_call,
                    "_watching": step_body.WATCHING, "_note": step_body.note_writes,
                    "_written": tuple(written_params(src)),
                    "_launcher": self}
        comma = "," if n == 1 else ""
        values = ", ".join(f"v{k}" for k in range(n))
        args = ", ".join(f"a{k}" for k in range(n))
        # stream= means nothing on the CPU, but a value that is no stream is the same error as on CUDA
        lines = ["    if stream is not None:", "        _stream_handle(stream)"]
        lines += frozen_number_lines(src, ns)
        lines += resolver_lines(display_names(src), fixed_scalar_types(src), "cpu", ns, Ndarray,
                                elements=element_annotations(src), written=written_params(src))
        lines += [f"    key = ({', '.join(f's{k}' for k in range(n))}{comma})",
                  "    if _watching[0]:",  # a tape needs arrays as its calls left them: this call's writes counted
                  f"        _note(_written, ({args}{comma}))",
                  # a call in a @qgraph.graph body (counted for its stats) or under a tape (which may run it)
                  f"    if _steps[0] and _count(_launcher, ({args}{comma}), key):",
                  "        return",
                  *self._overlap_lines(ns),
                  "    runner = _get(key)",
                  "    if runner is None:",
                  f"        return _first_call(key, ({values}{comma}), ({args}{comma}))"]
        for k in self._flags:
            lines += [f"    if v{k}.shape not in ((), (1,)):",
                      f"        raise _flag_error(_src, {k}, v{k}.shape)"]
        if self._loops:  # kernel.cancel(): a fresh word, and other threads let run if there are any
            ns["_threads"] = threading.active_count
            lines += [f"    _rec[{CANCEL_WORD}] = 0", "    if _threads() > 1:",
                      f"        _rec[{YIELD_COUNT}] = 1", f"        _rec[{YIELD_STEP}] = 0",
                      "    else:", f"        _rec[{YIELD_COUNT}] = 0"]
        call = f"({values}{', ' if n else ''}_rec)"
        run = ["    try:", f"        r = runner{call}"]
        if not self._loops:  # the serial form found the call too large for it: the parallel form, right away
            ns["_parallel_of"] = self._parallel_of
            run += [f"        if r is not None and r == {int(RunnerStatus.NEEDS_PARALLEL)}:",
                    f"            r = _parallel_of(key, ({values}{comma})){call}"]
        run += ["    except Exception as e:", "        raise _task_error(key, e) from None"]
        if self.options.debug:  # a failed check: its record, read now (one call at a time, so records do not mix)
            run = ["    with _debug_lock:"] + ["    " + line for line in run] + \
                  ["        if _rec[0]:", "            _check_failed(key)"]
        lines += run
        if self._loops:  # the runner's status: the guard stopped a loop, or Ctrl-C arrived
            ns.update({"_last": self._last, "_stopped": self._stopped})
            lines += ["    _last[0] = r", "    if r[0]:", f"        _stopped(r, key, ({values}{comma}))"]
        else:  # None, CHUNK_INTERRUPTED when Ctrl-C stopped a chunked parallel loop, or NEEDS_PARALLEL
            ns["_unfinished"] = self._unfinished
            lines += ["    if r is not None:", f"        _unfinished(r, key, ({values}{comma}))"]
        source = f"def launch({args}{', ' if n else ''}stream):\n" + "\n".join(lines) + "\n"
        return generated.function(source, "launch", f"launch of kernel {src.qualname} (cpu)", ns)

    def _overlap_lines(self, ns: dict) -> list[str]:
        """The launch's check that the arrays of interchanged loops do not partially overlap."""
        pairs = checked_pairs(self.src)
        if not pairs:
            return []
        names = list(dict.fromkeys(name for pair in pairs for name in pair))
        ns["_overlap"] = numpy_overlap_check(self.src.name, pairs, names)
        return [f"    _overlap({', '.join(f'v{self.src.param_names.index(n)}' for n in names)})"]

    def _first_call(self, key: tuple, values: tuple, args: tuple) -> None:
        """Compile (once, whichever thread comes first) and run a new signature."""
        with self._lock:
            runner = self._specs.get(key)
            if runner is None:
                return self._compile_and_run(key, values, args)
        self._finish(key, self._run(key, runner, values), values)

    def _run(self, key: tuple, runner, values: tuple):
        """The runner's status; an exception from a task names the task (see _task_error)."""
        if self._loops:  # as the generated launch does
            self._record[CANCEL_WORD] = 0
            self._record[YIELD_COUNT] = int(threading.active_count() > 1)
            self._record[YIELD_STEP] = 0
        with self._debug_lock:
            try:
                status = runner(*values, self._record)
            except Exception as e:
                raise self._task_error(key, e) from None
            if self._record[0]:
                self._check_failed(key)
        return status

    def adopt_last(self, other: CpuLauncher) -> None:
        """The last call ran as `other`'s (a tape's recording of it): stats.iterations reports that call."""
        self._last[0] = other._last[0]

    def _finish(self, key: tuple, status, values: tuple) -> None:
        if self._loops:
            self._last[0] = status
            if status[0]:
                self._stopped(status, key, values)
        elif status is not None:
            self._unfinished(status, key, values)

    def _unfinished(self, status: int, key: tuple, values: tuple) -> None:
        """A runner without device loops returned: a call too large for the serial form, or Ctrl-C."""
        if status == RunnerStatus.NEEDS_PARALLEL:
            return self._run_parallel(key, values)
        self._interrupted(key)

    def _interrupted(self, key: tuple) -> None:
        """KeyboardInterrupt for a call Ctrl-C stopped in a chunked parallel loop, naming its task
        (a chunked unit has one task; units of the same code share a function, so the runner's
        unit word names it)."""
        self._record[INTERRUPT_WORD] = 0
        program, unit = self._program_of.get(key), int(self._record[UNIT_WORD])
        task = program.unit_tasks[unit][0] if program is not None and 0 <= unit < len(program.unit_tasks) else None
        where = f"in the parallel loop at line {task.lineno}" if task is not None else "in a parallel loop"
        raise KeyboardInterrupt(f"kernel {self.src.name} was interrupted {where}; the arrays it writes hold "
                                "partial results, and the next call starts afresh")

    def _task_error(self, key: tuple, error: Exception) -> Exception:
        """`error`, raised in a task of the signature `key`, as the same type naming the task."""
        program = self._program_of.get(key)
        if program is None or is_compile_error(error):
            return error
        unit = int(self._record[UNIT_WORD])
        tasks = program.unit_tasks[unit] if 0 <= unit < len(program.unit_tasks) else self.src.tasks
        return task_exception(self.src, tasks, error)

    def _check_failed(self, key: tuple) -> None:
        """Raise the exception of the debug check recorded by the last call (and clear the record)."""
        words = self._record.tolist()
        self._record[:] = 0
        raise check_failure(self.src, self._program_of[key].sites, words)

    def _compile_and_run(self, key: tuple, values: tuple, args: tuple) -> None:
        runner, program, _, hits = self._compiled(key, values, args)  # compiled before it runs: see _compiled
        try:
            status = self._run(key, runner, values)
        except Exception as e:
            if is_compile_error(e) and is_typing_stage(e):
                raise compile_error(self.src, key, e) from e
            raise
        self._register(key, runner, program.cache_hits > hits)
        self._finish(key, status, values)

    def _register(self, key: tuple, runner, from_cache: bool) -> None:
        self._specs[key] = runner.decided or runner if isinstance(runner, FirstRunTimer) else runner
        self.stats.specialisations += 1
        self.stats.cache_loads += from_cache
        self.stats.parallel_forms += self._program_of[key].serial_runner is None  # the only form it has
        self.stats.num_tasks = len(self.src.tasks)

    def _prepare(self, key: tuple, args: tuple):
        """Check a new signature and find or generate its program: (program, flat)."""
        if self._bounds is None:
            self._bounds = host_bounds(self.src)
        flat = check_signature(self.src, key, args, self._bounds, self.options)  # the same checks as on CUDA
        src = flat.src
        names = frozenset(name for name, kind in zip(src.param_names, flat.kinds) if kind.ndim == 0)
        types = tuple((name, param_type(kind)) for name, kind in zip(src.param_names, flat.kinds))
        # the generated code depends on the leaves' names, types and vector elements (not on contiguity)
        program_key = (names, types, tuple(getattr(k, "element", None) for k in flat.kinds))
        program = self._programs.get(program_key)
        if program is None:
            from ..compiler.cpu_program import CpuProgram

            program = self._programs[program_key] = CpuProgram(src, self._cache_dir, self.options, flat.kinds,
                                                               flat.funcs.defs)
        self._program_of[key], self._flat_of[key] = program, flat
        return program, flat

    def _stopped(self, status: tuple, key: tuple, values: tuple) -> None:
        """Raise for a runner that stopped early: QgraphError (the guard) or KeyboardInterrupt; or run the
        parallel form of a call the serial form found too large for it."""
        if status[0] == RunnerStatus.NEEDS_PARALLEL:
            return self._run_parallel(key, values)
        if status[0] == RunnerStatus.CHECK_FAILED:  # its record was read already: nothing more to say
            return
        if status[0] == RunnerStatus.CHUNK_INTERRUPTED:  # Ctrl-C in a chunked parallel loop
            self._interrupted(key)
        loop = self._loops[status[1]]
        if status[0] == RunnerStatus.RUNAWAY:
            raise runaway_error(self.src.name, loop, loop_limit(loop, self.options.max_iterations))
        if status[0] == RunnerStatus.CANCELLED:
            raise cancelled_error(self.src.name, loop, status[2 + status[1]])
        what = f"flag '{loop.flag}'" if hasattr(loop, "flag") else f"qgraph.repeat({loop.count})"
        raise KeyboardInterrupt(f"kernel {self.src.name} was interrupted in its device loop (line {loop.lineno}, "
                                f"{what}) after {status[2 + status[1]]} passes; the next call starts afresh")

    def cancel(self) -> None:
        """kernel.cancel(): the runner's device loops end after their current pass (lang.cpu.loops)."""
        if self._loops:
            self._record[CANCEL_WORD] = 1

    def loop_passes(self) -> int:
        """The first device loop's passes so far, for progress bars (the runner writes them each pass)."""
        return int(self._record[LOOP_PASSES])

    def close(self) -> None:
        self._specs.clear()
        self._parallel.clear()
        self._programs.clear()


def _leaf_caller(runner, flat, n: int):
    """`run(v0, ..., vn)` calling the runner with every struct argument's leaves in place."""
    values = ", ".join(f"v{k}" for k in range(n))
    leaves = [f"v{k}" if j is None else f"v{k}[{j}]" for k, j in flat.slots]  # flat.slots: (argument, leaf)
    body = generated.Lines().line(f"return _runner({', '.join([*leaves, 'record'])})")
    return generated.function(body.function(f"run({values}, record)"), "run",
                              f"struct unpacking of kernel {flat.src.qualname}", {"_runner": runner})
