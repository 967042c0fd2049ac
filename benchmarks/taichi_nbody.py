"""Taichi's gallery N-body beside its qgraph port and a CUDA C++ twin, frames per second side by side.

    python benchmarks/taichi_nbody.py [--n 2048,3000] [--frames 20] [--repeat 7] [--json PATH]

Taichi 1.7.4's taichi/examples/simulation/nbody.py (its `compute_force` and `update` kernels called
10 times a frame, as its main loop does; Taichi at its defaults on CUDA: fast math on) written
with the body count as a parameter, against `qgraph.examples.gallery_nbody` (qgraph at its
defaults: strict math, a frame one traced `@qgraph.graph` step) in one process on one GPU, in
interleaved rounds. Beside them: the port with `lanes=False` (one thread a body, the loop as Taichi
runs it) and with `fast_math=True`, and the same frame hand-written in CUDA C++ (NVRTC, strict
math, the force loop on lanes like qgraph's, float2 loads) as one raw CUDA graph of 20 nodes.
Before timing, every program runs the same frames from the same initial state and their
positions are compared with a NumPy float64 run (the largest error relative to the distance moved).
"""

from __future__ import annotations

import argparse
import ctypes
import json

import numpy as np

import qgraph
from qgraph.bench.kernels import warm_up_gpu
from qgraph.bench.taichi_gallery import nbody_program
from qgraph.examples import gallery_nbody as gn
from qgraph.tools.timing import interleaved_spreads

TWIN = r"""
extern "C" __global__ void force_lanes(const float2* __restrict__ pos, float2* __restrict__ force, int n, int lg) {
    int t = blockIdx.x * blockDim.x + threadIdx.x, S = 1 << lg, lane = t & (S - 1), i = t >> lg;
    if (i >= n) return;
    float2 p = pos[i];
    float fx = 0.0f, fy = 0.0f;
    for (int j = lane; j < n; j += S) {
        if (i != j) {
            float2 q = pos[j];
            float dx = p.x - q.x, dy = p.y - q.y;
            float r = sqrtf(dx * dx + dy * dy + 1e-5f);
            float ir = 1.0f / r;
            float s = -1.0f * (ir * ir * ir);
            fx += s * dx;
            fy += s * dy;
        }
    }
    unsigned group = S == 32 ? 0xFFFFFFFFu : ((1u << S) - 1u);
    unsigned mask = group << ((threadIdx.x & 31) - lane);
    for (int o = S >> 1; o > 0; o >>= 1) {
        fx += __shfl_down_sync(mask, fx, o);
        fy += __shfl_down_sync(mask, fy, o);
    }
    if (lane == 0) force[i] = make_float2(fx, fy);
}
extern "C" __global__ void update(float2* __restrict__ pos, float2* __restrict__ vel, const float2* __restrict__ force,
                                  float dt, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float2 v = vel[i], f = force[i];
    v.x += dt * f.x; v.y += dt * f.y;
    vel[i] = v;
    pos[i].x += dt * v.x; pos[i].y += dt * v.y;
}
"""
BLOCK = 128


