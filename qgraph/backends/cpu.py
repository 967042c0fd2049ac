"""CPU launches: a kernel call runs its numba runner; numba compiles one overload per signature."""

from __future__ import annotations

import threading

import numpy as np

from ..compiler.compile_signals import interruptible_compile
from ..compiler.cpu_interrupts import HANDOVER, SerialTaskInterrupted, handler_error
from ..compiler.numba_adapter import is_compile_error, is_typing_stage
from ..errors import runaway_error
from ..lang.cpu.loops import RunnerStatus, runner_loops, serial_loops
from ..lang.front.interchange import checked_pairs, for_launch
from ..lang.front.regions import Task, loop_limit
from ..lang.front.writes import written_params
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
from ..runtime.call_hooks import BoundCall
from ..runtime.cancel import cancelled_error
from . import cpu_call
from .checks import (
    check_signature,
    compile_error,
    flag_params,
    flag_shape_error,
    host_bounds,
    numpy_overlap_check,
)
from .cpu_forms import CpuSpecialization, FirstRunTimer, ThreadGovernor
from .debug_report import check_failure, task_exception
from .extent_checks import extent_check


class CpuLauncher:
    """Runs a kernel's numba runner; numba compiles one overload per signature."""

    def __init__(self, kernel, state, options: KernelOptions) -> None:
        self.kernel = kernel
        self.src = for_launch(kernel.source, options)  # elementwise repeat loops interchanged
        self.stats = kernel.stats
        # resolved once (Kernel.options_now). On the CPU deterministic mode rejects float scatters and keeps the
        # thread count fixed (no ThreadGovernor): numba's parallel loops split their range statically and combine
        # partials in order (bit-identical per thread count)
        self.options = options
        self._specs: dict[tuple, object] = {}  # signature -> the runner its calls run (the launch's one lookup)
        self._signatures: dict[tuple, CpuSpecialization] = {}  # signature -> what was compiled for it
        self._programs: dict[tuple, object] = {}  # generated programs, shared by signatures of the same code
        # the runner's record: debug checks' first failure, and the unit of tasks running (lang.lower.debug_checks)
        self._record = np.zeros(RECORD_WORDS, np.int64)
        self._debug_lock = threading.Lock()  # debug calls from several threads: one record, read after each
        self._bounds = None
        self._cache_dir = state.settings.cache_dir
        self._flags = flag_params(self.src)
        # first calls from several threads compile a signature once (a first run may compile the parallel form)
        self._lock = threading.RLock()
        self._loops = runner_loops(self.src.body)  # the runner's counts, in this order
        # device loops and serial tasks' loops let other threads run now and then (compiler.cpu_interrupts)
        self._yields = bool(self._loops) or any(serial_loops(t) for t in self.src.tasks)
        self._last = [None]  # the runner's (status, loop, passes per loop) of the last call
        stats = self.stats
        stats.used_graph = False
        stats.graph_nodes = 0
        stats.host_loop = False
        stats.cache_size = 0
        # device loops' passes; an interchanged repeat is a task, as on CUDA, though the runner counts its blocks
        counted = tuple(k for k, loop in enumerate(self._loops) if not isinstance(loop, Task))
        stats.iteration_counts = (lambda: tuple(self._last[0][2 + k] for k in counted)
                                  if self._last[0] is not None else ()) if counted else None
        self.written = tuple(written_params(self.src))  # the arrays it writes, by position (Ndarray.version)
        pairs = checked_pairs(self.src)  # interchanged loops' arrays, checked apart at each call
        self._overlap = _Overlap(self.src, pairs) if pairs else None
        self._extents = extent_check(kernel.source, self.src, options.debug)  # arrays shorter than their loops
        self.launch = cpu_call.launch_function(self)
        self._resolve = None  # resolve(a0, ..., an) -> (key, values), generated for compile()

    def call_parts(self) -> dict:
        """What the generated launch (backends.cpu_call) calls of this launcher, named in one place."""
        return {"specs": self._specs, "first_call": self._first_call, "record": self._record,
                "task_error": self._task_error, "check_failed": self._check_failed, "debug_lock": self._debug_lock,
                "flags": self._flags, "loops": bool(self._loops), "yields": self._yields,
                "parallel_of": self._parallel_of,
                "last": self._last, "stopped": self._stopped, "unfinished": self._unfinished, "overlap": self._overlap,
                "extents": self._extents}

    def resolve(self, args: tuple) -> tuple[tuple, tuple]:
        """(signature, the values the runner takes) of a call with every parameter given by `args`."""
        if self._resolve is None:
            self._resolve = cpu_call.resolve_function(self)
        return self._resolve(*args)

    def run_bound(self, call: BoundCall) -> None:
        """Run a resolved call the plain way (launcher.dispatch): what the generated launch does after its
        hook, a step a line; tests/test_launcher.py holds the two equal."""
        key, values = call.key, call.packs
        if self._extents is not None:
            self._extents.check(key, call.args)
        if self._overlap is not None:
            self._overlap.check(*(values[k] for k in self._overlap.positions))
        if self._loops:  # kernel.cancel() stops this call from here on, also while it compiles
            self._record[CANCEL_WORD] = 0
        runner = self._specs.get(key)
        if runner is None:  # compiled (once, whichever thread comes first) and run
            return self._first_call(key, values, call.args)
        for k in self._flags:
            if values[k].shape not in ((), (1,)):
                raise flag_shape_error(self.src, k, values[k].shape)
        self._finish(key, self._run(key, runner, values), values)

    def generated_functions(self) -> dict:
        """The host functions generated for this launcher so far (kernel.inspect's report)."""
        return {"launch": self.launch, "argument resolution": self._resolve, "loop bounds": self._bounds}

    def compile(self, args: tuple, every_form: bool = False) -> tuple[str, ...]:
        """Compile (or load from the disk cache) the signature of `args` without running it: its serial form
        and its parallel form. `every_form` (kernel.compile): the parallel form also where a call with small
        arrays compiled the serial form alone (a later call with large arrays would compile it in the middle
        of its run, deaf to kernel.cancel()); not for the plans that only need the signature (2.4 s a form)."""
        key, values = self.resolve(args)
        with self._lock:
            if key not in self._specs:
                runner, program, _, hits = self._compiled(key, values, args)
                if program.serial_runner is not None:  # a later process may call it with large arrays too
                    self._parallel_form(key, values)
                self._register(key, runner, program.cache_hits > hits)
            elif every_form and self._signatures[key].program.serial_runner is not None:
                self._parallel_form(key, values)
        return key

    def inspect(self, args: tuple):
        """The code of the signature of `args` (backends.inspection), compiled (or loaded) without
        running it or registering it: a later call counts it as a call's compile would."""
        from .inspection import cpu_code

        key, values = self.resolve(args)
        with self._lock:
            _, program, leaves, _ = self._compiled(key, values, args, serial=False)  # the units: tasks apart
        return cpu_code(self.kernel, self, key, program, leaves + (self._record,))

    def _compiled(self, key: tuple, values: tuple, args: tuple, serial: bool = True, running: bool = False):
        """Check the signature `key` and compile its runner (or load it), the serial form's where it
        has one and `serial`: (runner, program, the runner's leaf values, the program's cache hits before).
        `running`: for a call about to run, which compiles only the parallel form where the serial form
        would hand the call over before any task (a first call with large arrays)."""
        program, _ = self._prepare(key, args)
        serial = serial and program.serial_runner is not None
        hits = program.cache_hits
        if serial and running:
            leaves = self._leaves(key, values)
            if program.hands_over(leaves + (self._record,)):
                return self._parallel_form(key, values), program, leaves, hits
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
        program, leaves = self._signatures[key].program, self._leaves(key, values)
        try:
            with interruptible_compile(self.src.name):  # a Ctrl-C meanwhile is never lost
                program.compile_for(leaves + (self._record,), serial)
        except Exception as e:
            if is_compile_error(e) and is_typing_stage(e):
                raise compile_error(self.src, key, e) from e
            raise
        return leaves

    def _leaves(self, key: tuple, values: tuple) -> tuple:
        """The runner's arguments of a call of `key`: each struct argument's leaves in place."""
        return tuple(values[k] if j is None else values[k][j] for k, j in self._signatures[key].flat.slots)

    def _form(self, key: tuple, serial: bool):
        """The runner of one form of `key`, taking each struct argument's leaves in place."""
        program, flat = self._signatures[key].program, self._signatures[key].flat
        if serial:
            runner = program.serial_runner
        elif self.options.deterministic:  # one thread count for every call: partials fold per thread, so a
            runner = program.runner  # governor's switch to one thread on a busy machine would change the sums' bits
        else:
            runner = ThreadGovernor(program.runner, bool(self._loops), lambda args: self._serial_for(key, args))
        return cpu_call.leaf_caller(runner, flat, len(key)) if flat.has_structs else runner

    def _serial_for(self, key: tuple, args: tuple):
        """The serial form of `key` compiled for the runner's `args` (leaves and record), for a parallel form
        running on one thread (backends.cpu_forms.ThreadGovernor); None where the program has none."""
        program = self._signatures[key].program
        if program.serial_runner is None:
            return None
        # not under self._lock: the runner's call holds _debug_lock, which a first call takes after _lock
        # (numba's own lock keeps concurrent compiles of the dispatcher apart)
        with interruptible_compile(self.src.name):
            program.compile_for(args, True)
        return program.serial_runner

    def _parallel_form(self, key: tuple, values: tuple):
        """The parallel form of `key` (compiled the first time it is needed; call under self._lock)."""
        signature = self._signatures[key]
        if signature.parallel is None:
            self._compile_form(key, values, serial=False)
            signature.parallel = self._form(key, serial=False)
            self.stats.parallel_forms += 1
        return signature.parallel

    def _parallel_of(self, key: tuple, values: tuple):
        """The parallel form of `key` (compiled the first time), from now on the signature's runner."""
        runner = self._signatures[key].parallel
        if runner is None:
            with self._lock:
                runner = self._parallel_form(key, values)
        if key in self._specs:
            self._specs[key] = runner
        return runner

    def _run_parallel(self, key: tuple, values: tuple) -> None:  # a call the serial form handed over
        self._finish(key, self._run(key, self._parallel_of(key, values), values), values)

    def _first_call(self, key: tuple, values: tuple, args: tuple) -> None:
        """Compile (once, whichever thread comes first) and run a new signature."""
        with self._lock:
            runner = self._specs.get(key)
            if runner is None:
                return self._compile_and_run(key, values, args)
        self._finish(key, self._run(key, runner, values), values)

    def _run(self, key: tuple, runner, values: tuple):
        """The runner's status; an exception from a task names the task (see _task_error)."""
        shared = self._yields and threading.active_count() > 1
        if self._yields:  # as the generated launch does (the cancel word is cleared as the call starts)
            self._record[YIELD_COUNT] = int(shared)
            self._record[YIELD_STEP] = 0
        if shared:
            HANDOVER.enter()
        with self._debug_lock:
            try:
                status = runner(*values, self._record)
            except Exception as e:
                raise self._task_error(key, e) from None
            finally:
                if shared:
                    HANDOVER.leave()
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
        self._raise_signal_error()
        program, unit = self._program_for(key), int(self._record[UNIT_WORD])
        task = program.unit_tasks[unit][0] if program is not None and 0 <= unit < len(program.unit_tasks) else None
        where = f"in the parallel loop at line {task.lineno}" if task is not None else "in a parallel loop"
        raise KeyboardInterrupt(f"kernel {self.src.name} was interrupted {where}; the arrays it writes hold "
                                "partial results, and the next call starts afresh")

    def _task_error(self, key: tuple, error: Exception) -> Exception:
        """`error`, raised in a task of the signature `key`, as the same type naming the task."""
        if isinstance(error, SerialTaskInterrupted):  # Ctrl-C (or another signal's handler) in a serial task
            return handler_error(self._record) or KeyboardInterrupt(str(error))
        program = self._program_for(key)
        if program is None or is_compile_error(error):
            return error
        unit = int(self._record[UNIT_WORD])
        tasks = program.unit_tasks[unit] if 0 <= unit < len(program.unit_tasks) else self.src.tasks
        return task_exception(self.src, tasks, error)

    def _check_failed(self, key: tuple) -> None:
        """Raise the exception of the debug check recorded by the last call (and clear the record)."""
        words = self._record.tolist()
        self._record[:] = 0
        raise check_failure(self.src, self._signatures[key].program.sites, words)

    def _compile_and_run(self, key: tuple, values: tuple, args: tuple) -> None:
        runner, program, _, hits = self._compiled(key, values, args, running=True)  # compiled before it runs
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
        self.stats.parallel_forms += self._signatures[key].program.serial_runner is None  # its only form
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
        self._signatures[key] = CpuSpecialization(key, program, flat)
        return program, flat

    def _program_for(self, key: tuple):
        """The program of a signature this launcher checked, or None."""
        found = self._signatures.get(key)
        return None if found is None else found.program

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
        self._raise_signal_error()
        what = f"flag '{loop.flag}'" if hasattr(loop, "flag") else f"qgraph.repeat({loop.count})"
        raise KeyboardInterrupt(f"kernel {self.src.name} was interrupted in its device loop (line {loop.lineno}, "
                                f"{what}) after {status[2 + status[1]]} passes; the next call starts afresh")

    def _raise_signal_error(self) -> None:
        """A signal handler's own exception that stopped the runner, raised as is (compiler.cpu_interrupts)."""
        error = handler_error(self._record)
        if error is not None:
            raise error

    def cancel(self) -> None:
        """kernel.cancel(): the runner's device loops end after their current pass (lang.cpu.loops)."""
        if self._loops:
            self._record[CANCEL_WORD] = 1

    def loop_passes(self) -> int:
        """The first device loop's passes so far, for progress bars (the runner writes them each pass)."""
        return int(self._record[LOOP_PASSES])

    def close(self) -> None:
        self._specs.clear()
        self._signatures.clear()
        self._programs.clear()


class _Overlap:
    """The arrays of interchanged loops that must not partially overlap: their positions and the check."""

    __slots__ = ("positions", "check")

    def __init__(self, src, pairs: tuple) -> None:
        names = list(dict.fromkeys(name for pair in pairs for name in pair))
        self.positions = tuple(src.param_names.index(n) for n in names)
        self.check = numpy_overlap_check(src.name, pairs, names)
