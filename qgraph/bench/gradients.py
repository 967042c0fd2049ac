"""Gradient of a ballistic particle simulation, side by side: qgraph (eager and captured), JAX, PyTorch.

The workload of issue 31: 65,536 particles (vec3 float32 positions and velocities), 200
steps of `v += dt * (g - drag * v); x += dt * v` written in place, then
`loss = mean |x - target|^2`; the gradient of the loss with respect to the initial
velocities. Rows (milliseconds per forward, or forward + backward, median of repeats):

    qgraph forward, eager                a Python loop of kernel calls
    qgraph forward + backward, eager     the same under qgraph.Tape, then tape.backward(loss)
    qgraph fwd + bwd, step under a Tape   the simulation a @qgraph.graph step called under qgraph.Tape:
                                         its backward is captured as a graph of its own
    qgraph forward + backward, captured  all of it (reset, zero, tape, backward) in one @qgraph.graph step
    JAX                                  jax.grad of a lax.scan, jit
    PyTorch eager / CUDA graph           autograd, eager and captured with torch.cuda.graphs
    CUDA C++                             the same step and its adjoint written by hand, 400 launches in one CUDA graph

Warp 1.19 on an H100 (measured before this benchmark, not side by side, with its Tape and one state
array per step): forward 7.94 ms, forward + backward 21.5 ms eager, 1.72 ms captured.

    python benchmarks/ballistic_grad.py [--n 65536] [--steps 200] [--repeats 20]

The same rows run inside `python -m qgraph bench` (CUDA).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import qgraph

DT, DRAG = 1.0 / 60.0, 0.1
G = (0.0, 0.0, -9.8)


@qgraph.kernel(cuda_graph=True)
def step(x: qgraph.vec3[:], v: qgraph.vec3[:], g: qgraph.vec3, dt: qgraph.f32, drag: qgraph.f32):
    for i in range(x.shape[0]):
        v[i] += dt * (g - drag * v[i])
        x[i] += dt * v[i]


@qgraph.kernel(cuda_graph=True)
def mean_square_distance(x: qgraph.vec3[:], target: qgraph.vec3[:], loss: qgraph.f32[:]):
    for i in range(x.shape[0]):
        d = x[i] - target[i]
        loss[0] += qgraph.dot(d, d) / x.shape[0]


@qgraph.kernel(cuda_graph=True)
def restart(x: qgraph.vec3[:], v: qgraph.vec3[:], x0: qgraph.vec3[:], v0: qgraph.vec3[:], loss: qgraph.f32[:]):
    for i in range(x.shape[0]):
        x[i] = x0[i]
        v[i] = v0[i]
    loss[0] = 0.0


class Problem:
    """The arrays of one run: x, v (with gradients), their initial values, the target and the loss."""

    def __init__(self, n: int, steps: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.steps = steps
        self.x0_np = rng.standard_normal((n, 3)).astype(np.float32)
        self.v0_np = (rng.standard_normal((n, 3)) * 2.0 + (0.0, 0.0, 5.0)).astype(np.float32)
        self.target_np = (self.x0_np + rng.standard_normal((n, 3))).astype(np.float32)
        vec = qgraph.vec3
        self.x0 = qgraph.ndarray(vec, (n,)).from_numpy(self.x0_np)
        self.v0 = qgraph.ndarray(vec, (n,), requires_grad=True).from_numpy(self.v0_np)
        self.target = qgraph.ndarray(vec, (n,)).from_numpy(self.target_np)
        self.x = qgraph.ndarray(vec, (n,), requires_grad=True)
        self.v = qgraph.ndarray(vec, (n,), requires_grad=True)
        self.loss = qgraph.ndarray(np.float32, (1,), requires_grad=True)
        self.arrays = (self.x, self.v, self.x0, self.v0, self.target, self.loss)

    @property
    def tape_bytes(self) -> int:
        """The extra memory of the last eager tape (copies and temporary gradients)."""
        tape = _LAST_TAPE[0]
        return 0 if tape is None else tape.stats.extra_bytes

    def gradient(self) -> np.ndarray:
        """d loss / d v0: the restart kernel's adjoint passes v's gradient on to v0."""
        return self.v0.grad.to_numpy()


def simulate(x, v, x0, v0, target, loss, steps: int) -> None:
    """The forward pass: restart from x0, v0, run the steps in place, measure the loss."""
    restart(x, v, x0, v0, loss)
    g = qgraph.vec3(*G)
    for _ in range(steps):
        step(x, v, g, DT, DRAG)
    mean_square_distance(x, target, loss)


def forward_backward(x, v, x0, v0, target, loss, steps: int) -> None:
    """The forward pass under a tape, then the backward pass (the gradients zeroed first)."""
    tape = qgraph.Tape()
    with tape:
        simulate(x, v, x0, v0, target, loss, steps)
    tape.zero()
    tape.backward(loss)
    _LAST_TAPE[0] = tape


_LAST_TAPE = [None]


simulate_step = qgraph.graph(simulate)
forward_backward_step = qgraph.graph(forward_backward)


def step_under_tape(x, v, x0, v0, target, loss, steps: int) -> None:
    tape = qgraph.Tape()
    with tape:
        simulate_step(x, v, x0, v0, target, loss, steps)
    tape.zero()
    tape.backward(loss)


def reference_gradient(p: Problem) -> np.ndarray:
    """The gradient in float64 NumPy, by the adjoint recurrence of the linear update."""
    a = 1.0 - DT * DRAG
    x, v = p.x0_np.astype(np.float64), p.v0_np.astype(np.float64)
    for _ in range(p.steps):
        v = v + DT * (np.array(G) - DRAG * v)
        x = x + DT * v
    gx = 2.0 * (x - p.target_np) / len(x)
    gv = np.zeros_like(gx)
    for _ in range(p.steps):  # x' = x + dt v'; v' = a v + dt g
        gv = gv + DT * gx
        gv = a * gv
    return gv


def median_ms(fn, repeats: int, sync) -> float:
    """Median milliseconds of `repeats` calls after one warm-up call."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def jax_rows(p: Problem, repeats: int) -> dict:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}
    g = jnp.array(G, jnp.float32)
    x0, target = jnp.asarray(p.x0_np), jnp.asarray(p.target_np)

    def loss(v0):
        def body(carry, _):
            x, v = carry
            v = v + DT * (g - DRAG * v)
            return (x + DT * v, v), None

        (x, _), _ = jax.lax.scan(body, (x0, v0), None, length=p.steps)
        return jnp.mean(jnp.sum((x - target) ** 2, axis=1))

    v0 = jnp.asarray(p.v0_np)
    fwd, grad = jax.jit(loss), jax.jit(jax.grad(loss))
    rows = {"JAX forward (jit, lax.scan)": median_ms(lambda: fwd(v0).block_until_ready(), repeats, lambda: None),
            "JAX forward + backward (jit(grad))": median_ms(lambda: grad(v0).block_until_ready(), repeats,
                                                            lambda: None)}
    rows["_jax_grad"] = np.asarray(grad(v0))
    return rows


