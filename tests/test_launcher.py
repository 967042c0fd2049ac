"""The plain dispatcher (qgraph.launcher.bind + dispatch) and the launch each backend generates per
kernel run a call the same way: the same results, statistics and errors, alone, under a tape
and in a step, on every target and loop form (the generated one may only be faster)."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph
from qgraph import launcher

N = 64


@qgraph.kernel
def axpy(y: qgraph.f64[:], x: qgraph.f64[:], a: float):
    for i in range(y.shape[0]):
        y[i] = y[i] + a * x[i]


@qgraph.kernel(cuda_graph=True)
def two_tasks(y: qgraph.f64[:], x: qgraph.f64[:], total: qgraph.f64[:]):
    for i in range(y.shape[0]):
        y[i] = 2.0 * x[i] + 1.0
    for i in range(y.shape[0]):
        total[0] += y[i]


@qgraph.kernel
def halve_until(x: qgraph.f64[:], flag: qgraph.i32[:]):
    while qgraph.loop(flag):
        for i in range(x.shape[0]):
            x[i] = 0.5 * x[i]
        flag[0] = 1 if x[0] > 1.0 else 0


@qgraph.kernel
def repeated(x: qgraph.f64[:], count: int):
    for _ in qgraph.repeat(count):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.9 + 0.1


def _inputs(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"y": rng.random(N), "x": rng.random(N), "big": 1.0 + 1000.0 * rng.random(N)}


CASES = {
    "axpy": (axpy, lambda d: (qgraph.from_numpy(d["y"]), qgraph.from_numpy(d["x"]), 0.5)),
    "two_tasks": (two_tasks, lambda d: (qgraph.from_numpy(d["y"]), qgraph.from_numpy(d["x"]),
                                        qgraph.from_numpy(np.zeros(1)))),
    "device_loop": (halve_until, lambda d: (qgraph.from_numpy(d["big"]), qgraph.from_numpy(np.ones(1, np.int32)))),
    "repeat": (repeated, lambda d: (qgraph.from_numpy(d["x"]), 7)),
}


def _run_both(kernel, make, seed: int, calls: int = 3) -> tuple[list, list, tuple, tuple]:
    """The arrays after `calls` calls through the generated launch, and through bind + dispatch,
    with the statistics each left (a fresh runtime for each, so both compile and build alike)."""
    results, stats = [], []
    for plain in (False, True):
        qgraph.reset()
        args = make(_inputs(seed))
        for _ in range(calls):
            if plain:
                launcher.dispatch(launcher.bind(kernel, args))
            else:
                kernel(*args)
        qgraph.sync()
        results.append([a.to_numpy() for a in args if isinstance(a, qgraph.Ndarray)])
        s = kernel.stats
        stats.append((s.specialisations, s.builds, s.used_graph, s.graph_nodes, s.host_loop, s.iterations))
    return results[0], results[1], stats[0], stats[1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_plain_dispatcher_runs_a_call_as_the_generated_launch_does(loop_arch, case):
    kernel, make = CASES[case]
    generated, plain, generated_stats, plain_stats = _run_both(kernel, make, seed=len(case))
    for g, p in zip(generated, plain):
        np.testing.assert_allclose(p, g, rtol=1e-12)
    assert plain_stats == generated_stats


def test_a_plain_call_is_recorded_by_a_tape_and_differentiates_the_same(arch):
    x = qgraph.from_numpy(np.linspace(0.0, 1.0, N), requires_grad=True)
    grads = []
    for plain in (False, True):
        y = qgraph.from_numpy(np.zeros(N), requires_grad=True)
        x.grad.fill(0.0)
        with qgraph.Tape() as tape:
            if plain:
                launcher.dispatch(launcher.bind(axpy, (y, x, 3.0)))
            else:
                axpy(y, x, 3.0)
        tape.backward(grads={y: np.ones(N)})
        grads.append(x.grad.to_numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
    np.testing.assert_allclose(grads[0], 3.0)


def test_a_plain_call_in_a_step_is_one_of_its_calls(arch):
    @qgraph.graph
    def step(y, x):
        launcher.dispatch(launcher.bind(axpy, (y, x, 2.0)))
        axpy(y, x, 1.0)

    y, x = qgraph.from_numpy(np.zeros(N)), qgraph.from_numpy(np.ones(N))
    for _ in range(3):
        step(y, x)
    np.testing.assert_allclose(y.to_numpy(), 9.0)
    assert step.stats.kernel_calls == 2


def test_a_plain_call_raises_the_generated_launchs_errors(arch):
    x = qgraph.from_numpy(np.zeros(N))
    flag = qgraph.from_numpy(np.ones(3, np.int32))  # a flag must have shape () or (1,)
    with pytest.raises(TypeError, match="flag 'flag' must be an int32 array of shape") as generated:
        halve_until(x, flag)
    with pytest.raises(TypeError, match="flag 'flag' must be an int32 array of shape") as plain:
        launcher.dispatch(launcher.bind(halve_until, (x, flag)))
    assert str(plain.value) == str(generated.value)
    halve_until(x, qgraph.from_numpy(np.ones(1, np.int32)))  # the next good call works
