"""Machine code of qgraph kernels next to their hand-written CUDA C++ twins.

    python benchmarks/machine_code.py [--offline] [--arch sm_90] [--ptx-dir DIR]

For the stencil, N-body and saxpy kernels of the compute benchmark: PTX instructions,
instructions on float64, conversions, 64-bit integer multiplies and integer divisions,
and (with ptxas, and cuobjdump or nvdisasm, on PATH) registers, spill bytes and SASS
instructions of each kernel: qgraph's beside the same algorithm compiled by NVRTC with
the benchmark's options. With a GPU, qgraph's PTX is what its first calls compile (read
from QGRAPH_DUMP); without one (or with --offline) the same code generation runs for
the given architecture through numba-cuda and NVVM, no driver needed.
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile

import numpy as np

_DUMP = tempfile.mkdtemp(prefix="qgraph-machine-code-")
os.environ["QGRAPH_DUMP"] = _DUMP  # read by qgraph.init(): every compiled PTX file lands here

import qgraph  # noqa: E402
from qgraph.backends.inspection import offline_ptx  # noqa: E402
from qgraph.bench.compute_sources import CUDA_SOURCE, KERNELS_SOURCE  # noqa: E402
from qgraph.bench.kernels import module_from_source  # noqa: E402
from qgraph.compiler.ptx_stats import (  # noqa: E402
    assembled,
    entry_body,
    nvrtc_ptx,
    ptx_counts,
)

_BODIES = [(256,)] * 7 + [1e-6, 0.01]
_NBODY = [("CUDA C++", "nbody"), ("C++ plain", "nbody_plain")]  # with and without __restrict__
# qgraph kernel, hand compiled with --use_fast_math, (label, entry) of the hand-written twins, arguments
CASES = [("stencil2d", False, [("CUDA C++", "stencil2d")], [(64, 64), (64, 64)]),
         ("stencil3d", False, [("CUDA C++", "stencil3d")], [(16, 16, 16), (16, 16, 16)]),
         ("nbody", False, _NBODY, _BODIES),
         ("nbody_fast", True, _NBODY, _BODIES),
         ("saxpy", False, [("CUDA C++", "saxpy")], [(256,), (256,), 0.5])]


def _dumped_ptx(call) -> str:
    """Run `call` (a first call compiles) and return the PTX it dumped (not the launch_dependents variant)."""
    before = set(glob.glob(os.path.join(_DUMP, "*.ptx")))
    call()
    qgraph.sync()
    new = [f for f in set(glob.glob(os.path.join(_DUMP, "*.ptx"))) - before if "trigger" not in f]
    if len(new) != 1:
        raise RuntimeError(f"expected one new PTX file in {_DUMP}, found {new}")
    with open(new[0]) as f:
        return f.read()


def qgraph_ptx(mod, on_gpu: bool, cc: tuple[int, int]) -> dict[str, str]:
    """Each case's qgraph PTX: compiled by a call on the GPU, or offline for `cc`."""
    result = {}
    for name, _, _, shapes in CASES:
        kernel = getattr(mod, name)
        host = [np.zeros(s, np.float32) if isinstance(s, tuple) else s for s in shapes]
        if on_gpu:
            args = [qgraph.from_numpy(a) if isinstance(a, np.ndarray) else a for a in host]
            result[name] = _dumped_ptx(lambda k=kernel, a=args: k(*a))
        else:
            (result[name],) = offline_ptx(kernel, tuple(host), cc)
    return result


def _gpu_cc(offline: bool) -> tuple[int, int] | None:
    if offline:
        return None
    try:
        qgraph.init("cuda")
    except Exception as e:  # no driver or no device here: compile offline
        print(f"(no usable GPU: {type(e).__name__}; compiling offline)")
        return None
    return tuple(qgraph.runtime.STATE.cuda.info.compute_capability)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline", action="store_true", help="compile without the GPU even if there is one")
    parser.add_argument("--arch", default="sm_90", help="target without a GPU (default sm_90)")
    parser.add_argument("--ptx-dir", help="also write every PTX compared here to this directory")
    args = parser.parse_args()
    cc = _gpu_cc(args.offline)
    on_gpu = cc is not None
    if cc is None:
        digits = args.arch.removeprefix("sm_")
        cc = (int(digits[:-1]), int(digits[-1]))
    arch = f"sm_{cc[0]}{cc[1]}"
    mod = module_from_source("qgraph_bench_compute", KERNELS_SOURCE)
    ours = qgraph_ptx(mod, on_gpu, cc)
    hand = {fast: nvrtc_ptx(CUDA_SOURCE, cc, ("--use_fast_math",) if fast else ()) for fast in (False, True)}
    if args.ptx_dir:
        os.makedirs(args.ptx_dir, exist_ok=True)
        for name, text in list(ours.items()) + [(f"hand{'_fast' if f else ''}", t) for f, t in hand.items()]:
            with open(os.path.join(args.ptx_dir, f"{name}.ptx"), "w") as f:
                f.write(text)
    columns = ("ptx", "f64", "cvt", "int64 mul", "int div", "regs", "spill B", "sass")
    print(f"machine code for {arch} ({'compiled on the GPU' if on_gpu else 'offline'}): "
          "qgraph (numba-cuda + NVVM) vs hand-written CUDA C++ (NVRTC)")
    print(f"{'kernel':<11} {'code':<9} " + " ".join(f"{c:>9}" for c in columns))
    for qname, fast, twins, _ in CASES:
        for who, text, entry in [("qgraph", ours[qname], None)] + [(w, hand[fast], e) for w, e in twins]:
            cells = ptx_counts(entry_body(text, entry))
            cells.update(assembled(text, arch, entry))
            print(f"{qname:<11} {who:<9} " + " ".join(f"{str(cells.get(c, '-')):>9}" for c in columns))
    print("f64: instructions on float64 but parameter loads; cvt: conversions (not cvta); int64 mul: mul.lo or\n"
          "mul.wide on 64 bits; regs, spill B: ptxas -v; sass: cuobjdump -sass or nvdisasm ('-': not on PATH);\n"
          "C++ plain: the hand-written N-body without __restrict__ (plain loads, not the read-only path)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
