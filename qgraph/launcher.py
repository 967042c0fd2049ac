"""Dispatch: a kernel call's target and the plain way to run it.

`for_kernel` gives each kernel a launcher per target (the CPU, or each CUDA device its calls run
on). A call is resolved into one value, a `BoundCall` (runtime.call_hooks: the launcher, the
signature, the values and their parameter bytes, the stream), which `dispatch` runs: the
listeners first (a tape recording, a step's body), then the runner of its specialisation
(backends/cpu.py: the numba runner; backends/cuda.py: eager launches, a cached graph, a device
WHILE graph or the host do-while fallback). A kernel's own calls run the launch each backend
generates for it (backends/cpu_call.py, backends/cuda_call.py): the same steps with the
resolution inlined and fast paths in front; tests/test_launcher.py holds the two equal.
"""

from __future__ import annotations

from .lang.options import KernelOptions
from .runtime import CpuState, DeviceState, State, call_hooks
from .runtime.call_hooks import BoundCall
from .runtime.state import BACKEND_LOADERS


def for_kernel(kernel, state: State, target: DeviceState | CpuState, options: KernelOptions):
    """A launcher for `kernel` on `target` (the CPU, or one CUDA device of the state), running it
    with `options` (resolved: no option left to the environment)."""
    if isinstance(target, CpuState):
        from .backends.cpu import CpuLauncher

        return CpuLauncher(kernel, state, options)
    assert isinstance(target, DeviceState)
    from .backends.cuda import CudaLauncher

    return CudaLauncher(kernel, state, target, options)


def bind(kernel, values: tuple, stream=None) -> BoundCall:
    """A call of `kernel` with every parameter given by position in `values` (implicit ones, such as
    module-level arrays, included: Kernel.launch_values' order), resolved on its arrays' device."""
    launcher, values = kernel.launcher_for(values)
    key, packs = launcher.resolve(values)
    return BoundCall(launcher, key, values, packs, stream)


def dispatch(call: BoundCall) -> None:
    """Run a resolved call: a watching tape counts its writes, the listeners take it first (a tape may
    run it itself, a step's body records or counts it), else its specialisation's runner runs it."""
    launcher = call.launcher
    if call_hooks.WATCHING[0]:  # a tape needs arrays as its calls left them
        call_hooks.note_writes(launcher.written, call.args)
    if call_hooks.HOOKED[0] and call_hooks.on_call(call):
        return
    launcher.run_bound(call)


def load_cuda_backend() -> None:
    """The modules a first CUDA call and a first step capture run (about 0.1 s on a server core),
    imported by init("cuda") instead of inside that call."""
    from .backends import cuda  # noqa: F401
    from .capture import step_capture, traced_step  # noqa: F401


def load_cpu_backend() -> None:
    """The modules a first CPU call compiles with: numba (0.2-0.3 s to import, which its atomics and
    dispatchers need) and the LLVM emitter, imported by init("cpu") instead of inside that call."""
    from .compiler import cpu_atomics, cpu_program, llvm_cpu  # noqa: F401
    from .lang.llvm import module, parallel  # noqa: F401


BACKEND_LOADERS["cuda"] = load_cuda_backend
BACKEND_LOADERS["cpu"] = load_cpu_backend
