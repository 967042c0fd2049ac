"""Kernel objects called from many threads at once (issue 14): eager, graph and device-loop
kernels shared by 8 threads, each with its own arrays, give exact results on both backends,
and a signature compiled by racing first calls is compiled once."""

from __future__ import annotations

import threading

import numpy as np

import qgraph

THREADS, CALLS = 8, 1000


@qgraph.kernel
def add_eager(x):
    for i in range(x.shape[0]):
        x[i] += 1.0


@qgraph.kernel(cuda_graph=True)
def add_graph(x, c: float):
    for i in range(x.shape[0]):
        x[i] += c


@qgraph.kernel
def add_thrice(x, counter, flag):
    counter[0] = 3
    flag[0] = 1
    while qgraph.loop(flag):
        for i in range(x.shape[0]):
            x[i] += 1.0
        counter[0] -= 1
        flag[0] = 1 if counter[0] > 0 else 0


@qgraph.kernel(graph_while="flag")
def add_until(x, counter, flag):
    for i in range(x.shape[0]):
        x[i] += 1.0
    counter[0] -= 1
    flag[0] = 1 if counter[0] > 0 else 0


def _run_threads(work) -> list:
    errors: list = []

    def guarded(k: int) -> None:
        try:
            work(k)
        except BaseException as e:  # noqa: BLE001 (reported below, with the thread)
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_shared_kernels_from_eight_threads_give_exact_results(arch):
    results: dict = {}

    def work(k: int) -> None:
        n = 33 + k  # distinct shapes too
        a, b, c, d = (qgraph.ndarray(qgraph.f64, (n,)) for _ in range(4))
        counter, flag = qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,))
        for _ in range(CALLS):
            add_eager(a)
            add_graph(b, 2.0)
            add_thrice(c, counter, flag)
        for _ in range(50):
            counter.fill(4)
            add_until(d, counter, flag)
        results[k] = [arr.to_numpy() for arr in (a, b, c, d)]

    assert _run_threads(work) == []
    for k in range(THREADS):
        a, b, c, d = results[k]
        np.testing.assert_array_equal(a, CALLS)
        np.testing.assert_array_equal(b, 2.0 * CALLS)
        np.testing.assert_array_equal(c, 3.0 * CALLS)
        np.testing.assert_array_equal(d, 4.0 * 50)


@qgraph.kernel(cuda_graph=True)
def first_calls(x, a: float):
    for i in range(x.shape[0]):
        x[i] = a


def test_racing_first_calls_compile_a_signature_once(arch):
    before = first_calls.stats.specialisations
    barrier = threading.Barrier(THREADS)

    def work(k: int) -> None:
        x = qgraph.ndarray(qgraph.f32, (16,))
        barrier.wait()
        first_calls(x, float(k))
        assert x.to_numpy()[0] == k

    assert _run_threads(work) == []
    assert first_calls.stats.specialisations == before + 1
