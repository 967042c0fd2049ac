"""A specialisation's CUDA task kernels through qgraph's emitter and NVVM, without numba-cuda: the
generated task functions typed with numba's rules and written as NVVM IR (lang.llvm.kernels) in
numba-cuda's kernel layout, so the launch code, the PTX variants and the cache are the same as for
numba-cuda's kernels. Code the emitter does not cover raises NotEmittable: numba-cuda compiles it.
"""

from __future__ import annotations

from ..lang import generated
from ..lang.cuda.reductions import dtype_name
from ..lang.llvm import NotEmittable
from ..lang.llvm.calls import Cast
from ..lang.llvm.cuda_dialect import names
from ..lang.llvm.kernels import helper_functions, kernel_code
from ..lang.llvm.kinds import INT64, Array, of_dtype
from ..lang.lower.lowering import module_of
from . import nvvm
from .emitter_mode import OFF, STRICT, emitter_mode


def kind_of(arg) -> object:
    """The emitter's type of an argument kind (args.kinds.ArgKind); a number read from device memory
    (a traced step's parameter block) is the 1-D array numba-cuda types it as."""
    if getattr(arg, "in_memory", False):
        return Array(of_dtype(arg.dtype), 1, True)
    if arg.is_array:
        return Array(of_dtype(arg.dtype), arg.ndim, arg.contiguous)
    return of_dtype(arg.dtype)


def emitted_kernels(src, codes, orders, task_types, func_defs, types, ir_version: tuple) -> list:
    """Each task as a lang.llvm.kernels.KernelCode (NVVM IR with `ir_version`'s metadata), in
    numba-cuda's parameter layout (checked); NotEmittable where the emitter does not cover one."""
    injected = names()
    for name, kind in zip(src.param_names, types):  # element types, for typed reduction partials
        if kind.is_array:
            injected[dtype_name(name)] = Cast(of_dtype(kind.dtype))
    helpers = helper_functions()
    for fdef, _, fsrc in func_defs:
        helpers[fdef.name] = (fdef, generated.namespace(module_of([fdef]), fsrc.globals, fsrc.closure, injected))
    if generated.dump_dir() is not None:  # what the numba-cuda path dumps as it runs the sources
        for fdef, _, fsrc in func_defs:
            generated.compile_tree(module_of([fdef]), fsrc.filename, f"cuda {fdef.name}")
        generated.compile_tree(module_of([c.function for c in codes]), src.filename, f"cuda tasks of {src.qualname}")
    kernels = []
    for code, order, these in zip(codes, orders, task_types):
        if code.scratch or code.cancel:
            raise NotEmittable("scratch arrays or a cancel word")
        kinds = [INT64] * len(code.bound_params) + [kind_of(these[k]) for k in order]
        namespace = generated.namespace(module_of([code.function]), src.globals, src.closure, injected)
        kernel = kernel_code(code.function, namespace, kinds, helpers, ir_version, f"{src.name}_task{code.task.index}")
        expected = [size for k in order for size in these[k].param_sizes]
        if kernel.param_sizes[len(code.bound_params):] != expected:
            raise NotEmittable(f"a parameter layout other than numba's ({kernel.param_sizes} for {expected})")
        generated.dump(f"{src.qualname}.{kernel.name}", kernel.ir, "ll")
        kernels.append(kernel)
    return kernels


def emitted_ptx(src, codes, orders, task_types, func_defs, cc, types, fast_math: bool, debug: bool):
    """What compiler.cuda_program.compile_ptx returns: [(name, PTX)], entries, parameter block sizes."""
    if debug or fast_math:
        raise NotEmittable("debug mode or fast math")
    kernels = emitted_kernels(src, codes, orders, task_types, func_defs, types, nvvm.ir_version())
    if not kernels:
        return [], [], []
    ptx = nvvm.compile_ptx([(f"{k.name}.ll", k.ir) for k in kernels], cc)
    return [(f"{src.name}_tasks.ptx", ptx)], [k.name for k in kernels], [sum(k.param_sizes) for k in kernels]


def compiled_ptx(numba_compile, src, codes, orders, task_types, func_defs, cc, types, fast_math: bool = False,
                 debug: bool = False):
    """The emitter's PTX for the tasks where it covers them all, else `numba_compile`'s (compiler.
    cuda_program.compile_ptx, with the same arguments); QGRAPH_EMITTER as for the CPU (emitter_mode)."""
    mode = emitter_mode()
    if mode != OFF:
        try:
            return emitted_ptx(src, codes, orders, task_types, func_defs, cc, types, fast_math, debug)
        except NotEmittable as e:
            LAST_FALLBACK[:] = [f"{src.qualname}: {e}"]
        except Exception:  # the emitter's own failure: numba-cuda's compile is always right
            if mode == STRICT:
                raise
    return numba_compile(src, codes, orders, task_types, func_defs, cc, types, fast_math, debug)


LAST_FALLBACK: list = []  # why the last specialisation left to numba-cuda was (for tests and benchmarks)
