"""NVVM through cuda-bindings: the emitter's kernel modules (lang.llvm.kernels) to one PTX module,
with libdevice for the math, as numba-cuda compiles its own (the same options) but without numba.
"""

from __future__ import annotations

import functools
import os

from ..errors import QgraphError


@functools.lru_cache(maxsize=1)
def ir_version() -> tuple:
    """NVVM's IR version (major, minor, debug major, debug minor), for the modules' metadata."""
    from cuda.bindings import nvvm

    return tuple(nvvm.ir_version())


@functools.lru_cache(maxsize=1)
def libdevice() -> bytes:
    """libdevice's bitcode: where cuda-pathfinder finds it, else beside libnvvm (<root>/nvvm/libdevice)."""
    import cuda.pathfinder as pathfinder

    try:
        path = pathfinder.find_bitcode_lib("device")
    except Exception:
        path = None
    if not path:
        nvvm_lib = pathfinder.load_nvidia_dynamic_lib("nvvm").abs_path
        here = os.path.dirname(nvvm_lib)
        candidates = [os.path.join(here, "..", "libdevice", "libdevice.10.bc"),
                      os.path.join(here, "..", "nvvm", "libdevice", "libdevice.10.bc")]
        path = next((p for p in candidates if os.path.exists(p)), None)
        if path is None:
            raise QgraphError(f"libdevice.10.bc not found beside libnvvm ({nvvm_lib}); set CUDA_HOME to the CUDA "
                              "toolkit, or QGRAPH_EMITTER=0 to compile with numba-cuda")
    with open(path, "rb") as f:
        return f.read()


def load_soon(cc: tuple[int, int]) -> None:
    """On a thread, while init returns and the caller builds its data, what a first compile for `cc`
    would wait for: the emitter's modules, libnvvm and libdevice, and the NVRTC compiles of the
    device loops' helpers (driver.nvrtc keeps them). NVVM and NVRTC release the interpreter."""
    import threading

    def load() -> None:
        try:
            from ..driver.loop_state import HELPER_SOURCE, next_pass_ptx
            from ..driver.nvrtc import compile_cubin
            from ..lang.llvm import cuda_dialect, kernels  # noqa: F401  (the emitter: llvmlite's IR, lang.llvm)

            ir_version()
            libdevice()
            next_pass_ptx(tuple(cc))
            compile_cubin(HELPER_SOURCE, "qgraph_while.cu", tuple(cc))
        except Exception:  # reported by the compile that needs them
            pass

    # not a daemon: the interpreter waits for it at exit instead of tearing NVRTC or libnvvm down under
    # a compile (a short process, `qgraph precompile`, aborted with "double free or corruption")
    threading.Thread(target=load, name="qgraph: load NVVM").start()


def compile_ptx(modules: list[tuple[str, str]], cc: tuple[int, int], fast_math: bool = False) -> str:
    """One PTX module from NVVM IR modules (name, text), for compute capability `cc` (numba-cuda's
    options: -opt=3, and with fast math -ftz=1 -prec-div=0 -prec-sqrt=0 -fma=1)."""
    from cuda.bindings import nvvm

    options = ["-opt=3", f"-arch=compute_{cc[0]}{cc[1]}"]
    if fast_math:
        options += ["-ftz=1", "-fma=1", "-prec-div=0", "-prec-sqrt=0"]
    program = nvvm.create_program()
    try:
        for name, text in modules:
            data = text.encode()
            nvvm.add_module_to_program(program, data, len(data), name)
        library = libdevice()
        nvvm.lazy_add_module_to_program(program, library, len(library), "libdevice")
        try:
            nvvm.compile_program(program, len(options), options)
        except nvvm.nvvmError as e:
            size = nvvm.get_program_log_size(program)
            log = bytearray(size)
            nvvm.get_program_log(program, log)
            raise QgraphError(f"NVVM rejected the emitted code ({e}):\n{bytes(log).decode(errors='replace')}") from e
        size = nvvm.get_compiled_result_size(program)
        result = bytearray(size)
        nvvm.get_compiled_result(program, result)
    finally:
        nvvm.destroy_program(program)
    return bytes(result).decode().strip("\x00").strip()