class TwinFrame:
    """The frame in CUDA C++: 10 x (force, update) kernel nodes in one graph, launched raw."""

    def __init__(self, pos, vel, force, n: int) -> None:
        from qgraph.driver.device import check, driver
        from qgraph.driver.nodes import kernel_node_params
        from qgraph.driver.nvrtc import compile_cubin
        from qgraph.lang.cuda.lanes import lanes_of
        from qgraph.runtime import STATE

        device = STATE.target.device
        d = self.d = driver()
        module = device.load_module(compile_cubin(TWIN, "nbody_twin.cu", tuple(device.info.compute_capability)))
        force_fn, update_fn = device.function(module, "force_lanes"), device.function(module, "update")
        lanes = lanes_of(n)
        self._keep = []

        def node(graph, fn, values, threads, deps):
            pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
            self._keep.append((values, pointers))
            blocks = (threads + BLOCK - 1) // BLOCK
            params = kernel_node_params(fn, blocks, BLOCK, kernel_params=ctypes.addressof(pointers))
            return check(d.cuGraphAddKernelNode(graph, deps, len(deps), params), "cuGraphAddKernelNode")
        graph = check(d.cuGraphCreate(0), "cuGraphCreate")
        ptr = [ctypes.c_uint64(a.address) for a in (pos, vel, force)]
        deps = []
        for _ in range(gn.SUBSTEPS):
            f = node(graph, force_fn, (ptr[0], ptr[2], ctypes.c_int32(n), ctypes.c_int32(lanes.bit_length() - 1)),
                     n * lanes, deps)
            u = node(graph, update_fn, (*ptr, ctypes.c_float(gn.H / gn.SUBSTEPS), ctypes.c_int32(n)), n, [f])
            deps = [u]
        self.exec = check(d.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        self.stream = device.stream_handle
        check(d.cuGraphUpload(self.exec, self.stream), "cuGraphUpload")

    def __call__(self) -> None:
        self.d.cuGraphLaunch(self.exec, self.stream)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="2048,3000", help="body counts, comma-separated")
    parser.add_argument("--frames", type=int, default=20, help="frames per timed round")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--check-frames", type=int, default=3, help="frames compared with NumPy before timing")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    qgraph.init("cuda")
    warm_up_gpu()
    try:
        import taichi as ti

        ti.init(arch=ti.cuda, log_level=ti.WARN)
    except ImportError:
        ti = None
    force_one_lane = gn.compute_force.variant(lanes=False)
    force_fast, update_fast = gn.compute_force.variant(fast_math=True), gn.update.variant(fast_math=True)

    @qgraph.graph
    def frame_one_lane(pos, vel, force, dt):
        for _ in range(gn.SUBSTEPS):
            force_one_lane(pos, force)
            gn.update(pos, vel, force, dt)

    @qgraph.graph
    def frame_fast(pos, vel, force, dt):
        for _ in range(gn.SUBSTEPS):
            force_fast(pos, force)
            update_fast(pos, vel, force, dt)
    dt = np.float32(gn.H / gn.SUBSTEPS)
    from qgraph.runtime import STATE

    report: dict = {"device": STATE.target.device.info.name, "taichi": None if ti is None else ti.__version__,
                    "sizes": {}}
    for n in (int(v) for v in args.n.split(",")):
        pos0, vel0 = gn.initial_state(n)
        want, _ = gn.numpy_frames(pos0, vel0, args.check_frames)
        moved = float(np.abs(want - pos0).max())
        programs, positions = {}, {}

        a, b, c, e = ([qgraph.from_numpy(x.copy()) for x in (pos0, vel0, np.zeros_like(pos0))] for _ in range(4))
        if ti is not None:
            frame, tpos = nbody_program(ti, pos0, vel0)
            programs["Taichi 1.7.4 (its defaults: fast math)"] = frame
            positions["Taichi 1.7.4 (its defaults: fast math)"] = tpos.to_numpy
            frame, tpos = nbody_program(ti, pos0, vel0, local=True)
            programs["Taichi, the force summed in a local"] = frame
            positions["Taichi, the force summed in a local"] = tpos.to_numpy
        programs["qgraph port (its defaults: strict)"] = lambda a=a: gn.frame(*a, dt)
        positions["qgraph port (its defaults: strict)"] = a[0].to_numpy

        programs["qgraph port, lanes=False"] = lambda b=b: frame_one_lane(*b, dt)
        positions["qgraph port, lanes=False"] = b[0].to_numpy
        programs["qgraph port, fast_math=True"] = lambda c=c: frame_fast(*c, dt)
        positions["qgraph port, fast_math=True"] = c[0].to_numpy
        programs["CUDA C++ twin (strict, lanes), raw graph"] = TwinFrame(*e, n)
        positions["CUDA C++ twin (strict, lanes), raw graph"] = e[0].to_numpy
        errors = {}
        for label, fn in programs.items():
            for _ in range(args.check_frames):
                fn()
            qgraph.sync()
            if ti is not None:
                ti.sync()
            errors[label] = float(np.abs(positions[label]() - want).max()) / moved

        def sync():
            qgraph.sync()
            if ti is not None:
                ti.sync()

        def frames(fn):
            def run():
                for _ in range(args.frames):
                    fn()
            return run
        spreads = interleaved_spreads({k: frames(f) for k, f in programs.items()}, 0.05, args.repeat, sync)
        base = next(iter(spreads.values())).median
        print(f"Taichi's gallery N-body, {n} bodies, {gn.SUBSTEPS} substeps a frame, on {report['device']}")
        print(f"  {'program':<44}{'us/frame':>10}{'frames/s':>10}{'vs first':>10}{'pos. error':>12}")
        rows = {}
        for label, s in spreads.items():
            per = s.median / args.frames
            print(f"  {label:<44}{per * 1e6:10.1f}{1 / per:10.0f}{base / s.median:9.2f}x{errors[label]:12.2e}")
            rows[label] = {"us_per_frame": per * 1e6, "us_per_frame_min": s.min / args.frames * 1e6,
                           "us_per_frame_max": s.max / args.frames * 1e6, "position_error": errors[label]}
        report["sizes"][str(n)] = rows
    print(f"  qgraph step stats: {gn.frame.stats}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)


if __name__ == "__main__":
    main()
