"""What qgraph is measured against, on the same device in the same process.

- floor: a raw CUDA graph of hand-written CUDA C++ kernels (NVRTC) taking the arrays by
  value, built with cuGraphAddKernelNode and launched with cuGraphLaunch from Python;
- raw WHILE: the same kernels in a conditional WHILE node, with a hand-written condition;
- raw host loop: graph replay + flag copy to pinned memory + event wait, per iteration;
- cuda.core: `cuda.core.launch()` of one kernel with pre-built arguments;
- numba-cuda: launches through numba's own dispatcher (`kernel[grid, block](...)`).
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..driver.device import check, driver
from .kernels import CUDA_SOURCE, NUMBA_TASK_SOURCE, task_constant


def _nvrtc_module(device):
    from ..driver.nvrtc import compile_cubin

    cubin = compile_cubin(CUDA_SOURCE, "qgraph_bench.cu", device.info.compute_capability)
    module = device.load_module(cubin)
    return {name: device.function(module, name) for name in ("task", "task_pdl", "countdown", "condition")}


class KernelArgs:
    """A kernel's by-value arguments as a kernelParams array (kept alive with it)."""

    def __init__(self, *values) -> None:
        self.values = list(values)
        self.pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        self.address = ctypes.addressof(self.pointers)


def node_params_of(function, grid: int, block: int, args: KernelArgs):
    from ..driver.nodes import kernel_node_params

    return kernel_node_params(function, grid, block, kernel_params=args.address)


class RawGraphs:
    """The floor: T task kernels as a raw graph, as a WHILE node, and as a host loop."""

    def __init__(self, device, arrays, n: int, a: float, counter=None, flag=None, programmatic: bool = False,
                 independent: bool = False) -> None:
        d = driver()
        self.device = device
        self.programmatic = programmatic  # the same graph with programmatic (PDL) edges
        self.independent = independent  # the tasks as parallel branches (no edges) in `exec`
        self.functions = _nvrtc_module(device)
        self.stream = device.stream_handle
        grid = (n + 255) // 256
        self._keep = []
        self.graph = check(d.cuGraphCreate(0), "cuGraphCreate")
        self._add_tasks(self.graph, arrays, n, a, grid, [])
        self.exec = check(d.cuGraphInstantiate(self.graph, 0), "cuGraphInstantiate")
        check(d.cuGraphUpload(self.exec, self.stream), "cuGraphUpload")
        self.while_exec = self.body_exec = None
        if counter is not None:
            self._build_loops(arrays, n, a, grid, counter, flag)

    def _add_tasks(self, graph, arrays, n, a, grid, deps):
        from ..driver.nodes import add_edge

        d = driver()
        function = self.functions["task_pdl" if self.programmatic else "task"]
        for k, arr in enumerate(arrays):
            args = KernelArgs(ctypes.c_uint64(arr.address), ctypes.c_int64(n), ctypes.c_float(a),
                         ctypes.c_float(task_constant(k)))
            self._keep.append(args)
            node = check(d.cuGraphAddKernelNode(graph, [], 0, node_params_of(function, grid, 256, args)), "add node")
            if deps and not self.independent:
                add_edge(graph, deps[0], node, self.programmatic)
            deps = [node]
        return deps

    def _build_loops(self, arrays, n, a, grid, counter, flag):
        d = driver()
        count_args = KernelArgs(ctypes.c_uint64(counter.address), ctypes.c_uint64(flag.address))
        self._keep.append(count_args)
        # host-loop body: tasks + countdown
        body = check(d.cuGraphCreate(0), "cuGraphCreate")
        deps = self._add_tasks(body, arrays, n, a, grid, [])
        check(d.cuGraphAddKernelNode(body, deps, len(deps), node_params_of(self.functions["countdown"], 1, 1,
                                                                           count_args)), "add node")
        self.body_exec = check(d.cuGraphInstantiate(body, 0), "instantiate")
        check(d.cuGraphUpload(self.body_exec, self.stream), "upload")
        # device loop: WHILE { tasks + countdown + condition }
        graph = check(d.cuGraphCreate(0), "cuGraphCreate")
        from ..driver.nodes import add_while_node

        handle, _, inner = add_while_node(graph, self.device.context, [])
        deps = self._add_tasks(inner, arrays, n, a, grid, [])
        node = check(d.cuGraphAddKernelNode(inner, deps, len(deps), node_params_of(self.functions["countdown"], 1, 1,
                                                                                   count_args)), "add node")
        cond_args = KernelArgs(ctypes.c_uint64(int(handle)), ctypes.c_uint64(flag.address))
        self._keep.append(cond_args)
        check(d.cuGraphAddKernelNode(inner, [node], 1, node_params_of(self.functions["condition"], 1, 1, cond_args)),
              "add node")
        self.while_exec = check(d.cuGraphInstantiate(graph, 0), "instantiate")
        check(d.cuGraphUpload(self.while_exec, self.stream), "upload")
        self._host = check(d.cuMemHostAlloc(4, 0), "cuMemHostAlloc")
        self._flag_value = ctypes.c_int32.from_address(int(self._host))
        self._event = self.device.event()
        self._flag_ptr = flag.address

    def launch(self) -> None:
        driver().cuGraphLaunch(self.exec, self.stream)

    def launch_sync(self) -> None:
        d = driver()
        d.cuGraphLaunch(self.exec, self.stream)
        d.cuStreamSynchronize(self.stream)

    def while_launch(self) -> None:
        driver().cuGraphLaunch(self.while_exec, self.stream)

    def host_loop(self) -> None:
        """Replay the body and read the flag back until it is zero (the raw host do-while)."""
        d = driver()
        launch, copy, record, wait = d.cuGraphLaunch, d.cuMemcpyDtoHAsync, d.cuEventRecord, d.cuEventSynchronize
        body, stream, host, flag, event = self.body_exec, self.stream, self._host, self._flag_ptr, self._event
        while True:
            launch(body, stream)
            copy(host, flag, 4, stream)
            record(event, stream)
            wait(event)
            if self._flag_value.value == 0:
                break


