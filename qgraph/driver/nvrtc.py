"""NVRTC: compile the small CUDA C++ helper kernels qgraph ships (never numba)."""

from __future__ import annotations

from ..errors import QgraphError


def compile_cubin(source: str, name: str, cc: tuple[int, int], options: tuple[str, ...] = ()) -> bytes:
    """A cubin for `cc` from CUDA C++ source (helper kernels qgraph writes itself; the
    benchmarks' hand-written baselines, with `options` such as --use_fast_math)."""
    from cuda.bindings import nvrtc

    def ok(result, what):
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise QgraphError(f"NVRTC {what} failed: {result[0]}")
        return result[1] if len(result) > 1 else None

    prog = ok(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "create")
    try:
        opts = [f"-arch=sm_{cc[0]}{cc[1]}".encode()] + [o.encode() for o in options]
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = ok(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise QgraphError(f"compiling {name} failed:\n{log.decode(errors='replace')}")
        size = ok(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = b" " * size
        ok(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def version() -> str:
    from cuda.bindings import nvrtc

    result = nvrtc.nvrtcVersion()
    return f"{result[1]}.{result[2]}"
