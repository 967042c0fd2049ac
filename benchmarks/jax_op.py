"""A kernel inside jax.jit, side by side: qgraph.jax_op, Warp's jax_kernel (XLA FFI both), and the same
formula in JAX, in one process on one GPU (or on the CPU, without Warp).

    python benchmarks/jax_op.py [--n 1024,4194304] [--calls 2000] [--repeats 5]

Rows, each the median of --repeats timings of --calls calls (a jitted function called in a loop,
the loop's last result waited for), in microseconds per call:
  forward      out = a*x*x + y, one op per jitted call, `out` donated back each call
  chain x10    ten ops in one jitted function (the op's cost inside one XLA program)
  grad         jax.value_and_grad of sum(op(...)**2) with respect to x and y, jitted
Warp runs when it imports (`../shared/gpu/peers.sh warp` packs warp-lang 1.19 for the GPU host).
"""


import argparse
import os
import statistics
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import qgraph  # noqa: E402


@qgraph.kernel
def quad(x, y, a: float, out):
    for i in range(x.shape[0]):
        out[i] = a * x[i] * x[i] + y[i]


def _warp_op():
    try:
        import warp as wp
    except ImportError:
        return None

    wp.config.quiet = True
    wp.init()

    @wp.kernel
    def wp_quad(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a * x[i] * x[i] + y[i]

    try:
        from warp import jax_kernel
    except ImportError:
        from warp.jax_experimental.ffi import jax_kernel

    forward = jax_kernel(wp_quad)
    backward = jax_kernel(wp_quad, enable_backward=True)
    return (lambda x, y, a, out: forward(x, y, a)[0]), (lambda x, y, a, out: backward(x, y, a)[0])


def _time(fn, args, calls: int, repeats: int, donate: bool) -> float:
    a = list(args)
    out = fn(*a)
    if donate:
        a[-1] = out
    jax.block_until_ready(out)
    found = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = fn(*a)
            if donate:
                a[-1] = out
        jax.block_until_ready(out)
        found.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="1024,4194304", help="array sizes, comma-separated")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    on_gpu = any(d.platform == "gpu" for d in jax.devices())
    qgraph.init("cuda" if on_gpu else "cpu")
    ops = {"qgraph.jax_op": (qgraph.jax_op(quad),) * 2}
    warp = _warp_op() if on_gpu else None
    if warp is not None:
        ops["Warp jax_kernel"] = warp
    ops["JAX"] = ((lambda x, y, a, out: a * x * x + y),) * 2
    rows = []
    for n in (int(s) for s in args.n.split(",")):
        rng = np.random.default_rng(0)
        x, y = (jnp.asarray(rng.standard_normal(n).astype(np.float32)) for _ in range(2))
        cases = {}
        for name, (op, grad_op) in ops.items():
            def chain(x, y, out, op=op):
                for _ in range(10):
                    out = op(x, y, 2.0, out)
                    y = out
                return out

            grad = jax.value_and_grad(lambda x, y, out, op=grad_op: jnp.sum(op(x, y, 2.0, out) ** 2), argnums=(0, 1))
            cases[name] = (jax.jit(lambda x, y, out, op=op: op(x, y, 2.0, out), donate_argnums=2),
                           jax.jit(chain, donate_argnums=2), jax.jit(grad))
        times = {name: ([], [], []) for name in ops}
        for _ in range(args.repeats):  # the libraries in turn, each repeat: drifting clocks hit all alike
            for name, (forward, chained, grad) in cases.items():
                f, c, g = times[name]
                f.append(_time(forward, (x, y, jnp.zeros(n, jnp.float32)), args.calls, 1, True))
                c.append(_time(chained, (x, y, jnp.zeros(n, jnp.float32)), args.calls // 10, 1, True))
                g.append(_time(grad, (x, y, jnp.zeros(n, jnp.float32)), args.calls // 4, 1, False))
        for name, (forward, _, _) in cases.items():
            value = float(jnp.sum(forward(x, y, jnp.zeros(n, jnp.float32))))
            rows.append((n, name, *(statistics.median(t) for t in times[name]), value))
    print(f"{'n':>9} {'':>16} {'forward us':>11} {'chain x10 us':>13} {'grad us':>9}  check sum")
    for n, name, f, c, g, value in rows:
        print(f"{n:>9} {name:>16} {f:>11.2f} {c:>13.2f} {g:>9.2f}  {value:.6g}")


if __name__ == "__main__":
    main()
