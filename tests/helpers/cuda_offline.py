"""CUDA code generation without a GPU (test_cuda_codegen.py's method, used by every module that
checks PTX): signatures, and the PTX of a kernel's tasks for sm_90 as the backend compiles them.
`compile_offline` and `ptx_of` need numba-cuda told the compute capability: conftest's `sm90`
fixture (or a monkeypatch of its own); `compile_with` and `offline_entry_body` need no fixture."""

from __future__ import annotations

import numpy as np

from qgraph.args.kinds import array_sig, scalar_sig
from qgraph.compiler import cuda_program
from qgraph.lang.lower.lowering import lower_funcs
from qgraph.lang.options import KernelOptions


def A(dtype, ndim):
    return array_sig(np.dtype(dtype), ndim, True)


def S(dtype):
    return scalar_sig(np.dtype(dtype))


def ptx_of(kernel, key) -> list[str]:
    return [ptx for _, ptx in compile_offline(kernel, key)[0]]


def compile_offline(kernel, key, fast_math=False, default_float="f64", deterministic=False):
    """As the backend compiles: the flattened source (struct leaves, vector components)."""
    options = KernelOptions(deterministic=deterministic, fast_math=fast_math, default_float=default_float)
    codes = cuda_program.task_codes(kernel.source, key, options)
    return cuda_program.compile_ptx(codes.flat.src, codes.codes, codes.orders, codes.types,
                                     lower_funcs(codes.symbols), (9, 0), codes.flat.kinds, fast_math)


def compile_with(kernel, key, fast_math=False, default_float="f64"):
    """PTX of every task, compiled without a GPU (numba-cuda told sm_90 for the call)."""
    import numba.cuda.dispatcher as dispatcher

    class Hopper:
        compute_capability = (9, 0)

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: Hopper()
    try:
        return [ptx for _, ptx in compile_offline(kernel, key, fast_math, default_float)[0]]
    finally:
        dispatcher.get_current_device = saved


def offline_entry_body(kernel, args, fast: bool = False):
    """The body of the one entry of `kernel`'s PTX for sm_90 on `args` (backends.inspection.offline_ptx)."""
    from qgraph.backends import inspection
    from qgraph.compiler import ptx_stats

    (ptx,) = inspection.offline_ptx(kernel, args, (9, 0))
    return ptx_stats.entry_body(ptx)
