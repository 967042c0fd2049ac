"""Reductions at the bandwidth limit, and the README's relax solver per iteration.

GPU, measured side by side in one run (interleaved rounds):
- sum, max and dot over 2^26 float32: qgraph vs the same algorithm in hand-written CUDA C++
  (a raw two-node graph: reset, reduce), torch and CuPy where installed, and the
  device-to-device copy bandwidth (bytes read + written), with each result's error;
- `relax` per iteration at 128^2, 512^2, 2048^2: qgraph's graph_while vs hand-written CUDA
  C++ kernels in a WHILE node, a PyTorch CUDA graph replayed with `.item()` per iteration
  and JAX's `lax.while_loop` where installed.
CPU: a sum over 1e7 float64 on 1 and on 2 threads, and np.sum.
"""

from __future__ import annotations

import ctypes

import numpy as np

import qgraph

from ..tools.timing import call_spread, interleaved_spreads, put_figure
from .kernels import module_from_source
from .reduction_kernels import CUDA_SOURCE, KERNELS_SOURCE


def _qgraph_module():
    return module_from_source("qgraph_bench_reductions", KERNELS_SOURCE)


class _Hand:
    """Hand-written CUDA C++ kernels in raw graphs (programmatic edges on Hopper)."""

    def __init__(self) -> None:
        from ..driver.device import check, driver
        from ..driver.nvrtc import compile_cubin

        self.device = qgraph.runtime.STATE.cuda
        self.d, self.check = driver(), check
        cc = self.device.info.compute_capability
        module = self.device.load_module(compile_cubin(CUDA_SOURCE, "qgraph_bench_reductions.cu", cc))
        names = ("set_value", "hsum", "hmax", "hdot", "jacobi", "copy_back", "check")
        self.functions = {name: self.device.function(module, name) for name in names}
        self.programmatic = tuple(cc) >= (9, 0)
        self.stream = self.device.stream_handle
        self._keep: list = []
        blocks = check(self.d.cuOccupancyMaxActiveBlocksPerMultiprocessor(self.functions["hsum"], 256, 0), "occupancy")
        self.wave = max(1, blocks) * self.device.info.multiprocessors

    def _args(self, *values):
        pointers = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
        self._keep.append((values, pointers))
        return ctypes.addressof(pointers)

    def _node(self, graph, name, grid, block, args, deps):
        from ..driver.nodes import add_edge, kernel_node_params

        d = self.d
        params = kernel_node_params(self.functions[name], grid[0], block[0], kernel_params=args)
        params.gridDimY, params.blockDimY = grid[1], block[1]
        node = self.check(d.cuGraphAddKernelNode(graph, [], 0, params), f"add {name}")
        if deps:
            add_edge(graph, deps[-1], node, self.programmatic)
        return node

    def _instantiate(self, graph):
        exec_ = self.check(self.d.cuGraphInstantiate(graph, 0), "instantiate")
        self.check(self.d.cuGraphUpload(exec_, self.stream), "upload")
        return exec_

    def reduction(self, name: str, arrays: list, n: int, out, start: float):
        """A graph: out = start, then the block-reduction kernel over a one-wave grid."""
        graph = self.check(self.d.cuGraphCreate(0), "cuGraphCreate")
        reset = self._node(graph, "set_value", (1, 1), (1, 1),
                           self._args(ctypes.c_uint64(out.address), ctypes.c_float(start)), [])
        args = [ctypes.c_uint64(a.address) for a in arrays] + [ctypes.c_int64(n), ctypes.c_uint64(out.address)]
        grid = min(self.wave, (n + 255) // 256)
        self._node(graph, name, (grid, 1), (256, 1), self._args(*args), [reset])
        exec_ = self._instantiate(graph)
        return lambda: self.d.cuGraphLaunch(exec_, self.stream)

    def relax(self, u, un, change, it, n: int, tol: float, cap: int):
        """WHILE { jacobi -> copy_back -> check }, as a graph launched per solve."""
        from ..driver.nodes import add_while_node

        d = self.d
        graph = self.check(d.cuGraphCreate(0), "cuGraphCreate")
        handle, _, body = add_while_node(graph, self.device.context, [])
        grid = ((n - 2 + 31) // 32, (n - 2 + 7) // 8)
        sweep = self._node(body, "jacobi", grid, (32, 8), self._args(
            ctypes.c_uint64(u.address), ctypes.c_uint64(un.address), ctypes.c_int32(n),
            ctypes.c_uint64(change.address)), [])
        back = self._node(body, "copy_back", grid, (32, 8), self._args(
            ctypes.c_uint64(u.address), ctypes.c_uint64(un.address), ctypes.c_int32(n)), [sweep])
        self._node(body, "check", (1, 1), (1, 1), self._args(
            ctypes.c_uint64(int(handle)), ctypes.c_uint64(change.address), ctypes.c_uint64(it.address),
            ctypes.c_double(tol), ctypes.c_int32(cap)), [back])
        exec_ = self._instantiate(graph)
        return lambda: self.d.cuGraphLaunch(exec_, self.stream)


def copy_launcher(nbytes: int):
    from ..driver.device import driver

    src, dst = qgraph.ndarray(qgraph.u8, (nbytes,)), qgraph.ndarray(qgraph.u8, (nbytes,))
    d, stream = driver(), qgraph.runtime.STATE.cuda.stream_handle
    return lambda: d.cuMemcpyDtoDAsync(dst.address, src.address, nbytes, stream)


def gpu_reduction_rows(log2n: int, budget: float, repeat: int) -> list[dict]:
    """Per-call time, GB/s and % of copy bandwidth of sum / max / dot, side by side."""
    n = 1 << log2n
    rng = np.random.default_rng(0)
    xh, yh = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    x, y = qgraph.from_numpy(xh), qgraph.from_numpy(yh)
    mod, hand = _qgraph_module(), _Hand()
    outs = {key: qgraph.ndarray(qgraph.f32, (1,)) for key in ("q", "h")}
    reference = {"sum": float(xh.astype(np.float64).sum()), "max": float(xh.max()),
                 "dot": float((xh.astype(np.float64) * yh).sum())}
    cases = {"sum": (mod.rsum, [x], "hsum", 0.0, 4 * n), "max": (mod.rmax, [x], "hmax", -3.0e38, 4 * n),
             "dot": (mod.rdot, [x, y], "hdot", 0.0, 8 * n)}
    torch = _optional("torch")
    cupy = _optional("cupy")
    copy = copy_launcher(4 * n)
    rows = []
    for name, (kernel, arrays, hand_name, start, nbytes) in cases.items():
        calls = {"copy": copy, "qgraph": lambda k=kernel, a=arrays: k(*a, outs["q"]),
                 "CUDA C++": hand.reduction(hand_name, arrays, n, outs["h"], start)}
        results = {}
        if torch is not None:
            fn = _library_call(torch, name, torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda"))
            calls["torch"] = fn
            results["torch"] = fn
        if cupy is not None:
            fn = _library_call(cupy, name, cupy.asarray(x), cupy.asarray(y))
            calls["cupy"] = fn
            results["cupy"] = fn
        spreads = interleaved_spreads(calls, budget, repeat, qgraph.sync)
        copy_bw = 2 * 4 * n / spreads["copy"].median / 1e9  # the copy moves 4n bytes: read + write
        row = {"op": name, "n": n, "copy_GBps": copy_bw}
        put_figure(row, "copy_us", spreads["copy"], 1e6)
        for who, spread in spreads.items():
            if who == "copy":
                continue
            gbps = nbytes / spread.median / 1e9
            row[who] = {}
            put_figure(row[who], "us", spread, 1e6)
            row[who].update(GBps=gbps, of_copy=gbps / copy_bw)
        row["qgraph"]["rel_error"] = abs(float(outs["q"].to_numpy()[0]) - reference[name]) / abs(reference[name])
        row["CUDA C++"]["rel_error"] = abs(float(outs["h"].to_numpy()[0]) - reference[name]) / abs(reference[name])
        for who, fn in results.items():
            row[who]["rel_error"] = abs(float(fn()) - reference[name]) / abs(reference[name])
        rows.append(row)
    return rows


def _library_call(lib, op: str, x, y):
    """torch.sum(x) / cupy.max(x) / lib.dot(x, y): the call a user would otherwise make."""
    if op == "dot":
        return lambda: lib.dot(x, y)
    fn = lib.sum if op == "sum" else lib.max
    return lambda: fn(x)


def _optional(name: str):
    try:
        return __import__(name)
    except Exception:
        return None


def _relax_torch(torch, u0: np.ndarray, tol: float, cap: int):
    u = torch.as_tensor(u0.copy(), device="cuda")
    un = u.clone()
    change = torch.zeros((), dtype=u.dtype, device="cuda")
    stream = torch.cuda.Stream()

    def step() -> None:
        un[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
        change.copy_((un[1:-1, 1:-1] - u[1:-1, 1:-1]).abs().max())
        u[1:-1, 1:-1].copy_(un[1:-1, 1:-1])

    with torch.cuda.stream(stream):
        step()  # warm up before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        step()

    def solve() -> None:
        u.copy_(torch.as_tensor(u0, device="cuda"))
        for _ in range(cap):
            graph.replay()
            if change.item() <= tol:
                break
    return solve, lambda: u.cpu().numpy()


def _relax_jax(u0: np.ndarray, tol: float, cap: int):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    @jax.jit
    def solve_jax(u):
        def body(state):
            u, _, it = state
            un = u.at[1:-1, 1:-1].set(0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]))
            return un, jnp.max(jnp.abs(un - u)), it + 1

        def cond(state):
            return (state[1] > tol) & (state[2] < cap)

        return jax.lax.while_loop(cond, body, (u, jnp.inf, 0))[0]

    u_dev = jnp.asarray(u0)
    result = [None]

    def solve() -> None:
        result[0] = solve_jax(u_dev)
        result[0].block_until_ready()
    return solve, lambda: np.asarray(result[0])


RELAX_ROUND_S = 0.05  # seconds of solves per side and round


def relax_rows(sizes, iterations: int, repeat: int) -> list[dict]:
    """Per-iteration time of `iterations` relax sweeps (tol 0: the cap decides), side by side."""
    mod, hand = _qgraph_module(), _Hand()
    torch = _optional("torch")
    rows = []
    for n in sizes:
        u0 = np.zeros((n, n))
        u0[0, :] = 1.0  # a hot edge: the change stays positive for the whole run
        u, un = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
        change, flag = qgraph.ndarray(qgraph.f64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
        it = qgraph.ndarray(qgraph.i64, (1,))
        hu, hun = qgraph.from_numpy(u0), qgraph.from_numpy(u0)
        hchange, hit = qgraph.ndarray(qgraph.u64, (1,)), qgraph.ndarray(qgraph.i32, (1,))
        hand_solve = hand.relax(hu, hun, hchange, hit, n, 0.0, iterations)

        def q_solve(u=u, un=un, change=change, flag=flag, it=it, u0=u0) -> None:
            u.from_numpy(u0)
            it.fill(0)
            mod.relax(u, un, change, flag, it, 0.0, iterations)

        def h_solve(hu=hu, hit=hit, hand_solve=hand_solve, u0=u0) -> None:
            hu.from_numpy(u0)
            hit.fill(0)
            hand_solve()

        solvers = {"qgraph": (q_solve, u.to_numpy), "CUDA C++": (h_solve, hu.to_numpy)}
        if torch is not None:
            solvers["torch graph + .item()"] = _relax_torch(torch, u0, 0.0, iterations)
        try:
            solvers["JAX while_loop"] = _relax_jax(u0, 0.0, iterations)
        except Exception:  # JAX not installed (or not for this GPU)
            pass
        row = {"n": n, "iterations": iterations}
        results = {}
        for who, (solve, result) in solvers.items():
            solve()
            qgraph.sync()
            results[who] = result()
        # side by side in interleaved rounds: timed one after the other, the hand-written solver's own
        # time moved 5-10% between blocks on the H100 (8.4 or 8.9 us an iteration at 512^2)
        spreads = interleaved_spreads({who: solve for who, (solve, _) in solvers.items()}, RELAX_ROUND_S, repeat,
                                      qgraph.sync)
        for who, spread in spreads.items():
            row[who] = {}
            put_figure(row[who], "us_per_iteration", spread, 1e6 / iterations)
        reference = results["CUDA C++"]
        for who, value in results.items():
            row[who]["max_abs_diff"] = float(np.abs(value - reference).max())
        rows.append(row)
    return rows


def cpu_sum_rows(n: int = 10**7, repeat: int = 7) -> list[dict]:
    """A float64 sum on 1 and 2 threads, and np.sum, per call."""
    import numba

    mod = _qgraph_module()
    x = np.random.default_rng(0).random(n)
    out = np.zeros(1)
    threads = numba.get_num_threads()
    rows = {}
    try:
        for count in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(count)
            rows[f"qgraph, {count} thread{'s' if count > 1 else ''}"] = call_spread(
                lambda: mod.rsum_cpu(x, out), calls=5, repeat=repeat)
    finally:
        numba.set_num_threads(threads)
    rows["np.sum"] = call_spread(lambda: np.sum(x), calls=5, repeat=repeat)
    out[0] = 0.0
    mod.rsum_cpu(x, out)
    found = []
    for who, spread in rows.items():
        found.append({"what": who, "n": n})
        put_figure(found[-1], "ms", spread, 1e3)
        found[-1]["rel_error"] = abs(out[0] - x.sum()) / x.sum()
    return found


def table(reductions: list[dict], relax: list[dict], cpu: list[dict]) -> str:
    lines = []
    if reductions:
        lines.append(f"\nreductions over 2^{int(np.log2(reductions[0]['n']))} float32, per call "
                     f"(GB/s, % of the device-to-device copy measured in the same run)")
        for row in reductions:
            lines.append(f"  {row['op']:<4} copy {row['copy_GBps']:7.0f} GB/s")
            for who, cell in row.items():
                if isinstance(cell, dict):
                    lines.append(f"       {who:<10} {cell['us']:8.1f} us {cell['GBps']:7.0f} GB/s "
                                 f"{100 * cell['of_copy']:5.1f}%  rel. error {cell['rel_error']:.1e}")
    if relax:
        lines.append("\nrelax (README), per iteration, us (ratio to hand-written CUDA C++ in a WHILE node)")
        for row in relax:
            base = row["CUDA C++"]["us_per_iteration"]
            cells = [f"{who} {cell['us_per_iteration']:.1f} ({cell['us_per_iteration'] / base:.2f})"
                     for who, cell in row.items() if isinstance(cell, dict)]
            lines.append(f"  {row['n']:>5}^2  " + "   ".join(cells))
    if cpu:
        lines.append("\nCPU sum of 1e7 float64, ms per call")
        for row in cpu:
            lines.append(f"  {row['what']:<18} {row['ms']:7.2f} ms  rel. error {row['rel_error']:.1e}")
    return "\n".join(lines)


def plot(relax: list[dict], path: str) -> None:
    """Per-iteration time of each relax solver by grid size (a grouped bar chart)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    solvers = [who for who, cell in relax[0].items() if isinstance(cell, dict)]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(solvers)
    for k, who in enumerate(solvers):
        xs = [i + k * width for i in range(len(relax))]
        ax.bar(xs, [row[who]["us_per_iteration"] for row in relax], width, label=who)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(relax))], [f"{row['n']}^2" for row in relax])
    ax.set_yscale("log")
    ax.set_ylabel("us per iteration (log)")
    ax.set_title("relax (README): Jacobi sweep + max change + check, per iteration")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(quick: bool, budget: float, repeat: int) -> tuple[list[dict], list[dict], list[dict]]:
    if qgraph.current_arch() != "cuda":
        return [], [], cpu_sum_rows(repeat=3 if quick else 7)
    reductions = gpu_reduction_rows(24 if quick else 26, budget, repeat)
    relax = relax_rows((128, 512) if quick else (128, 512, 2048), 200 if quick else 1000, repeat)
    return reductions, relax, []
