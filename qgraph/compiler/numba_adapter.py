"""Every use of numba / numba-cuda internals, here and in numba_cache.py (numba's on-disk CPU cache).

Private APIs used here (checked against numba 0.68 and numba-cuda 0.30):
- the dispatcher's `_cache` attribute: CPU code is cached on disk by numba_cache.py, this
  adapter's other half (numba's on-disk cache classes, redirected to qgraph's cache directory
  and sealed with the cache's key).
- `numba.cuda.compiler._compile_pyfunc_with_fixup` (what `cuda.compile(..., abi="numba")`
  runs before NVVM), the code library's `_entry_name`, `_nvvm_options` and `llvm_strs`, and
  `numba.cuda.cudadrv.nvvm.compile_ir`: a specialisation's kernels go to NVVM in one run. The
  PTX `.entry` parameter lists are numba's flattened by-value argument layout (arrays as
  meminfo, parent, nitems, itemsize, data, shape..., strides...).
"""

from __future__ import annotations

import contextlib
import math
import re

import numpy as np

from ..args.kinds import ArgKind
from .cache_keys import CacheKey
from .numba_cache import function_cache

# --------------------------------------------------------------------------- CPU


CPU_FAST_MATH_FLAGS = frozenset({"contract", "arcp", "afn", "reassoc", "nsz"})


def njit(py_func, *, parallel: bool, cache: tuple[str, str, CacheKey] | None, fastmath: bool = False,
         called_from_python: bool = True):
    """numba.njit(py_func); with `cache=(directory, fingerprint, key)` cached on disk there, every file
    sealed with the cache's key (compiler.cache_keys). `called_from_python=False`:
    only compiled code calls it, so numba builds no Python wrapper for it (a third of a small unit's compile)."""
    import numba

    # fast math without LLVM's no-NaN / no-inf assumptions, so `math.isnan` checks survive
    flags = set(CPU_FAST_MATH_FLAGS) if fastmath else False
    wrappers = {} if called_from_python else {"no_cpython_wrapper": True}
    dispatcher = numba.njit(parallel=parallel, error_model="numpy", fastmath=flags, no_cfunc_wrapper=True,
                            **wrappers)(py_func)
    if cache is not None:
        dispatcher._cache = function_cache(py_func, cache)
    return dispatcher


def numba_types(values: tuple) -> tuple:
    """numba's types of these values (the signature a call with them compiles)."""
    import numba

    return tuple(numba.typeof(v) for v in values)


def cpu_machine_code(dispatcher, arg_types: tuple) -> tuple[str | None, str | None, str]:
    """(LLVM IR, assembly, why they are missing) of a dispatcher's overload for `arg_types`:
    numba keeps neither for code it loaded from its disk cache."""
    if arg_types not in dispatcher.overloads:
        return None, None, ("numba compiled no overload of it in this process (the runner calling it came from "
                            "numba's disk cache): inspect in a process with an empty QGRAPH_CACHE_DIR to see it")
    if dispatcher.stats.cache_hits.get(arg_types):
        return None, None, ("loaded from numba's disk cache, which keeps only machine code: inspect in a process "
                            "with an empty QGRAPH_CACHE_DIR to see it")
    return dispatcher.inspect_llvm(arg_types), dispatcher.inspect_asm(arg_types), ""


def thread_count() -> int:
    """The calling thread's parallel-loop threads (numba.get_num_threads)."""
    import numba

    return numba.get_num_threads()


def thread_controls() -> tuple:
    """(get, set) of the calling thread's parallel-loop thread count as numba's own C functions
    (0.1-0.2 us a call, where numba.get/set_num_threads take 0.6 us with their checks: a per-call
    cost); the pool is launched first. `set` takes 1 to the pool's size, unchecked."""
    from numba.np.ufunc import parallel

    parallel._launch_threads()
    return parallel._get_num_threads, parallel._set_num_threads


def cpu_names() -> dict:
    """numba's names the generated CPU code uses: prange, int64, float32, and the calling thread's
    parallel-loop threads (numba.get_num_threads embeds its function's address, which keeps the
    caller out of the disk cache; its intrinsic calls the threading layer's symbol by name,
    registered here before any cached code links to it)."""
    import numba
    from numba.np.ufunc import parallel

    parallel._launch_threads()
    return {"_qg_prange": numba.prange, "_qg_threads": parallel._iget_num_threads, "_qg_i64": numba.int64,
            "_qg_f32": numba.float32}


