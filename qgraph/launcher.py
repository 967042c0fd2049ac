"""Per-arch launch of a kernel call.

`for_kernel` gives each kernel a launcher per target (the CPU, or each CUDA device its
calls run on). A launcher resolves the call's arguments to a specialisation key (generated
straight-line code), finds or builds the specialisation and runs it: on the CPU the numba
runner (backends/cpu.py); on CUDA eager task launches, a cached graph, a device WHILE
graph or the host do-while fallback (backends/cuda.py).
"""

from __future__ import annotations

from .lang.options import KernelOptions
from .runtime import CpuState, DeviceState, State


def for_kernel(kernel, state: State, target: DeviceState | CpuState, options: KernelOptions):
    """A launcher for `kernel` on `target` (the CPU, or one CUDA device of the state), running it
    with `options` (resolved: no option left to the environment)."""
    if isinstance(target, CpuState):
        from .backends.cpu import CpuLauncher

        return CpuLauncher(kernel, state, options)
    assert isinstance(target, DeviceState)
    from .backends.cuda import CudaLauncher

    return CudaLauncher(kernel, state, target, options)
