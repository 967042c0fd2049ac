"""The gradient check (test_adjoint.py's method, used by every gradient test module): kernel.grad
against central finite differences in float64.

A kernel call maps the arrays it gets to the arrays it leaves. With a random seed per float
array, L = sum over arrays of sum(seed * array after the call) has the gradient
dL/d(array before the call) for each float array: kernel.grad computes it from the seeds
placed in the arrays' `.grad` (the gradients of what the call left), central differences of
L compute it from forward calls alone. Each call gets fresh qgraph copies of NumPy arguments.
"""

from __future__ import annotations

import numpy as np

import qgraph

RNG = np.random.default_rng(2026)


def _float(a) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def to_qgraph(args, requires_grad: bool) -> list:
    return [qgraph.from_numpy(a.copy(), requires_grad=requires_grad and _float(a)) if isinstance(a, np.ndarray)
            else a for a in args]


def seeds_for(args, seed: int = 7) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(a.shape).astype(a.dtype) for k, a in enumerate(args) if _float(a)}


def adjoint_grads(kernel, args, seeds: dict[int, np.ndarray], tape: bool = False) -> dict[int, np.ndarray]:
    """One forward call, then kernel.grad with `seeds` as the output gradients: the input gradients.
    tape=True: the call recorded on a qgraph.Tape and the seeds given to backward(grads=...), for
    kernels that overwrite what their adjoint reads (kernel.grad sees the arrays after the call)."""
    arrays = to_qgraph(args, True)
    if tape:
        with qgraph.Tape() as t:
            kernel(*arrays)
        t.backward(grads={arrays[k]: seed for k, seed in seeds.items()})
    else:
        kernel(*arrays)
        for k, seed in seeds.items():
            arrays[k].grad.from_numpy(seed)
        kernel.grad(*arrays)
    return {k: arrays[k].grad.to_numpy() for k in seeds}


def loss(kernel, args, seeds: dict[int, np.ndarray]) -> float:
    arrays = to_qgraph(args, False)
    kernel(*arrays)
    return float(sum(np.sum(seed.astype(np.float64) * arrays[k].to_numpy()) for k, seed in seeds.items()))


def numeric_grads(kernel, args, seeds: dict[int, np.ndarray], eps: float = 1e-6) -> dict[int, np.ndarray]:
    """Central differences of `loss` with respect to every element of every float array."""
    out = {}
    for k in seeds:
        g = np.zeros(args[k].shape)
        for idx in np.ndindex(args[k].shape):
            plus = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            minus = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            g[idx] = (loss(kernel, plus, seeds) - loss(kernel, minus, seeds)) / (2 * eps)
        out[k] = g
    return out


def check_gradients(kernel, *args, rtol: float = 1e-6, atol: float = 1e-7, eps: float = 1e-6,
                    seed: int = 7, tape: bool = False) -> dict[int, np.ndarray]:
    """kernel.grad equals central differences for every float array of `args` (NumPy arrays and
    scalars, in the kernel's parameter order); returns kernel.grad's gradients by position."""
    seeds = seeds_for(args, seed)
    found = adjoint_grads(kernel, args, seeds, tape)
    expected = numeric_grads(kernel, args, seeds, eps)
    for k in seeds:
        np.testing.assert_allclose(found[k], expected[k], rtol=rtol, atol=atol,
                                   err_msg=f"gradient of argument {k} of {kernel.__name__}")
    return found


def uniform(*shape, lo: float = 0.2, hi: float = 0.8, dtype=np.float64) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(dtype)