# --------------------------------------------------------------------------- CUDA


def _numba_cuda_imported() -> None:
    """Every CUDA entry below first waits for init's background import of numba-cuda."""
    from .numba_prefetch import wait

    wait()


def cuda_namespace() -> dict:
    """Names the generated CUDA task code uses, bound to numba-cuda objects."""
    _numba_cuda_imported()
    from numba import cuda, float32, int32, int64, uint32, uint64
    from numba.cuda import libdevice

    from .numba_addressing import addressing
    from .numba_probes import import_cuda_array_math

    import_cuda_array_math()  # before the first compile loads the registries: without its BLAS probe

    return {**addressing(), "_qg_cuda": cuda, "_qg_f32": float32, "_qg_i32": int32, "_qg_i64": int64,
            "_qg_u32": uint32, "_qg_u64": uint64, **_python_min_max(), "_qg_math": math,
            "_qg_libdevice": libdevice, "_qg_np_i32": np.int32, "_qg_np_i64": np.int64, "_qg_np_u32": np.uint32,
            "_qg_np_u64": np.uint64, "_qg_report_fence": _report_fence(cuda)}


def _report_fence(cuda):
    """qgraph.report's fence (lang.front.reports): a device function around __threadfence_system
    (numba-cuda types its stub only as an attribute of the cuda module)."""
    if not _FENCE:
        namespace = {"cuda": cuda}
        exec("def report_fence():\n    cuda.threadfence_system()\n", namespace)
        _FENCE.append(cuda_device_function(namespace["report_fence"]))
    return _FENCE[0]


_FENCE: list = []


_MIN_MAX: dict = {}


def _python_min_max() -> dict:
    """min/max device functions with Python's rule (numba-cuda's float min/max drop NaNs), and
    rounding with Python's and NumPy's result types (lang.lower.math_calls)."""
    if not _MIN_MAX:
        from ..lang.lower.math_calls import PYTHON_RULE, ROUNDING_FUNCTIONS

        _MIN_MAX.update({name: cuda_device_function(f) for name, f in PYTHON_RULE.items()})
        _MIN_MAX.update({name: cuda_device_function(f) for name, (_, f) in ROUNDING_FUNCTIONS.items()})
    return _MIN_MAX


@contextlib.contextmanager
def assumed_compute_capability(cc: tuple[int, int]):
    """Compile for `cc` without a GPU: numba-cuda asks the current device for its compute
    capability when it compiles device functions (for offline PTX: tests, machine-code tables)."""
    _numba_cuda_imported()
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = tuple(cc)

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _Device()
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def compile_phase_points() -> list[tuple[object, str, object]]:
    """Where numba-cuda spends a compile, for the offline profile (bench.cuda_compile): (owner,
    attribute, phase), the phase a name or, for the pass runner, a function of the call's arguments. numba-cuda
    runs no LLVM optimisation of its own: NVVM optimises the IR it is given."""
    _numba_cuda_imported()
    from numba.cuda import codegen
    from numba.cuda.core import base, compiler_machinery
    from numba.cuda.cudadrv import nvvm
    from numba.cuda.typing import context

    lowering = {"cuda_native_lowering", "native_lowering", "cuda_backend"}

    def pass_phase(manager, index, pss, state) -> str:
        name = pss.name()
        if name == "nopython_type_inference":
            return "numba typing"
        return "numba lowering" if name in lowering else "numba other passes"

    return [(compiler_machinery.PassManager, "_runPass", pass_phase),
            (context.BaseContext, "refresh", "numba-cuda registries (first use)"),
            (base.BaseContext, "refresh", "numba-cuda registries (first use)"),
            (codegen.CUDACodeLibrary, "get_asm_strs", "IR text for NVVM"),
            (nvvm.CompilationUnit, "compile", "NVVM (libnvvm)"),
            (nvvm.CompilationUnit, "verify", "NVVM (libnvvm)"),
            (nvvm, "compile_ir", "IR text for NVVM")]


def scalar_numba_type(dtype):
    """The numba scalar type of a NumPy dtype (callable in kernels as a cast)."""
    from numba.np.numpy_support import from_dtype

    return from_dtype(dtype)


def cuda_device_function(py_func, fastmath: bool = False):
    _numba_cuda_imported()
    from numba import cuda

    return cuda.jit(device=True, fastmath=fastmath)(py_func)


