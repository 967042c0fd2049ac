"""PTX and SASS statistics of qgraph kernels and hand-written CUDA C++, without a GPU.

Used by benchmarks/machine_code.py to put the machine code of the compute benchmark's
kernels side by side: PTX instruction counts from the text, registers and spills from
`ptxas -v`, SASS instruction counts from `cuobjdump -sass` or `nvdisasm` (each only when
the tool is on PATH). qgraph's PTX comes either from a QGRAPH_DUMP directory (a run on a
GPU) or from `backends.inspection.offline_ptx`, which drives the same code generation as the
CUDA backend with numba-cuda told the compute capability (NVVM, no driver).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile


def nvrtc_ptx(source: str, cc: tuple[int, int], options: tuple[str, ...] = (), name: str = "hand.cu") -> str:
    """PTX of hand-written CUDA C++ from NVRTC, with the options the benchmark compiles it with."""
    from ..driver.nvrtc import compile_ptx

    return compile_ptx(source, name, cc, options)


def entry_body(ptx: str, name: str | None = None) -> str:
    """The body of one `.entry`: the first, or the one named `name` (extern "C" names are unmangled)."""
    for match in re.finditer(r"\.entry\s+(\S+?)\s*\(", ptx):
        if name is None or name == match.group(1):
            start = ptx.index("{", match.end())
            depth, k = 0, start
            while True:
                depth += {"{": 1, "}": -1}.get(ptx[k], 0)
                if depth == 0:
                    return ptx[start:k + 1]
                k += 1
    raise KeyError(f"no .entry named like {name!r}")


def ptx_counts(body: str) -> dict[str, int]:
    """Instructions of one entry's body: all, those on float64 (parameter loads aside), conversions,
    64-bit integer multiplies and integer divisions (where generated and hand-written code differ)."""
    lines = [ln.strip() for ln in body.splitlines()]
    code = [ln for ln in lines if ln and not ln.startswith(("//", ".", "{", "}", "$")) and not ln.endswith(":")]
    bare = [re.sub(r"^@!?%\w+\s+", "", ln) for ln in code]  # without a guard predicate
    return {"ptx": len(code),
            "f64": sum(1 for ln in bare if ".f64" in ln.split(None, 1)[0] and not ln.startswith("ld.param")),
            "cvt": sum(1 for ln in bare if ln.startswith("cvt.")),  # conversions, not cvta (address spaces)
            "int64 mul": sum(1 for ln in bare if re.match(r"mul\.(lo|wide)\.[su]64", ln)),
            "int div": sum(1 for ln in bare if re.match(r"(div|rem)\.[su]", ln))}


def _sass_lines(text: str) -> int:
    return len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+[A-Z@{]", text, re.M))


def _nvdisasm_function(text: str, entry: str | None) -> str:
    """The part of an nvdisasm listing that holds `entry` (all of it when None)."""
    if entry is None:
        return text
    parts = re.split(r"^\s*\.section\s+\.text\.", text, flags=re.M)
    for part in parts[1:]:
        if part.split(",", 1)[0].strip().strip('"') == entry:
            return part
    return ""


def assembled(ptx: str, arch: str, entry: str | None = None) -> dict[str, int | None]:
    """Registers, spill bytes and SASS instructions of one entry (or a module's only one):
    `ptxas -v`, then `cuobjdump -sass` or `nvdisasm`; empty when ptxas is not on PATH."""
    ptxas = shutil.which("ptxas")
    if not ptxas:
        return {}
    with tempfile.TemporaryDirectory() as d:
        cubin, info = _assembled(ptxas, ptx, arch, entry, d)
        regs = re.search(r"Used (\d+) registers", info)
        spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", info)
        result: dict[str, int | None] = {"regs": int(regs.group(1)) if regs else None,
                                         "spill B": sum(int(s) for s in spills)}
        cuobjdump, nvdisasm = shutil.which("cuobjdump"), shutil.which("nvdisasm")
        if cuobjdump:
            command = [cuobjdump, "-sass"] + (["-fun", entry] if entry else []) + [cubin]
            result["sass"] = _sass_lines(subprocess.run(command, capture_output=True, text=True).stdout)
        elif nvdisasm:
            listing = subprocess.run([nvdisasm, cubin], capture_output=True, text=True).stdout
            result["sass"] = _sass_lines(_nvdisasm_function(listing, entry))
        return result


def _assembled(ptxas: str, ptx: str, arch: str, entry: str | None, directory: str) -> tuple[str, str]:
    """`ptx` assembled by ptxas -v into a cubin in `directory`: its path, and ptxas's report (the
    part about `entry` when given)."""
    src, cubin = os.path.join(directory, "k.ptx"), os.path.join(directory, "k.cubin")
    with open(src, "w") as f:
        f.write(ptx)
    out = subprocess.run([ptxas, "-v", f"-arch={arch}", src, "-o", cubin], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"ptxas failed:\n{out.stderr[-2000:]}")
    info = out.stderr
    if entry is not None:
        info = info.split(f"Compiling entry function '{entry}'")[-1].split("Compiling entry function")[0]
    return cubin, info


def sass_profile(ptx: str, arch: str, entry: str | None = None) -> dict[str, int | None]:
    """What the index arithmetic of one entry costs in SASS: instructions (NOPs and the closing
    self-branch aside), those before the first global load, integer compares, selects and
    min/max, 64-bit carry halves (`.X`, `.EX`: an add or compare on 64 bits is two), registers.
    Empty when ptxas or nvdisasm is not on PATH."""
    ptxas, nvdisasm = shutil.which("ptxas"), shutil.which("nvdisasm")
    if not (ptxas and nvdisasm):
        return {}
    with tempfile.TemporaryDirectory() as d:
        cubin, info = _assembled(ptxas, ptx, arch, entry, d)
        regs = re.search(r"Used (\d+) registers", info)
        listing = _nvdisasm_function(subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True).stdout,
                                     entry)
    lines = [ln for ln in listing.splitlines() if re.match(r"^\s+/\*[0-9a-f]{4,}\*/\s+[A-Z@{]", ln)]
    code = [re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", ln).split(";")[0].strip() for ln in lines]
    code = [c for c in code if not c.startswith("NOP")]
    while code and code[-1].startswith("BRA"):  # the self-branch after the last EXIT
        code.pop()
    ops = [re.sub(r"^@!?U?P\w+\s+", "", c).split()[0] for c in code]
    first_load = next((k for k, op in enumerate(ops) if op.startswith("LDG")), None)
    return {"sass": len(ops), "before load": first_load,
            "cmp/sel": sum(1 for op in ops if op.startswith(("ISETP", "SEL", "IMNMX", "VIMNMX", "VIADDMNMX"))),
            "64-bit": sum(1 for op in ops if op.endswith(".X") or ".X." in op or ".EX" in op),
            "regs": int(regs.group(1)) if regs else None}
