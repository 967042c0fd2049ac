"""`kernel.inspect(*args)`: what qgraph generated for one specialisation, as one value.

Per task: the generated Python numba compiles (on the CPU the unit function holding the task,
with numba's LLVM IR and assembly when this process compiled it), on CUDA the task's PTX
entry, its resources as the driver reports them and, where cuobjdump or nvdisasm is on PATH,
its SASS. Per kernel: the host-side functions generated for it (binders, argument
resolution, launch, loop bounds). Building it runs nothing and changes no statistic.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..compiler import ptx_text
from ..lang import generated
from ..lang.cpu.loops import FIRST_CHUNK_WORK


@dataclass(frozen=True)
class TaskCode:
    """The code of one offloaded task. `missing` says why a field that can hold code is None."""

    index: int  # the task's position (kernel.tasks[index])
    kind: str  # "parallel" or "serial"
    lineno: int  # the task's first line in the kernel's file
    name: str  # the generated function: on the CPU the unit function holding the task, on CUDA its kernel
    python: str  # the generated Python numba compiles for it
    unit: int | None = None  # CPU: the unit (a run of tasks numba compiles as one function) holding it
    llvm: str | None = None  # CPU: numba's LLVM IR of the unit
    asm: str | None = None  # CPU: numba's assembly of the unit
    entry: str | None = None  # CUDA: the kernel's entry name in the PTX and the cubin
    ptx: str | None = None  # CUDA: the PTX of its entry
    sass: str | None = None  # CUDA: its SASS, from cuobjdump or nvdisasm
    resources: dict[str, int] | None = None  # CUDA: registers, local/shared/const bytes, max threads per block
    missing: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelCode:
    """What `kernel.inspect(*args)` returns: the code of one specialisation; `str()` is a report."""

    kernel: str
    arch: str  # "cpu" or "cuda"
    signature: tuple[str, ...]  # the argument type texts (as compile() returns them)
    tasks: tuple[TaskCode, ...]
    host: dict[str, str]  # label -> source of each host-side function generated for the kernel
    ptx: str | None = None  # CUDA: the whole PTX module (device functions included)

    def __str__(self) -> str:
        lines = [f"kernel {self.kernel} on {self.arch} for ({', '.join(self.signature)}): {len(self.tasks)} task(s)"]
        for task in self.tasks:
            unit = f", unit {task.unit}" if task.unit is not None else ""
            lines += ["", f"=== task {task.index}: {task.kind}, line {task.lineno}{unit}: {task.name}", "",
                      "--- generated Python", task.python.rstrip()]
            if task.resources is not None:
                lines += ["", "--- resources: " + ", ".join(f"{k} {v}" for k, v in task.resources.items())]
            for name in ("ptx", "sass"):
                text = getattr(task, name)
                if text is not None:
                    lines += ["", f"--- {name.upper()}", text.rstrip()]
            for name in ("llvm", "asm"):
                text = getattr(task, name)
                if text is not None:
                    lines += ["", f"--- {name}: {text.count(chr(10)) + 1} lines (the `.{name}` field)"]
            lines += [f"--- {name}: none, {why}" for name, why in task.missing.items()]
        for label, source in self.host.items():
            lines += ["", f"=== host: {label}", source.rstrip()]
        return "\n".join(lines) + "\n"


def host_sources(kernel, launcher) -> dict[str, str]:
    """Sources of the host-side functions generated for `kernel` and its launcher (those made so far)."""
    cls = type(kernel)
    found = {"binder": cls.__call__, "compile binder": cls.compile, "inspect binder": cls.inspect,
             **launcher.generated_functions()}
    sources = {label: generated.source_of(fn) for label, fn in found.items() if fn is not None}
    return {label: source for label, source in sources.items() if source is not None}


def cpu_code(kernel, launcher, key: tuple[str, ...], program, values: tuple) -> KernelCode:
    """The code of the CPU specialisation `key`, compiled by `program` for the runner's `values`."""
    tasks = []
    for unit, unit_tasks in enumerate(program.unit_tasks):
        name, python, llvm, asm, why = program.unit_code(unit, values)
        missing = {"llvm": why, "asm": why} if llvm is None else {}
        tasks += [TaskCode(t.index, t.kind, t.lineno, name, python, unit, llvm, asm, missing=missing)
                  for t in unit_tasks]
    tasks.sort(key=lambda t: t.index)
    host = host_sources(kernel, launcher)
    serial = program.serial_code()
    if serial is not None:  # small calls run this instead of the units (lang.cpu.serial_form.size_check)
        host[f"serial form (calls under {launcher.options.cpu_serial_below} elements, "
             f"or under {FIRST_CHUNK_WORK} on one thread)"] = serial
    return KernelCode(kernel.__name__, "cpu", key, tuple(tasks), host)


