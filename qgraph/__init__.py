"""qgraph: a kernel-decorator JIT with CUDA graph capture for simulations and solvers.

    import qgraph
    qgraph.init()                      # "cuda" when a GPU is usable, else "cpu"

    @qgraph.kernel(graph_while="flag")
    def relax(u, un, flag, tol: float): ...

See docs/ for the guide; the public names below are the contract (SPEC.md).
"""

from . import distributed
from .args.structs import struct
from .backends.inspection import KernelCode, TaskCode
from .capture.step import GraphFunction, StepStats, graph, while_loop
from .capture.step_host import host_call
from .compiler.numba_probes import install_gate as install_numba_probe_gate
from .decorator import Func, Kernel, KernelStats, compile, func, kernel
from .dtypes import f32, f64, i8, i16, i32, i64, u8, u16, u32, u64
from .errors import FallbackWarning, HistoryWarning, LoopCancelled, QgraphError, QgraphSyntaxError
from .interop.jax_op import jax_op
from .interop.torch_op import torch_op
from .lang.front.builtins import (
    atomic_add,
    atomic_max,
    atomic_min,
    atomic_sub,
    clamp,
    cond,
    loop,
    ndrange,
    randint,
    randn,
    random,
    repeat,
    report,
    serial,
    stop_gradient,
)
from .lang.types.vector_types import (
    cross,
    determinant,
    dot,
    inverse,
    mat22,
    mat22d,
    mat33,
    mat33d,
    mat44,
    mat44d,
    matrix,
    norm,
    norm_sqr,
    normalized,
    outer,
    trace,
    transpose,
    vec2,
    vec2d,
    vec3,
    vec3d,
    vec4,
    vec4d,
    vector,
)
from .runtime import current_arch, device, device_count, device_info, init, reset, sync
from .runtime.arrays import Ndarray, from_numpy, ndarray
from .runtime.random_state import seed
from .tape.tape import Tape, TapeStats
from .tools.measure import BenchmarkResult, benchmark

install_numba_probe_gate()  # before anything imports numba: probes a compile never uses are skipped

__version__ = "0.1.0"

__all__ = [
    "BenchmarkResult", "FallbackWarning", "Func", "GraphFunction", "Kernel", "KernelCode", "KernelStats", "Ndarray",
    "QgraphError", "StepStats", "graph",
    "QgraphSyntaxError",
    "atomic_add", "atomic_max", "atomic_min", "atomic_sub", "benchmark", "clamp", "compile", "current_arch",
    "device", "device_count", "device_info", "distributed",
    "f32", "f64",
    "from_numpy", "func", "i8", "i16", "i32", "i64", "init", "kernel", "ndarray", "ndrange", "reset", "serial",
    "stop_gradient",
    "sync", "u8", "u16", "u32", "u64",
    "cross", "determinant", "dot", "inverse", "mat22", "mat33", "mat44", "matrix", "norm", "norm_sqr", "normalized",
    "outer", "randint", "randn", "random", "seed", "struct", "trace", "transpose", "vec2", "vec3", "vec4", "vector",
    "vec2d", "vec3d", "vec4d", "mat22d", "mat33d", "mat44d",
    "cond", "loop", "repeat", "while_loop", "torch_op", "jax_op", "TaskCode", "Tape", "TapeStats",
    "report", "HistoryWarning", "LoopCancelled", "host_call",
]
