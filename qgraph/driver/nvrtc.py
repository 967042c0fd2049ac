"""NVRTC: compile the small CUDA C++ helper kernels qgraph ships (never numba), and the
benchmarks' hand-written baselines."""

from __future__ import annotations

import threading

from ..errors import QgraphError

_RESULTS: dict = {}  # (source, name, arch, options, output) -> the image: one compile per process
_LOCKS: dict = {}
_GUARD = threading.Lock()


def _compile(source: str, name: str, arch: str, options: tuple[str, ...], output: str) -> bytes:
    """_compiled once per process and arguments: a compile started on init's thread (compiler.nvvm.
    load_soon) is waited for, not repeated."""
    key = (source, name, arch, tuple(options), output)
    with _GUARD:
        lock = _LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _RESULTS:
            _RESULTS[key] = _compiled(source, name, arch, options, output)
        return _RESULTS[key]


def _compiled(source: str, name: str, arch: str, options: tuple[str, ...], output: str) -> bytes:
    """NVRTC's `output` ("CUBIN" or "PTX") for `arch` (sm_XY for a cubin, compute_XY for PTX)."""
    from cuda.bindings import nvrtc

    def ok(result, what):
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise QgraphError(f"NVRTC {what} failed: {result[0]}")
        return result[1] if len(result) > 1 else None

    prog = ok(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "create")
    try:
        opts = [f"-arch={arch}".encode()] + [o.encode() for o in options]
        err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            size = ok(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            raise QgraphError(f"compiling {name} failed:\n{log.decode(errors='replace')}")
        size = ok(getattr(nvrtc, f"nvrtcGet{output}Size")(prog), f"{output} size")
        image = b" " * size
        ok(getattr(nvrtc, f"nvrtcGet{output}")(prog, image), output)
        return image
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_cubin(source: str, name: str, cc: tuple[int, int], options: tuple[str, ...] = ()) -> bytes:
    """A cubin for `cc` from CUDA C++ source (helper kernels qgraph writes itself; the
    benchmarks' hand-written baselines, with `options` such as --use_fast_math)."""
    return _compile(source, name, f"sm_{cc[0]}{cc[1]}", options, "CUBIN")


def compile_ptx(source: str, name: str, cc: tuple[int, int], options: tuple[str, ...] = ()) -> str:
    """The PTX NVRTC makes of CUDA C++ source for `cc` (the machine-code comparison reads it)."""
    return _compile(source, name, f"compute_{cc[0]}{cc[1]}", options, "PTX").decode().rstrip("\x00")


def version() -> str:
    from cuda.bindings import nvrtc

    result = nvrtc.nvrtcVersion()
    return f"{result[1]}.{result[2]}"