class CudaCoreLaunch:
    """One kernel launched with cuda.core.launch() and pre-built arguments."""

    def __init__(self, array, n: int, a: float) -> None:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch

        dev = Device()
        dev.set_current()
        self.stream = dev.create_stream()
        cc = dev.compute_capability
        prog = Program(CUDA_SOURCE, code_type="c++", options=ProgramOptions(arch=f"sm_{cc.major}{cc.minor}"))
        self.kernel = prog.compile("cubin").get_kernel("task")
        self.config = LaunchConfig(grid=(n + 255) // 256, block=256)
        self.args = (array.address, np.int64(n), np.float32(a), np.float32(1.0))
        self._launch = launch

    def launch(self) -> None:
        self._launch(self.stream, self.config, self.kernel, *self.args)

    def sync(self) -> None:
        self.stream.sync()


class NumbaDispatch:
    """The same task launched through numba-cuda's dispatcher."""

    def __init__(self, arrays, n: int, a: float) -> None:
        import numba.cuda

        ns: dict = {}
        exec(NUMBA_TASK_SOURCE, ns)
        self.kernel = ns["task"]
        self.arrays = [numba.cuda.as_cuda_array(arr) for arr in arrays]
        self.n, self.a = n, np.float32(a)
        self.grid = (n + 255) // 256
        self.consts = [np.float32(task_constant(k)) for k in range(len(arrays))]
        self.stream = numba.cuda.default_stream()
        self.run()
        numba.cuda.synchronize()

    def run(self) -> None:
        launcher = self.kernel[self.grid, 256, self.stream]
        for arr, c in zip(self.arrays, self.consts):
            launcher(arr, self.n, self.a, c)
