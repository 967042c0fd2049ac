"""The benchmark workload: a kernel of T tiny tasks, as qgraph and as hand-written CUDA C++.

Task k reads and writes its own array: `x_k[i] = x_k[i] * a + c_k` for i < n. With n = 256
every task is one block, so a call measures launch overhead, not arithmetic. qgraph
needs kernel source in a file, so the T-task kernels are written to a module and imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time


def task_constant(k: int) -> float:
    return 1.0 + 0.5 * k


def kernel_module_source(tasks: int) -> str:
    params = ", ".join(f"x{k}" for k in range(tasks))
    lines = ["import qgraph", ""]
    body = []
    for k in range(tasks):
        body += ["    for i in range(n):", f"        x{k}[i] = x{k}[i] * a + {task_constant(k)!r}"]
    loop_body = body + ["    counter[0] -= 1", "    flag[0] = 1 if counter[0] > 0 else 0"]
    for name, deco in (("eager", "@qgraph.kernel"), ("graph", "@qgraph.kernel(cuda_graph=True)")):
        lines += [deco, f"def {name}({params}, n, a: qgraph.f32):"] + body + [""]
    lines += ['@qgraph.kernel(graph_while="flag")', f"def loop({params}, counter, flag, n, a: qgraph.f32):"]
    lines += loop_body + [""]
    # the loop rows time a repeat loop's passes: interchanged, its elementwise body would be one task
    lines += ["@qgraph.kernel(interchange=False)", f"def repeat({params}, k: int, n, a: qgraph.f32):",
              "    for _ in qgraph.repeat(k):"]
    lines += ["    " + line for line in body] + [""]
    return "\n".join(lines)


def numba_loops_source(tasks: int) -> str:
    """The same T loops hand-written for numba: one `njit(parallel=True, cache=True)` function
    of T `prange` loops (numba's own cold compile and cache load, beside qgraph's)."""
    params = ", ".join(f"x{k}" for k in range(tasks))
    body = "".join(f"    for i in numba.prange(n):\n        x{k}[i] = x{k}[i] * a + {task_constant(k)!r}\n"
                   for k in range(tasks))
    return f"import numba\n\n\n@numba.njit(parallel=True, cache=True)\ndef loops({params}, n, a):\n{body}"


_MODULES: dict[str, object] = {}


def module_from_source(name: str, source: str):
    """Import `source` as module `name` from a file (qgraph compiles kernels from source)."""
    module = _MODULES.get(name)
    if module is None:
        directory = tempfile.mkdtemp(prefix="qgraph-bench-")
        path = os.path.join(directory, f"{name}.py")
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # importable by name, so compiled CPU code can be cached
        spec.loader.exec_module(module)
        _MODULES[name] = module
    return module


def kernels_for(tasks: int):
    """A module with `eager`, `graph`, `loop` and `repeat` qgraph kernels of `tasks` tasks."""
    return module_from_source(f"qgraph_bench_t{tasks}", kernel_module_source(tasks))


CUDA_SOURCE = r"""
typedef unsigned long long cudaGraphConditionalHandle;
#ifndef CUDARTAPI
#define CUDARTAPI
#endif
extern "C" __device__ __cudart_builtin__ void CUDARTAPI cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);

extern "C" __global__ void task(float* x, long long n, float a, float c)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + c;
}

extern "C" __global__ void task_pdl(float* x, long long n, float a, float c)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + c;
}

extern "C" __global__ void countdown(int* counter, int* flag)
{
    counter[0] -= 1;
    flag[0] = counter[0] > 0 ? 1 : 0;
}

extern "C" __global__ void condition(cudaGraphConditionalHandle handle, const int* flag)
{
    cudaGraphSetConditional(handle, *flag != 0 ? 1u : 0u);
}
"""

NUMBA_TASK_SOURCE = '''
from numba import cuda

@cuda.jit
def task(x, n, a, c):
    i = cuda.grid(1)
    if i < n:
        x[i] = x[i] * a + c
'''


def warm_up_gpu(seconds: float = 1.0) -> None:
    """Keep the GPU busy for a moment so its clocks leave idle before anything is timed."""
    import numpy as np

    import qgraph

    module = kernels_for(1)
    x = qgraph.from_numpy(np.zeros(1 << 22, np.float32))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            module.eager(x, x.shape[0], 1.0)
        qgraph.sync()
