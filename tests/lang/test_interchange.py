"""Loop interchange of elementwise qgraph.repeat loops (lang/front/interchange.py): which loops
qualify (decided on the source, no compile), the same bits as the loop of launches on the CPU
and CUDA for 1-D, 2-D, vec3 and multi-task bodies and any count, overlapping arrays refused,
gradients unchanged, the option and its environment variable."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.gradients import adjoint_grads, check_gradients, seeds_for, uniform

import qgraph
from qgraph.autodiff.adjoint_calls import adjoint_kernels
from qgraph.bench.loop_gradients import ballistic_loop
from qgraph.lang.front.interchange import InterchangedTask, interchanged
from qgraph.lang.front.regions import RepeatLoop, control_regions
from qgraph.runtime.settings import Settings

N = 7


@qgraph.kernel
def two_tasks(x, v, dt: float, k: int):
    for _ in qgraph.repeat(k):
        for i in range(x.shape[0]):
            t = v[i] * 0.5  # `t` in both tasks: renamed apart when they are fused
            v[i] = t + dt * x[i]
        for j in range(x.shape[0]):
            t = math.sqrt(x[j] * x[j] + 1.0)
            x[j] = t * 0.25 + v[j]


@qgraph.kernel
def grid(a, b, w: float, k: int):
    for _ in qgraph.repeat(k):
        for i, j in qgraph.ndrange(a.shape[0], a.shape[1]):
            a[i, j] = a[i, j] * w + b[i, j, 1]


def _two_tasks_reference(x, v, dt, k):
    x, v = x.copy(), v.copy()
    for _ in range(max(k, 0)):
        v = v * 0.5 + dt * x
        x = np.sqrt(x * x + 1.0) * 0.25 + v
    return x, v


def _interchanged(kernel) -> list[InterchangedTask]:
    return [t for t in interchanged(kernel.source).tasks if isinstance(t, InterchangedTask)]


# --------------------------------------------------------------------------- which loops qualify


def test_elementwise_loops_become_one_task():
    fused = _interchanged(two_tasks)
    assert len(fused) == 1 and len(fused[0].parts) == 2 and fused[0].count == "k"
    assert set(fused[0].arrays) == {"x", "v"} and fused[0].written == {"x", "v"}
    src = interchanged(two_tasks.source)
    assert not any(isinstance(r, RepeatLoop) for r in control_regions(src.body))
    assert [t.index for t in src.tasks] == [0]
    assert len(_interchanged(grid)) == 1 and len(_interchanged(ballistic_loop)) == 1  # 2-D; vec3 components


BODIES = {
    "a shifted subscript": "for i in range(x.shape[0] - 1):\n            x[i] = x[i + 1]",
    "a reduction": "for i in range(x.shape[0]):\n            y[0] += x[i]",
    "an atomic": "for i in range(x.shape[0]):\n            qgraph.atomic_add(y, 0, x[i])",
    "a serial task": "for i in range(x.shape[0]):\n            x[i] += 1.0\n        y[0] += 1.0",
    "a report": "for i in range(x.shape[0]):\n            x[i] += 1.0\n        qgraph.report('y', y[0])",
    "other extents": "for i in range(x.shape[0]):\n            x[i] += 1.0\n"
    "        for i in range(y.shape[0]):\n            y[i] += 1.0",
    "a branch": "if qgraph.cond(f):\n            for i in range(x.shape[0]):\n                x[i] += 1.0",
    "an array handed to a func": "for i in range(x.shape[0]):\n            x[i] = helper(y, i)",
    "a NumPy call": "for i in range(x.shape[0]):\n            x[i] = np.sum(y)",
    "a loop over an array": "for i in range(x.shape[0]):\n            for a in y:\n                x[i] += a",
    "an array passed on through a local": "for i in range(x.shape[0]):\n            a = y\n"
    "            x[i] = helper(a, i)",
    "a continue before another task": "for i in range(x.shape[0]):\n            if x[i] > 0:\n"
    "                continue\n            x[i] = 1.0\n        for i in range(x.shape[0]):\n            x[i] += 1.0",
    "a parameter assigned": "for i in range(x.shape[0]):\n            f = 2.0\n            x[i] += f",
    "the loop variables swapped": "for i, j in qgraph.ndrange(3, 3):\n            z[j, i] = z[i, j]",
}


@pytest.mark.parametrize("body", list(BODIES.values()), ids=list(BODIES))
def test_what_stays_a_loop(body, tmp_path):
    path = tmp_path / "kernels_not_interchanged.py"
    path.write_text(
        "import numpy as np\nimport qgraph\n\n\n@qgraph.func\ndef helper(a, i):\n    return a[i + 1]\n\n\n"
        f"def kernel(x, y, z, f, k: int):\n    for _ in qgraph.repeat(k):\n        {body}\n"
    )
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    kernel = qgraph.kernel(namespace["kernel"])
    assert interchanged(kernel.source) is kernel.source


# --------------------------------------------------------------------------- results


def test_the_same_bits_as_the_loop_of_launches(arch):
    rng = np.random.default_rng(3)
    x0, v0 = rng.uniform(0.1, 1.0, N), rng.uniform(-1.0, 1.0, N)
    looped = two_tasks.variant(interchange=False)
    for k in (5, 0, 1, 3):  # a new count each call: no new graph, no recompile
        found, kept = (qgraph.from_numpy(x0), qgraph.from_numpy(v0)), (qgraph.from_numpy(x0), qgraph.from_numpy(v0))
        two_tasks(*found, 0.1, k)
        looped(*kept, 0.1, k)
        for a, b, ref in zip(found, kept, _two_tasks_reference(x0, v0, 0.1, k)):
            np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
            np.testing.assert_allclose(a.to_numpy(), ref, rtol=1e-13)
    assert two_tasks.stats.num_tasks == 1 and looped.stats.num_tasks == 2
    assert two_tasks.stats.iterations == () and looped.stats.iterations == (3,)  # no device loop left


def test_two_dimensional_and_vector_bodies(arch):
    rng = np.random.default_rng(5)
    a0, b = rng.uniform(-1.0, 1.0, (3, 4)), rng.uniform(-1.0, 1.0, (3, 4, 2))
    results = []
    for kernel in (grid, grid.variant(interchange=False)):
        a = qgraph.from_numpy(a0)
        kernel(a, qgraph.from_numpy(b), 0.5, 4)
        results.append(a.to_numpy())
    expected = a0.copy()
    for _ in range(4):
        expected = expected * 0.5 + b[:, :, 1]
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], expected, rtol=1e-14)
    x0, v0 = rng.uniform(-1, 1, (N, 3)).astype(np.float32), rng.uniform(-1, 1, (N, 3)).astype(np.float32)
    vectors = []
    for kernel in (ballistic_loop, ballistic_loop.variant(interchange=False)):  # vec3 arrays, a vec3 argument
        x, v = qgraph.from_numpy(x0), qgraph.from_numpy(v0)
        kernel(x, v, qgraph.vec3(0.0, -9.8, 0.0), 0.01, 0.1, 6)
        vectors.append((x.to_numpy(), v.to_numpy()))
    np.testing.assert_array_equal(vectors[0][0], vectors[1][0])
    np.testing.assert_array_equal(vectors[0][1], vectors[1][1])
    assert ballistic_loop.stats.num_tasks == 1


def _device_views(arch, base: np.ndarray):
    if arch == "cpu":
        return base
    from numba import cuda

    return cuda.to_device(base)


def test_partially_overlapping_arrays_are_refused(arch):
    base = _device_views(arch, np.linspace(0.0, 1.0, N + 1))
    with pytest.raises(qgraph.QgraphError, match=r"'x' and 'v' overlap but are not the same view.*interchange=False"):
        two_tasks(base[1:], base[:-1], 0.1, 2)
    two_tasks.variant(interchange=False)(base[1:], base[:-1], 0.1, 2)  # the loop of launches runs it
    same = _device_views(arch, np.linspace(0.0, 1.0, N))
    two_tasks(same, same, 0.1, 2)  # the same view twice: element e is still only iteration e's


# --------------------------------------------------------------------------- gradients


@qgraph.kernel
def falling(x, v, steps: int, dt: float):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] += dt * (-9.8 - 0.3 * v[i])
            x[i] += dt * v[i]


@qgraph.kernel
def swinging(x, v, steps: int):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            x[i] = math.sin(x[i]) * 0.9 + 0.1 * v[i]


def test_a_nonlinear_loop_keeps_its_checkpoints(arch):
    """Its gradient keeps states: the tape runs the recording pass and the checkpointed adjoint
    (loops of launches, which do not qualify), the plain call the interchanged loop."""
    check_gradients(swinging, uniform(N), uniform(N), 6, tape=True, rtol=1e-6, atol=1e-8)
    assert _interchanged(swinging)


def test_gradients_through_an_interchanged_loop(arch):
    args = [uniform(N), uniform(N), 8, 0.05]
    found = check_gradients(falling, *args, tape=True)  # against central differences
    seeds = seeds_for(args)
    looped = adjoint_grads(falling.variant(interchange=False), args, seeds, tape=True)
    direct = adjoint_grads(falling, args, seeds)  # kernel.grad: the adjoint kernel is interchanged too
    for k in seeds:
        np.testing.assert_array_equal(found[k], looped[k])
        np.testing.assert_array_equal(direct[k], looped[k])
    adjoint = adjoint_kernels(falling)[0]
    launcher = next(iter(adjoint.launchers.values()))
    assert any(isinstance(t, InterchangedTask) for t in launcher.src.tasks)


# --------------------------------------------------------------------------- the option


def test_the_option_and_its_environment_variable():
    assert Settings.from_environ({}).interchange is True
    assert Settings.from_environ({"QGRAPH_INTERCHANGE": "0"}).interchange is False
    with pytest.raises(qgraph.QgraphError, match="QGRAPH_INTERCHANGE"):
        Settings.from_environ({"QGRAPH_INTERCHANGE": "sometimes"})
    with pytest.raises(TypeError, match="interchange must be True, False or None"):
        qgraph.kernel(interchange="no")


def test_the_fused_tasks_compile_for_cuda(cuda_compiler, monkeypatch):
    """The interchanged ballistic loop and its interchanged adjoint compile to PTX for sm_90 without
    a GPU, one entry each (vec3 components, the vec3 argument, float32)."""
    from types import SimpleNamespace

    import numba.cuda.dispatcher as dispatcher
    from helpers.cuda_offline import compile_offline

    from qgraph.args.kinds import array_sig, scalar_sig
    from qgraph.args.vectors import value_sig
    from qgraph.lang.adjoint import adjoint_source

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=(9, 0)))
    f4 = np.dtype("f4")
    vec3 = array_sig(f4, 2, True, element=(3,))
    key = (
        vec3,
        vec3,
        value_sig(qgraph.vec3(0.0, 0.0, 0.0), "g"),
        scalar_sig(f4),
        scalar_sig(f4),
        scalar_sig(np.dtype("i8")),
    )
    forward = interchanged(ballistic_loop.source)
    _, entries, _ = compile_offline(SimpleNamespace(source=forward), key)
    assert len(entries) == len(forward.tasks) == 1
    adjoint = interchanged(adjoint_source(ballistic_loop.source, ("x", "v")))
    assert [type(t) for t in adjoint.tasks] == [InterchangedTask]
    _, entries, _ = compile_offline(SimpleNamespace(source=adjoint), key + (vec3, vec3))
    assert len(entries) == 1