def cuda_code(kernel, key: tuple[str, ...], program, resources: dict | None, host: dict[str, str],
              no_resources: str = "") -> KernelCode:
    """The code of the CUDA specialisation `key` from its freshly compiled `program`
    (compiler.cuda_program.Program); `resources`: task index -> the driver's attributes of its
    function (None without a device: `no_resources` says why)."""
    modules = [text for name, text in program.ptx if not name.startswith("trigger_")]
    sass, no_sass = {}, ""
    for cubin in program.images.cubins:  # one per group of variants (compiler.cuda_images)
        found, no_sass = sass_listing(cubin)
        sass.update(found)
    tasks = []
    for task, code, entry in zip(program.codes.tasks, program.codes.codes, program.entries):
        ptx = next((found for found in (ptx_text.entry_text(m, entry) for m in modules) if found), None)
        missing = {}
        if ptx is None:
            missing["ptx"] = "its entry is not in the PTX (a qgraph bug; please report it)"
        if entry not in sass:
            missing["sass"] = no_sass or "the disassembler listed no such function"
        if resources is None:
            missing["resources"] = no_resources
        tasks.append(TaskCode(task.index, task.kind, task.lineno, code.function.name,
                              ast.unparse(code.function) + "\n", entry=entry, ptx=ptx, sass=sass.get(entry),
                              resources=None if resources is None else resources[task.index], missing=missing))
    return KernelCode(kernel.__name__, "cuda", key, tuple(tasks), host, "\n".join(modules) or None)


_SASS_FUNCTION = re.compile(r"(?:Function\s*:\s*|\.section\s+\.text\.)([\w$]+)")


def sass_listing(cubin: bytes) -> tuple[dict[str, str], str]:
    """(function name -> its SASS, why there is none) of a cubin, from cuobjdump or nvdisasm on PATH."""
    cuobjdump, nvdisasm = shutil.which("cuobjdump"), shutil.which("nvdisasm")
    if not cubin or not (cuobjdump or nvdisasm):
        return {}, "neither cuobjdump nor nvdisasm is on PATH (both come with the CUDA toolkit)"
    with tempfile.TemporaryDirectory(prefix="qgraph-sass-") as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        command = [cuobjdump, "-sass", path] if cuobjdump else [nvdisasm, "-c", path]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            return {}, f"{os.path.basename(command[0])} failed: {e}"
    if done.returncode != 0:
        return {}, f"{os.path.basename(command[0])} failed: {done.stderr.strip()[-300:]}"
    found = {}
    marks = list(_SASS_FUNCTION.finditer(done.stdout))
    for k, mark in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else len(done.stdout)
        found[mark.group(1)] = done.stdout[mark.start():end].rstrip() + "\n"
    return found, "" if found else f"{os.path.basename(command[0])} listed no function"


_ATTRIBUTES = {"registers": "NUM_REGS", "local_bytes": "LOCAL_SIZE_BYTES", "shared_bytes": "SHARED_SIZE_BYTES",
               "const_bytes": "CONST_SIZE_BYTES", "max_threads_per_block": "MAX_THREADS_PER_BLOCK"}


def function_resources(function) -> dict[str, int]:
    """What the driver reports of a loaded kernel function: registers per thread, local memory per
    thread (spills included), static shared and constant memory, the largest block it can run."""
    from ..driver.device import check, driver

    d = driver()
    kinds = d.CUfunction_attribute
    return {name: int(check(d.cuFuncGetAttribute(getattr(kinds, f"CU_FUNC_ATTRIBUTE_{attribute}"), function),
                            "cuFuncGetAttribute"))
            for name, attribute in _ATTRIBUTES.items()}


