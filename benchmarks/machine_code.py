"""Machine code of qgraph kernels next to their hand-written CUDA C++ twins.

    python benchmarks/machine_code.py [--fast-math]

For the stencil, N-body and saxpy kernels of the compute benchmark: PTX instructions,
float64 arithmetic and conversions, and (with ptxas and cuobjdump on PATH) registers,
spill bytes and SASS instructions of each kernel, qgraph's (from QGRAPH_DUMP) beside the
same algorithm compiled by NVRTC. Needs a GPU (qgraph compiles on the first call).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

_DUMP = tempfile.mkdtemp(prefix="qgraph-machine-code-")
os.environ["QGRAPH_DUMP"] = _DUMP

import qgraph  # noqa: E402
from qgraph.bench.compute_sources import CUDA_SOURCE, KERNELS_SOURCE  # noqa: E402
from qgraph.bench.kernels import module_from_source  # noqa: E402


def nvrtc_ptx(source: str, cc: tuple[int, int], options: tuple[str, ...]) -> str:
    """PTX of hand-written CUDA C++ (NVRTC, as the benchmark compiles it)."""
    from cuda.bindings import nvrtc

    prog = nvrtc.nvrtcCreateProgram(source.encode(), b"hand.cu", 0, [], [])[1]
    opts = [f"-arch=compute_{cc[0]}{cc[1]}".encode()] + [o.encode() for o in options]
    if nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError("NVRTC failed")
    size = nvrtc.nvrtcGetPTXSize(prog)[1]
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    return ptx.decode().rstrip("\x00")


def entry_body(ptx: str, name: str | None = None) -> str:
    """The body of one `.entry` (the first, or the one whose name contains `name`)."""
    for match in re.finditer(r"\.entry\s+(\S+?)\s*\(", ptx):
        if name is None or name in match.group(1):
            start = ptx.index("{", match.end())
            depth, k = 0, start
            while True:
                depth += {"{": 1, "}": -1}.get(ptx[k], 0)
                if depth == 0:
                    return ptx[start:k + 1]
                k += 1
    raise KeyError(name)


_F64_ARITH = r"(?:@\S+\s+)?(add|sub|mul|fma|div|sqrt|rcp|setp)\S*\.f64"


def ptx_counts(body: str) -> dict:
    lines = [ln.strip() for ln in body.splitlines()]
    code = [ln for ln in lines if ln and not ln.startswith(("//", ".", "{", "}", "$")) and not ln.endswith(":")]
    return {"ptx": len(code),
            "f64 arith": sum(1 for ln in code if re.match(_F64_ARITH, ln)),
            "cvt": sum(1 for ln in code if ln.startswith("cvt")),
            "int64 mul": sum(1 for ln in code if re.match(r"mul\.(lo|wide)\.[su]64", ln)),
            "int div/rem": sum(1 for ln in code if re.match(r"(div|rem)\.[su]", ln))}


def assembled(ptx: str, arch: str, entry: str | None = None) -> dict:
    """Registers, spill bytes and SASS instruction count from ptxas / cuobjdump, if present:
    of the module's only entry, or of `entry` (ptxas -v reports every entry of a module)."""
    ptxas, cuobjdump = shutil.which("ptxas"), shutil.which("cuobjdump")
    if not ptxas:
        return {}
    with tempfile.TemporaryDirectory() as d:
        src, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        out = subprocess.run([ptxas, "-v", f"-arch={arch}", src, "-o", cubin], capture_output=True, text=True)
        info = out.stderr
        if entry is not None:
            info = info.split(f"Compiling entry function '{entry}'")[-1].split("Compiling entry function")[0]
        regs = re.search(r"Used (\d+) registers", info)
        spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", info)
        result = {"regs": int(regs.group(1)) if regs else None, "spill B": sum(int(s) for s in spills)}
        if cuobjdump and out.returncode == 0:
            command = [cuobjdump, "-sass"] + (["-fun", entry] if entry else []) + [cubin]
            sass = subprocess.run(command, capture_output=True, text=True).stdout
            result["sass"] = len(re.findall(r"^\s+/\*[0-9a-f]{4}\*/\s+[A-Z@]", sass, re.M))
        return result


def compiled_ptx(call) -> str:
    """Run `call` (a first call compiles) and return the PTX it dumped (not the launch_dependents variant)."""
    before = set(glob.glob(os.path.join(_DUMP, "*.ptx")))
    call()
    qgraph.sync()
    new = [f for f in set(glob.glob(os.path.join(_DUMP, "*.ptx"))) - before if "trigger" not in f]
    if len(new) != 1:
        raise RuntimeError(f"expected one new PTX file in {_DUMP}, found {new}")
    with open(new[0]) as f:
        return f.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    qgraph.init("cuda")
    cc = qgraph.runtime.STATE.cuda.info.compute_capability
    arch = f"sm_{cc[0]}{cc[1]}"
    mod = module_from_source("qgraph_bench_compute", KERNELS_SOURCE)
    f32 = np.float32
    u2, u3 = qgraph.ndarray(f32, (64, 64)), qgraph.ndarray(f32, (16, 16, 16))
    bodies = [qgraph.ndarray(f32, (256,)) for _ in range(7)]
    ptx = {"stencil2d": compiled_ptx(lambda: mod.stencil2d(u2, qgraph.ndarray(f32, (64, 64)))),
           "stencil3d": compiled_ptx(lambda: mod.stencil3d(u3, qgraph.ndarray(f32, (16, 16, 16)))),
           "nbody": compiled_ptx(lambda: mod.nbody(*bodies, 1e-6, 0.01)),
           "nbody_fast": compiled_ptx(lambda: mod.nbody_fast(*bodies, 1e-6, 0.01)),
           "saxpy": compiled_ptx(lambda: mod.saxpy(bodies[0], bodies[1], 0.5))}
    hand = {False: nvrtc_ptx(CUDA_SOURCE, cc, ()), True: nvrtc_ptx(CUDA_SOURCE, cc, ("--use_fast_math",))}
    cases = [("stencil2d", "stencil2d", False), ("stencil3d", "stencil3d", False), ("nbody", "nbody", False),
             ("nbody_fast", "nbody", True), ("saxpy", "saxpy", False)]
    header = f"{'kernel':<12} {'code':<9} {'ptx':>5} {'f64 arith':>9} {'cvt':>4} {'int64 mul':>9} " \
             f"{'int div':>7} {'regs':>5} {'spill B':>7} {'sass':>5}"
    print(f"machine code on {arch}: qgraph (numba-cuda + NVVM) vs hand-written CUDA C++ (NVRTC)")
    print(header)
    for qname, hname, fast in cases:
        for who, text in (("qgraph", ptx[qname]), ("CUDA C++", hand[fast])):
            counts = ptx_counts(entry_body(text, None if who == "qgraph" else hname))
            asm = assembled(text, arch, None if who == "qgraph" else hname)
            print(f"{qname:<12} {who:<9} {counts['ptx']:>5} {counts['f64 arith']:>9} {counts['cvt']:>4} "
                  f"{counts['int64 mul']:>9} {counts['int div/rem']:>7} {str(asm.get('regs', '-')):>5} "
                  f"{str(asm.get('spill B', '-')):>7} {str(asm.get('sass', '-')):>5}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
