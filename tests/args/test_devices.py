"""Kernels on any CUDA device (issue 18): `qgraph.device(i)` scopes where arrays live, a call runs
on its arrays' device, arrays of two devices in one call raise naming them, and one thread per
device drives its device. Tests needing two GPUs skip with fewer; the argument checks and the
scope's errors run everywhere."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import qgraph
from qgraph.args.devices import call_devices, one_device


@qgraph.kernel
def axpy(y, x, a: float):
    for i in range(y.shape[0]):
        y[i] += a * x[i]


@qgraph.kernel(cuda_graph=True)
def scale(y, a: float):
    for i in range(y.shape[0]):
        y[i] *= a
    for i in range(y.shape[0]):
        y[i] += 1.0


@qgraph.kernel(graph_while="flag")
def count_down(x, counter, flag):
    for i in range(x.shape[0]):
        x[i] += 1.0
    counter[0] -= 1
    flag[0] = 1 if counter[0] > 0 else 0


@qgraph.kernel
def noise(out):
    for i in range(out.shape[0]):
        out[i] = qgraph.random()


@qgraph.struct
class Pair:
    u: object
    v: object


@qgraph.kernel
def swap_add(p: Pair):
    for i in range(p.u.shape[0]):
        p.u[i] += p.v[i]


def two_gpus():
    if qgraph.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")


# --------------------------------------------------------------------------- everywhere


def test_mixed_devices_error_names_each_argument():
    with pytest.raises(ValueError, match=r"kernel k: its arrays are on different devices \('x' on cuda:0, "
                                         r"'y' on cuda:1\).*qgraph.device"):
        one_device([(0, "x"), (1, "y")], "kernel k")
    assert one_device([(1, "x"), (1, "y")], "k") == 1
    assert one_device([], "k") is None


def test_host_arguments_have_no_device(cpu):
    p = Pair(qgraph.ndarray(np.float64, 3), qgraph.ndarray(np.float64, 3))
    assert call_devices(("p", "a"), (p, 2.0), None, "kernel k") is None
    assert qgraph.ndarray(np.float32, 2).device_id is None


def test_device_scope_on_cpu_says_why(cpu):
    with pytest.raises(qgraph.QgraphError, match=r"qgraph.device\(0\): qgraph runs on cpu.*init\('cuda'\)"):
        with qgraph.device(0):
            pass
    with pytest.raises(TypeError, match="device ordinal"):
        with qgraph.device("cuda:1"):
            pass
    assert isinstance(qgraph.device_count(), int)


# --------------------------------------------------------------------------- one GPU


def test_arrays_remember_their_device(cuda):
    a = qgraph.ndarray(np.float32, 4)
    assert a.device == "cuda" and a.device_id == 0
    assert "cuda:0" in repr(a)
    with qgraph.device(0) as info:
        assert info.ordinal == 0 and qgraph.device_info().ordinal == 0
        assert qgraph.ndarray(np.float32, 4).device_id == 0


def test_a_missing_device_is_a_clear_error_and_the_next_call_works(cuda):
    count = qgraph.device_count()
    with pytest.raises(qgraph.QgraphError, match=rf"CUDA device {count} does not exist \({count} device"):
        with qgraph.device(count):
            pass
    y = qgraph.from_numpy(np.zeros(8))
    axpy(y, qgraph.from_numpy(np.ones(8)), 2.0)
    np.testing.assert_array_equal(y.to_numpy(), 2.0)


# --------------------------------------------------------------------------- two GPUs


def test_a_call_runs_on_its_arrays_device(cuda):
    two_gpus()
    rng = np.random.default_rng(1)
    xs, ys = rng.random(1000), rng.random(1000)
    with qgraph.device(1):
        x1, y1 = qgraph.from_numpy(xs), qgraph.from_numpy(ys)
    x0, y0 = qgraph.from_numpy(xs), qgraph.from_numpy(ys)
    assert (x1.device_id, x0.device_id) == (1, 0)
    for _ in range(3):  # alternate devices: each keeps its own compiled code
        axpy(y1, x1, 0.5)
        axpy(y0, x0, 0.5)
    np.testing.assert_allclose(y1.to_numpy(), ys + 1.5 * xs)
    np.testing.assert_allclose(y0.to_numpy(), y1.to_numpy())
    assert {"cuda:0", "cuda:1"} <= set(axpy.launchers)


def test_graphs_and_device_loops_on_the_second_device(cuda):
    two_gpus()
    with qgraph.device(1):
        y = qgraph.from_numpy(np.arange(64.0))
        x, counter, flag = qgraph.ndarray(np.float64, 16), qgraph.from_numpy(np.array([5], np.int32)), \
            qgraph.from_numpy(np.array([1], np.int32))
    for _ in range(4):
        scale(y, 2.0)
    expect = np.arange(64.0)
    for _ in range(4):
        expect = expect * 2.0 + 1.0
    np.testing.assert_allclose(y.to_numpy(), expect)
    assert scale.stats.used_graph
    count_down(x, counter, flag)
    np.testing.assert_array_equal(x.to_numpy(), 5.0)
    assert counter.to_numpy()[0] == 0


def test_arrays_of_two_devices_in_one_call_raise_and_leave_nothing_behind(cuda):
    two_gpus()
    with qgraph.device(1):
        x1 = qgraph.from_numpy(np.ones(8))
    y0 = qgraph.from_numpy(np.zeros(8))
    with pytest.raises(ValueError, match=r"kernel axpy: its arrays are on different devices \('y' on cuda:0, "
                                         r"'x' on cuda:1\)"):
        axpy(y0, x1, 1.0)
    x0 = qgraph.from_numpy(np.ones(8))
    axpy(y0, x0, 3.0)
    np.testing.assert_array_equal(y0.to_numpy(), 3.0)


def test_foreign_arrays_and_structs_choose_the_device(cuda):
    two_gpus()
    torch = pytest.importorskip("torch")
    y = torch.zeros(32, dtype=torch.float64, device="cuda:1")
    x = torch.arange(32, dtype=torch.float64, device="cuda:1")
    axpy(y, x, 2.0)
    qgraph.sync()
    np.testing.assert_allclose(y.cpu().numpy(), 2.0 * np.arange(32))
    with pytest.raises(ValueError, match="'x' on cuda:0"):
        axpy(y, x.to("cuda:0"), 1.0)
    with qgraph.device(1):
        p = Pair(qgraph.from_numpy(np.ones(16)), qgraph.from_numpy(np.full(16, 2.0)))
    for _ in range(2):  # the second call takes the struct's cached resolution
        swap_add(p)
    np.testing.assert_array_equal(p.u.to_numpy(), 5.0)
    q = Pair(qgraph.from_numpy(np.ones(16)), p.v)
    with pytest.raises(ValueError, match=r"'p.u' on cuda:0, 'p.v' on cuda:1"):
        swap_add(q)


def test_random_numbers_are_the_same_on_every_device(cuda):
    two_gpus()
    qgraph.seed(7)
    a = qgraph.ndarray(np.float64, 256)
    with qgraph.device(1):
        b = qgraph.ndarray(np.float64, 256)
    noise(a)
    noise(b)
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())


def test_a_step_runs_on_its_kernels_device(cuda):
    two_gpus()

    @qgraph.graph
    def step(y, x):
        axpy(y, x, 1.0)
        scale(y, 3.0)

    with qgraph.device(1):
        y, x = qgraph.from_numpy(np.zeros(32)), qgraph.from_numpy(np.ones(32))
    for _ in range(2):
        step(y, x)
    np.testing.assert_allclose(y.to_numpy(), ((0 + 1) * 3 + 1 + 1) * 3 + 1)
    assert step.stats.replays >= 1


def test_one_thread_per_device(cuda):
    two_gpus()
    results, errors = {}, []

    def drive(ordinal: int) -> None:
        try:
            with qgraph.device(ordinal):
                y = qgraph.from_numpy(np.full(4096, float(ordinal)))
                for _ in range(300):
                    scale(y, 1.0)
                results[ordinal] = y.to_numpy()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=drive, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for ordinal in range(2):
        np.testing.assert_array_equal(results[ordinal], ordinal + 300.0)


def test_compile_ahead_on_the_arrays_device(cuda):
    two_gpus()

    @qgraph.kernel
    def double(y):
        for i in range(y.shape[0]):
            y[i] *= 2.0

    with qgraph.device(1):
        y = qgraph.from_numpy(np.ones(8))
    double.compile(y)
    assert "cuda:1" in double.launchers and double.stats.specialisations == 1
    double(y)
    assert double.stats.specialisations == 1
    np.testing.assert_array_equal(y.to_numpy(), 2.0)
