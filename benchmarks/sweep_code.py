"""SASS of the index-heavy sweeps beside their hand-written CUDA C++ twins, without a GPU.

    python benchmarks/sweep_code.py [--arch sm_90]

The stable-fluids Jacobi sweep (clamped neighbours), the README's relax sweep and copy-back,
and the compute benchmark's 2-D and 3-D stencils: qgraph's task compiled offline (numba-cuda
and NVVM for the architecture, no driver), the twin by NVRTC, both through ptxas and nvdisasm
(on PATH). Columns: SASS instructions, those before the first global load, integer compares
and selects (min/max included), 64-bit carry halves, registers (qgraph.compiler.ptx_stats).
"""

from __future__ import annotations

import argparse

import numpy as np

from qgraph.backends.inspection import offline_ptx
from qgraph.bench import compute_sources, fluids_pressure, reduction_kernels
from qgraph.bench.kernels import module_from_source
from qgraph.compiler.ptx_stats import nvrtc_ptx, sass_profile
from qgraph.examples.stable_fluids_kernels import pressure_scalar


def cases():
    """(label, qgraph kernel, example arguments, task index, twin's CUDA source, twin's entry)."""
    relax = module_from_source("qgraph_bench_reductions", reduction_kernels.KERNELS_SOURCE).relax
    compute = module_from_source("qgraph_bench_compute", compute_sources.KERNELS_SOURCE)
    f4, f8, i4 = (lambda *s, t=t: np.zeros(s, t) for t in (np.float32, np.float64, np.int32))
    relax_args = (f8(128, 128), f8(128, 128), f8(1), i4(1), i4(1), 0.0, 100)
    return [("fluids sweep", pressure_scalar, (f4(256, 128),) * 3 + (i4(1), i4(1), 100), 0,
             fluids_pressure.CUDA_SOURCE, "pressure_sweep"),
            ("relax sweep", relax, relax_args, 1, reduction_kernels.CUDA_SOURCE, "jacobi"),
            ("relax copy", relax, relax_args, 2, reduction_kernels.CUDA_SOURCE, "copy_back"),
            ("stencil 2-D", compute.stencil2d, (f4(64, 64),) * 2, 0, compute_sources.CUDA_SOURCE, "stencil2d"),
            ("stencil 3-D", compute.stencil3d, (f4(16, 16, 16),) * 2, 0, compute_sources.CUDA_SOURCE, "stencil3d")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90")
    arch = parser.parse_args().arch
    digits = arch.removeprefix("sm_")
    cc = (int(digits[:-1]), int(digits[-1]))
    columns = ("sass", "before load", "cmp/sel", "64-bit", "regs")
    print(f"{'kernel':<13} {'code':<9}" + "".join(f"{c:>12}" for c in columns))
    twins: dict[str, str] = {}
    for label, kernel, args, task, source, entry in cases():
        if source not in twins:
            twins[source] = nvrtc_ptx(source, cc)
        for who, ptx, name in (("qgraph", offline_ptx(kernel, args, cc)[task], None),
                               ("CUDA C++", twins[source], entry)):
            cells = sass_profile(ptx, arch, name)
            print(f"{label:<13} {who:<9}" + "".join(f"{str(cells.get(c, '-')):>12}" for c in columns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
