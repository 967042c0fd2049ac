"""Gradients through device loops (lang/adjoint/loops.py, tape_loops.py): a `qgraph.repeat` loop
differentiated on the device, against central differences and against the same passes called
one by one from Python under the tape, on the CPU, the CUDA WHILE node and the host fallback.
A linear body keeps nothing; a body whose adjoints read what the loop overwrites keeps
checkpoints, at any spacing, within the tape's byte budget or not at all."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.gradient_kernels import drag_pass, nested, nested_until, switching
from helpers.gradients import check_gradients, seeds_for, to_qgraph, uniform

import qgraph

N = 5


@qgraph.kernel
def ballistic(x, v, steps: int, dt: float):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] += dt * (-9.8 - 0.3 * v[i])
            x[i] += dt * v[i]


@qgraph.kernel
def drag(x, v, k, out, steps: int, dt: float):
    for i in range(x.shape[0]):
        out[i] = 0.5 * x[i]  # before the loop: reads x as it entered
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] -= k[0] * v[i] * abs(v[i]) * dt
            x[i] += v[i] * dt
    for i in range(x.shape[0]):
        out[i] += x[i] * x[i]  # after the loop: reads x as it left


@qgraph.kernel
def coupled(x, y, steps: int):
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            y[i] = math.sin(x[i]) + 0.1 * y[i]
        for i in range(x.shape[0]):
            x[i] = 0.9 * x[i] + 0.2 * y[(i + 1) % x.shape[0]]
        x[0] = x[0] * y[0]  # a serial task


@qgraph.kernel
def bounce(x, v, flag, steps: int, dt: float):
    for _ in qgraph.repeat(steps):
        if qgraph.cond(flag):
            for i in range(x.shape[0]):
                v[i] -= v[i] * abs(v[i]) * dt
        else:
            for i in range(x.shape[0]):
                v[i] -= math.sin(x[i]) * dt
        for i in range(x.shape[0]):
            x[i] += v[i] * v[i] * dt


@qgraph.kernel
def around(x, v, out, steps: int, dt: float):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i]  # x as it entered the loop
    for _ in qgraph.repeat(steps):
        for i in range(x.shape[0]):
            v[i] += dt * (-9.8 - 0.3 * v[i])
            x[i] += dt * v[i]
    for i in range(x.shape[0]):
        out[i] += x[i] * x[i] * x[i]  # and as it left it


@qgraph.kernel
def drag_before(x, out):
    for i in range(x.shape[0]):
        out[i] = 0.5 * x[i]


@qgraph.kernel
def drag_after(x, out):
    for i in range(x.shape[0]):
        out[i] += x[i] * x[i]


@qgraph.kernel
def drag_until(x, v, k, left, flag, dt: float):
    while qgraph.loop(flag):
        for i in range(x.shape[0]):
            v[i] -= k[0] * v[i] * abs(v[i]) * dt
            x[i] += v[i] * dt
        left[()] -= 1
        if left[()] <= 0:
            flag[()] = 0


@qgraph.kernel(graph_while="flag")
def drag_do(x, v, k, left, flag, dt: float):
    for i in range(x.shape[0]):
        v[i] -= k[0] * v[i] * abs(v[i]) * dt
        x[i] += v[i] * dt
    left[()] -= 1
    flag[()] = 1 if left[()] > 0 else 0


def _drag_args(steps: int) -> list:
    return [uniform(N, lo=-1.0, hi=1.0), uniform(N, lo=-2.0, hi=2.0), uniform(1), np.zeros(N), steps, 0.05]


def test_linear_loop_keeps_nothing(arch):
    found = check_gradients(ballistic, uniform(N), uniform(N), 9, 0.05, tape=True)
    seeds = seeds_for([uniform(N), uniform(N)])
    gx, gv = seeds[0], seeds[1].copy()
    for _ in range(9):  # the adjoint recurrence: of x += dt v, then of v += dt (g - 0.3 v)
        gv = (gv + 0.05 * gx) * (1 - 0.05 * 0.3)
    np.testing.assert_allclose(found[1], gv, rtol=1e-12)
    x, v = to_qgraph([uniform(N), uniform(N)], True)
    with qgraph.Tape() as tape:
        ballistic(x, v, 9, 0.05)
    assert tape.stats.checkpoint_bytes == 0 and tape.stats.snapshots == 0


@pytest.mark.parametrize("steps, every", [(7, None), (10, 3), (9, 1), (1, None), (0, None)])
def test_nonlinear_loop_against_central_differences(loop_arch, steps, every):
    args = _drag_args(steps)
    seeds = seeds_for(args)
    arrays = to_qgraph(args, True)
    with qgraph.Tape(checkpoint_every=every) as tape:
        drag(*arrays)
    tape.backward(grads={arrays[k]: s for k, s in seeds.items()})
    found = {k: arrays[k].grad.to_numpy() for k in seeds}
    expected = check_gradients(drag, *args, tape=True, rtol=1e-6, atol=1e-8)  # central differences
    for k in seeds:
        np.testing.assert_allclose(found[k], expected[k], rtol=1e-10, atol=1e-12)
    assert tape.stats.checkpoint_bytes > 0


def test_nonlinear_loop_against_the_unrolled_loop(loop_arch):
    args = _drag_args(12)
    seeds = seeds_for(args)
    looped = to_qgraph(args, True)
    with qgraph.Tape(checkpoint_every=5) as tape:
        drag(*looped)
    tape.backward(grads={looped[k]: s for k, s in seeds.items()})
    x, v, k, out = to_qgraph(args[:4], True)
    with qgraph.Tape() as unrolled:
        drag_before(x, out)
        for _ in range(12):
            drag_pass(x, v, k, 0.05)
        drag_after(x, out)
    unrolled.backward(grads={a: seeds[n] for n, a in enumerate((x, v, k, out))})
    for n, a in enumerate((x, v, k, out)):
        np.testing.assert_allclose(looped[n].to_numpy(), a.to_numpy(), rtol=1e-14)  # the same forward pass
        np.testing.assert_allclose(looped[n].grad.to_numpy(), a.grad.to_numpy(), rtol=1e-12, atol=1e-14)


def _drag_step(x, v, k, out, steps: int, dt: float) -> None:
    with qgraph.Tape(checkpoint_every=3) as tape:
        drag(x, v, k, out, steps, dt)
    tape.backward(grads={out: 1.0})


drag_step = qgraph.graph(_drag_step)


def test_forward_and_backward_in_one_graph_step(arch):
    """A tape inside a @qgraph.graph step: the recording pass and the checkpointed adjoint are
    captured with the step on CUDA (replayed, with new buffers, on the second call)."""
    args = _drag_args(8)
    eager = to_qgraph(args[:4], True)
    _drag_step(*eager, 8, 0.05)
    for _ in range(2):
        captured = to_qgraph(args[:4], True)
        drag_step(*captured, 8, 0.05)
        for a, b in zip(captured, eager):
            np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), rtol=1e-14)
            np.testing.assert_allclose(a.grad.to_numpy(), b.grad.to_numpy(), rtol=1e-12, atol=1e-14)


def test_a_linear_loop_whose_arrays_are_read_before_and_after_it(arch):
    """The adjoints before and after the loop read x as it entered and as it left: the loop
    keeps its states though its own adjoint reads nothing."""
    check_gradients(around, uniform(N), uniform(N), np.zeros(N), 6, 0.05, tape=True, rtol=1e-6, atol=1e-8)


def test_two_dimensional_state(arch):
    @qgraph.kernel
    def relax(a, w, steps: int):
        for _ in qgraph.repeat(steps):
            for i, j in qgraph.ndrange(a.shape[0], a.shape[1]):
                a[i, j] = math.sin(a[i, j]) * w[0] + 0.1 * a[i, j]

    check_gradients(relax, uniform(3, 4), uniform(1), 5, tape=True, rtol=1e-6, atol=1e-8)


def test_multi_task_body(arch):
    check_gradients(coupled, uniform(N), uniform(N), 6, tape=True, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("taken", [0, 1])
def test_branches_inside_a_loop_that_keeps_states(arch, taken):
    check_gradients(bounce, uniform(N), uniform(N), np.array(taken, np.int32), 7, 0.05, tape=True, rtol=1e-6,
                    atol=1e-8)


def test_checkpoint_memory_is_reported_and_bounded(arch):
    x, v, k, out = to_qgraph(_drag_args(16)[:4], True)
    with qgraph.Tape() as tape:  # a checkpoint every sqrt(16) = 4 passes
        drag(x, v, k, out, 16, 0.05)
    working, kept = x.nbytes + v.nbytes + out.nbytes, x.nbytes + v.nbytes  # the arrays drag writes; the loop's
    after = x.nbytes  # the task after the loop: its adjoint reads x as the loop left it
    assert tape.stats.checkpoint_bytes == working + after + (16 // 4) * kept + 4 * v.nbytes  # the pass reads v
    before = x.to_numpy()
    message = (r"kernel drag: the gradient of its qgraph.repeat loop \(line \d+, 16 passes, a checkpoint every 2\) "
               r"keeps \d+ bytes, over the tape's checkpoint_bytes=100; raise qgraph.Tape\(checkpoint_bytes=...\)")
    with qgraph.Tape(checkpoint_every=2, checkpoint_bytes=100) as small:
        with pytest.raises(qgraph.QgraphError, match=message):
            drag(x, v, k, out, 16, 0.05)
    np.testing.assert_array_equal(x.to_numpy(), before)  # raised before the call started
    assert small.stats.calls == 0 and small.stats.checkpoint_bytes == 0
    with qgraph.Tape(checkpoint_bytes=tape.stats.checkpoint_bytes) as fitted:  # just enough
        drag(x, v, k, out, 16, 0.05)
    assert fitted.stats.checkpoint_bytes == tape.stats.checkpoint_bytes
    for bad in ({"checkpoint_every": 0}, {"checkpoint_bytes": 2.5}):
        with pytest.raises(ValueError, match=rf"qgraph.Tape\({next(iter(bad))}=.*\): give a positive int"):
            qgraph.Tape(**bad)


def test_kernel_grad_points_to_the_tape(arch):
    x, v, k, out = to_qgraph(_drag_args(3)[:4], True)
    drag(x, v, k, out, 3, 0.05)
    with pytest.raises(qgraph.QgraphError, match=r"kernel drag.grad: the gradient of its qgraph.repeat loop "
                                                 r"\(line \d+\) needs the arrays the loop overwrites \(v, x\)"):
        drag.grad(x, v, k, out, 3, 0.05)


def test_branch_on_an_unwritten_flag(arch):
    @qgraph.kernel
    def pick(x, y, flag, steps: int):
        for _ in qgraph.repeat(steps):
            if qgraph.cond(flag):
                for i in range(x.shape[0]):
                    y[i] += 2.0 * x[i]
            else:
                for i in range(x.shape[0]):
                    y[i] -= x[i] * 3.0

    for taken in (0, 1):
        found = check_gradients(pick, uniform(N), uniform(N), np.array(taken, np.int32), 3)
        seeds = seeds_for([uniform(N), uniform(N)])
        np.testing.assert_allclose(found[0], seeds[0] + 3 * (2.0 if taken else -3.0) * seeds[1])


@pytest.mark.parametrize("kernel", [drag, coupled, drag_until, drag_do, bounce, nested, nested_until, switching],
                         ids=["drag", "coupled", "until", "do", "bounce", "nested", "nested_until", "switching"])
def test_recording_and_adjoint_compile_for_cuda(cuda_compiler, cpu, monkeypatch, kernel):
    """The recording forward pass and the checkpointed adjoint compile to PTX for sm_90 without a
    GPU: one entry per task (the generated copies, counters and recomputed passes included)."""
    from types import SimpleNamespace

    import numba.cuda.dispatcher as dispatcher
    from helpers.cuda_offline import compile_offline

    from qgraph.args.kinds import arg_type, array_sig, scalar_sig
    from qgraph.autodiff.adjoint_calls import plan_for
    from qgraph.lang.adjoint import adjoint_source, recording_source
    from qgraph.lang.adjoint.loops import COUNTERS

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=(9, 0)))
    f8, i8, i4 = (np.dtype(t) for t in ("f8", "i8", "i4"))
    src = kernel.source
    special = {"steps": scalar_sig(i8), "outer": scalar_sig(i8), "inner": scalar_sig(i8), "dt": scalar_sig(f8),
               "left": array_sig(i8, 0, True), "phase": array_sig(i8, 0, True), "flag": array_sig(i4, 0, True)}
    key = tuple(special.get(p.name, array_sig(f8, 1, True)) for p in src.params)
    states = plan_for(kernel, key).states
    assert states is not None
    kinds = {p.name: arg_type(sig) for p, sig in zip(src.params, key)}
    buffers = tuple(array_sig(kinds[n].dtype, kinds[n].ndim + 1, True) for _, n, _, _ in states.buffers())
    flags, counters = array_sig(i4, 0, True), array_sig(i8, 0, True)
    kinds_of = {"every": scalar_sig(i8), "go": flags, "more": flags}
    hidden = buffers + tuple(kinds_of.get(name, counters) for _ in states.kept for name in COUNTERS)
    recording = recording_source(src, states)
    _, entries, _ = compile_offline(SimpleNamespace(source=recording), key + hidden)
    assert len(entries) == len(recording.tasks) > len(src.tasks)  # the copies and counters are tasks too
    grads = tuple(p.name for p in src.params if p.name not in special)
    adjoint = adjoint_source(src, grads, states)
    grad_sigs = tuple(key[src.param_names.index(g)] for g in grads)
    _, entries, _ = compile_offline(SimpleNamespace(source=adjoint), key + grad_sigs + hidden)
    assert len(entries) == len(adjoint.tasks)


@pytest.mark.parametrize("kernel", [drag_until, drag_do], ids=["qgraph.loop", "graph_while"])
def test_flag_loops_count_their_passes(loop_arch, kernel):
    """A flag loop's gradient is that of the passes that ran (the condition carries none): against
    central differences, and against the same passes called one by one under the tape."""
    x0, v0, k0 = _drag_args(0)[:3]
    args = [x0, v0, k0, np.array(7, np.int64), np.array(1, np.int32), 0.05]
    found = check_gradients(kernel, *args, tape=True, rtol=1e-6, atol=1e-8)
    seeds = seeds_for(args)
    x, v, k = to_qgraph([x0, v0, k0], True)
    with qgraph.Tape() as unrolled:
        for _ in range(7):
            drag_pass(x, v, k, 0.05)
    unrolled.backward(grads={a: seeds[n] for n, a in enumerate((x, v, k))})
    for n, a in enumerate((x, v, k)):
        np.testing.assert_allclose(found[n], a.grad.to_numpy(), rtol=1e-12, atol=1e-14)


def test_a_flag_loop_longer_than_its_checkpoints_says_so(arch):
    x, v, k = to_qgraph(_drag_args(0)[:3], True)
    left, flag = qgraph.from_numpy(np.array(5, np.int64)), qgraph.from_numpy(np.array(1, np.int32))
    carried = x.nbytes + v.nbytes + left.nbytes + flag.nbytes  # working arrays, and a checkpoint's bytes
    budget = carried + 2 * carried + v.nbytes  # room for 2 checkpoints, and the inputs of one pass (v)
    with qgraph.Tape(checkpoint_every=1, checkpoint_bytes=budget) as tape:
        drag_until(x, v, k, left, flag, 0.05)
    assert tape.stats.checkpoint_bytes == budget
    with pytest.raises(qgraph.QgraphError, match=r"kernel drag_until: its qgraph.loop loop \(line \d+\) ran 5 passes, "
                                                 r"more than the tape's checkpoints held \(2 checkpoints every 1 "
                                                 r"passes\); record it again under qgraph.Tape\(checkpoint_every=3\)"):
        tape.backward(grads={x: 1.0})
    with pytest.raises(qgraph.QgraphError, match=r"kernel drag_until.grad: the gradient of its qgraph.loop loop "
                                                 r"\(line \d+\) needs the arrays the loop overwrites"):
        drag_until.grad(x, v, k, left, flag, 0.05)