# --------------------------------------------------------------------------- without a GPU

def offline_key(args: tuple) -> tuple[str, ...]:
    """The specialisation key a call with `args` gets on CUDA (NumPy arrays stand for qgraph
    device arrays of the same dtype, shape and layout)."""
    from ..args.kinds import array_sig
    from ..args.resolve import scalar_value
    from ..args.structs import is_struct_class, struct_sig
    from ..args.vectors import value_sig
    from ..dtypes import as_dtype
    from ..lang.types.vector_types import is_vector_value

    key = []
    for k, value in enumerate(args):
        if is_vector_value(value):
            key.append(value_sig(value, f"argument {k}"))
        elif is_struct_class(type(value)):
            key.append(_offline_struct_sig(value, struct_sig))
        elif isinstance(value, np.ndarray):
            key.append(array_sig(as_dtype(value.dtype), value.ndim, value.flags.c_contiguous, value.size,
                                 longest=max(value.shape, default=0)))
        else:
            key.append(scalar_value(value, f"argument {k}", None)[0])
    return tuple(key)


def _offline_struct_sig(value, struct_sig) -> str:
    """A struct's key text on CUDA: its fields' (annotated arrays of vectors read as such)."""
    import dataclasses
    import typing

    from ..args.vectors import as_elements, vector_annotation

    hints = typing.get_type_hints(type(value))
    sigs = []
    for f in dataclasses.fields(value):
        field = getattr(value, f.name)
        sig = vector_annotation(hints.get(f.name)) or offline_key((field,))[0]
        element = getattr(hints.get(f.name), "element", None)
        if element is not None:
            sig = as_elements(sig, field, f.name, (element.shape, hints[f.name].ndim, element.dtype))
        sigs.append(sig)
    return struct_sig(type(value), tuple(sigs))


def offline_ptx(kernel, args: tuple, cc: tuple[int, int] = (9, 0)) -> list[str]:
    """PTX of each task of `kernel` for a call with `args`, compiled without a GPU.

    Mirrors `compiler.cuda_program.build_program` up to the link: `task_codes`, numba-cuda
    to PTX (a module per task here, where the backend compiles all tasks in one module: the
    entries' code is the same, tests/compiler/test_cuda_build.py checks it), griddepcontrol.wait at the
    entry on sm_90+ (the kernel's `fast_math=` and
    `default_float=` options, else the environment's). Uses compiler internals: if they
    move, this raises with the name of what is missing."""
    from ..args.kinds import arg_type
    from ..args.vectors import as_elements
    from ..compiler import cuda_program
    from ..compiler import numba_adapter as adapter
    from ..lang.lower.lowering import lower_funcs
    from ..runtime.settings import Settings
    from .checks import element_annotations, fixed_scalar_types

    settings = Settings.from_environ()
    src = kernel.source
    # annotated parameters take their annotation's type (`dt: qgraph.f32`, `g: qgraph.vec2`), as in a call
    key = tuple(fixed or offline_key((a,))[0] for fixed, a in zip(fixed_scalar_types(src), args))
    elements = element_annotations(src) or ()  # `x: qgraph.vec3[:]` reads a plain array as vectors
    key = tuple(as_elements(s, a, f"argument {k}", e) if e is not None and not arg_type(s).element else s
                for k, (s, a, e) in enumerate(zip(key, args, elements or (None,) * len(key))))
    options = kernel.options.resolved(settings)
    codes = cuda_program.task_codes(src, key, options)

    with adapter.assumed_compute_capability(cc):
        ptx_list, _, _ = cuda_program.compile_ptx(
            codes.flat.src, codes.codes, codes.orders, codes.types, lower_funcs(codes.symbols), tuple(cc),
            codes.flat.kinds, options.fast_math, options.debug is not None, together=False)
    if tuple(cc) >= cuda_program.PDL_COMPUTE_CAPABILITY:
        return [ptx_text.add_grid_dependency_control(ptx) for _, ptx in ptx_list]
    return [ptx for _, ptx in ptx_list]