def cuda_kernel_library(py_func, argtypes: list[ArgKind], cc: tuple[int, int], fastmath: bool = False):
    """One kernel (numba ABI) typed and lowered by numba-cuda for compute capability `cc`, before
    NVVM: its code library, as `cuda.compile` builds it (numba-cuda's private
    `_compile_pyfunc_with_fixup`) before asking NVVM for PTX."""
    _numba_cuda_imported()
    from numba.cuda.compiler import _compile_pyfunc_with_fixup

    sig = tuple(t.numba_type() for t in argtypes)
    library, _ = _compile_pyfunc_with_fixup(py_func, sig, device=False, abi="numba", cc=cc, fastmath=fastmath)
    return library


def library_entry(library) -> str:
    """The kernel entry name a code library of `cuda_kernel_library` defines."""
    return library._entry_name


def cuda_libraries_ptx(libraries: list, cc: tuple[int, int]) -> list[str]:
    """PTX of several kernels' code libraries from one NVVM run: one module with an entry per
    kernel. NVVM is handed every library's LLVM IR at once, a module that several share (a device
    function's) once, as numba-cuda hands it one library's modules; libdevice is read and
    optimised once instead of once per kernel, and the link gets one input instead of many.
    Under numba's debug info NVVM takes one module at a time (as numba-cuda does), so then each
    library is a module of its own."""
    _numba_cuda_imported()
    from numba.cuda.cudadrv import nvrtc, nvvm

    options = dict(libraries[0]._nvvm_options)  # fastmath and opt: the same for a specialisation's kernels
    if "g" in options:
        return [library.get_asm_str(cc=cc) for library in libraries]
    options["arch"] = nvrtc.get_arch_option(*cc)
    modules = list(dict.fromkeys(ir for library in libraries for ir in library.llvm_strs))
    return [nvvm.compile_ir(modules, **options).decode().strip("\x00").strip()]


def expected_param_sizes(argtypes: list[ArgKind]) -> list[int]:
    """numba's flattened parameter sizes for these argument kinds (what we pack)."""
    return [size for t in argtypes for size in t.param_sizes]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def error_summary(error: BaseException) -> tuple[str, str]:
    """(the useful sentence, the whole text without colour codes) of a numba compile error."""
    text = _ANSI.sub("", str(error))
    lines = [ln for ln in text.splitlines() if ln.strip()]
    summary = lines[0] if lines else type(error).__name__
    for ln in lines:  # numba puts the useful sentence after a header line
        if not ln.startswith(("Failed in", "During:", "File", "-", "Use of", "[1]", "No implementation")):
            summary = ln.strip()
            break
    return summary, text


def is_compile_error(error: BaseException) -> bool:
    """Raised by numba / numba-cuda's compiler (not by qgraph itself)."""
    from ..errors import QgraphError

    mod = type(error).__module__ or ""
    return mod.startswith("numba") and not isinstance(error, QgraphError)


def is_typing_stage(error: BaseException) -> bool:
    """A compile error of typing or lowering (as opposed to an error raised while running)."""
    from numba.core import errors

    return isinstance(error, (errors.TypingError, errors.UnsupportedError, errors.LoweringError,
                              errors.NotDefinedError, errors.UnsupportedParforsError, errors.CompilerError))


def error_locations(error: BaseException) -> list[tuple[str, int]]:
    """(file, line) pairs a numba compile error points at.

    numba (CPU) writes them into the message; numba-cuda's compile() drops them, but the
    IR location is still a local (`loc`, or an instruction's `.loc`) in the frames that
    raised it, so the traceback is searched too.
    """
    found = [(f, int(n)) for f, n in re.findall(r'File "([^"]+)", line (\d+)', str(error))]
    tb = error.__traceback__
    while tb is not None:
        for name in ("loc", "inst", "stmt"):
            value = tb.tb_frame.f_locals.get(name)
            loc = value if name == "loc" else getattr(value, "loc", None)
            line, filename = getattr(loc, "line", None), getattr(loc, "filename", None)
            if isinstance(line, int) and isinstance(filename, str):
                found.append((filename, line))
        tb = tb.tb_next
    return found


def int64_argtype() -> ArgKind:
    from ..args.kinds import scalar_kind

    return scalar_kind(np.dtype(np.int64))