def torch_rows(p: Problem, repeats: int) -> dict:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    dev = "cuda"
    g = torch.tensor(G, device=dev)
    x0, target = torch.tensor(p.x0_np, device=dev), torch.tensor(p.target_np, device=dev)
    v0 = torch.tensor(p.v0_np, device=dev, requires_grad=True)

    def run():
        x, v = x0, v0
        for _ in range(p.steps):
            v = v + DT * (g - DRAG * v)
            x = x + DT * v
        loss = ((x - target) ** 2).sum(dim=1).mean()
        v0.grad = None
        loss.backward()

    sync = torch.cuda.synchronize
    rows = {"PyTorch forward + backward, eager": median_ms(run, max(3, repeats // 4), sync)}
    static_v0 = torch.tensor(p.v0_np, device=dev, requires_grad=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            x, v = x0, static_v0
            for _ in range(p.steps):
                v = v + DT * (g - DRAG * v)
                x = x + DT * v
            ((x - target) ** 2).sum(dim=1).mean().backward()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    static_v0.grad = None
    with torch.cuda.graph(graph):
        x, v = x0, static_v0
        for _ in range(p.steps):
            v = v + DT * (g - DRAG * v)
            x = x + DT * v
        ((x - target) ** 2).sum(dim=1).mean().backward()
    rows["PyTorch forward + backward, CUDA graph"] = median_ms(graph.replay, repeats, sync)
    return rows


def cuda_cpp_rows(p: Problem, repeats: int) -> dict:
    """Hand-written CUDA C++ of the same forward step and its adjoint (float3, one thread per
    particle), 200 + 200 launches captured in one CUDA graph with CuPy: the floor."""
    try:
        import cupy as cp
    except ImportError:
        return {}
    n = len(p.x0_np)
    module = cp.RawModule(code=CUDA_CPP)
    step_fn, adjoint_fn = module.get_function("step"), module.get_function("step_adjoint")
    x, v = cp.asarray(p.x0_np), cp.asarray(p.v0_np)
    gx, gv = cp.zeros_like(x), cp.zeros_like(v)
    g = np.void(np.array(G, np.float32).tobytes())
    block = 256
    grid = (n + block - 1) // block
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for _ in range(p.steps):
            step_fn((grid,), (block,), (x, v, g, np.float32(DT), np.float32(DRAG), np.int32(n)))
        for _ in range(p.steps):
            adjoint_fn((grid,), (block,), (gx, gv, np.float32(DT), np.float32(DRAG), np.int32(n)))
        graph = stream.end_capture()
    return {"CUDA C++ (hand-written), forward + backward, one CUDA graph":
            median_ms(lambda: graph.launch(stream), repeats, stream.synchronize)}


CUDA_CPP = r"""
extern "C" __global__ void step(float3* x, float3* v, float3 g, float dt, float drag, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float3 vi = v[i];
        vi.x += dt * (g.x - drag * vi.x); vi.y += dt * (g.y - drag * vi.y); vi.z += dt * (g.z - drag * vi.z);
        v[i] = vi;
        float3 xi = x[i];
        xi.x += dt * vi.x; xi.y += dt * vi.y; xi.z += dt * vi.z;
        x[i] = xi;
    }
}
extern "C" __global__ void step_adjoint(const float3* gx, float3* gv, float dt, float drag, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float3 a = gx[i], b = gv[i];
        float s = 1.0f - dt * drag;
        b.x = (b.x + dt * a.x) * s; b.y = (b.y + dt * a.y) * s; b.z = (b.z + dt * a.z) * s;
        gv[i] = b;
    }
}
"""


def run(n: int = 65536, steps: int = 200, repeats: int = 20) -> dict:
    """Every row, in milliseconds, and the gradients' errors: {"rows": {...}, "errors": {...}}."""
    p = Problem(n, steps)
    a = p.arrays + (steps,)
    rows = {
        "qgraph forward, eager": median_ms(lambda: simulate(*a), repeats, qgraph.sync),
        "qgraph forward + backward, eager (Tape)": median_ms(lambda: forward_backward(*a), repeats, qgraph.sync),
        "qgraph forward, captured (@qgraph.graph)": median_ms(lambda: simulate_step(*a), repeats, qgraph.sync),
        "qgraph forward + backward, step under a Tape": median_ms(lambda: step_under_tape(*a), repeats, qgraph.sync),
        "qgraph forward + backward, captured (@qgraph.graph)":
            median_ms(lambda: forward_backward_step(*a), repeats, qgraph.sync),
    }
    reference = reference_gradient(p)
    errors = {}
    ours = None
    for name, fn in (("eager", forward_backward), ("step under a tape", step_under_tape),
                     ("captured", forward_backward_step)):
        fn(*a)
        ours = p.gradient()
        errors[f"qgraph ({name}) vs float64 NumPy"] = float(np.abs(ours - reference).max() / np.abs(reference).max())
    if qgraph.current_arch() == "cuda":
        rows.update(cuda_cpp_rows(p, repeats))
        found = jax_rows(p, repeats)
        jax_grad = found.pop("_jax_grad", None)
        rows.update(found)
        if jax_grad is not None:
            errors["qgraph (captured) vs JAX"] = float(np.abs(ours - jax_grad).max() / np.abs(jax_grad).max())
        rows.update(torch_rows(p, repeats))
    return {"n": n, "steps": steps, "arch": qgraph.current_arch(), "rows": rows, "errors": errors,
            "extra_bytes": p.tape_bytes}


def table(result: dict) -> str:
    if not result:
        return ""
    rows = result["rows"]
    width = max(len(k) for k in rows)
    lines = [f"\ngradient of a ballistic simulation: {result['n']} particles, {result['steps']} steps, "
             f"{result['arch']} (ms; Warp 1.19 on an H100, measured before, not in this run: forward 7.94, "
             "forward + backward 21.5 eager, 1.72 captured)"]
    lines += [f"  {name:<{width}}  {ms:9.3f}" for name, ms in rows.items()]
    lines += [f"  gradient error, {name}: {err:.1e}" for name, err in result["errors"].items()]
    lines.append(f"  the tape's extra memory: {result['extra_bytes']} bytes")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    qgraph.init()
    print(table(run(args.n, args.steps, args.repeats)))
