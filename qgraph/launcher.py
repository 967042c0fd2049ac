"""Per-arch launch of a kernel call.

`for_kernel` gives each kernel a launcher for the current target (the CPU, or one CUDA
device). A launcher resolves the call's arguments to a specialisation key (generated
straight-line code), finds or builds the specialisation and runs it: on the CPU the numba
runner (backends/cpu.py); on CUDA eager task launches, a cached graph, a device WHILE
graph or the host do-while fallback (backends/cuda.py).
"""

from __future__ import annotations

from .runtime import CpuState, DeviceState, State


def for_kernel(kernel, state: State):
    """A launcher for `kernel` on the state's current target."""
    target = state.target
    if isinstance(target, CpuState):
        from .backends.cpu import CpuLauncher

        return CpuLauncher(kernel, state)
    assert isinstance(target, DeviceState)
    from .backends.cuda import CudaLauncher

    return CudaLauncher(kernel, state, target)
