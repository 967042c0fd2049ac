"""The collector's threshold during a compile (CUDA and CPU): raised, shared by nested and
concurrent compiles, and always given back (a compile that fails included)."""

from __future__ import annotations

import gc
import threading

import pytest

from qgraph.compiler.compile_gc import COMPILE_THRESHOLD, rare_collections


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_raised_while_compiling_and_restored_after_nested_and_failing_compiles(thresholds):
    with rare_collections():
        assert gc.get_threshold() == (COMPILE_THRESHOLD, 10, 10)
        with pytest.raises(ValueError):
            with rare_collections():
                raise ValueError("a failing nested compile")
        assert gc.get_threshold() == (COMPILE_THRESHOLD, 10, 10)  # the outer compile still runs
    assert gc.get_threshold() == (700, 10, 10)


def test_concurrent_compiles_restore_once_the_last_finishes(thresholds):
    inside, release = threading.Event(), threading.Event()

    def other_compile():
        with rare_collections():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_compile)
    thread.start()
    assert inside.wait(10)
    with rare_collections():
        pass
    assert gc.get_threshold()[0] == COMPILE_THRESHOLD  # the other thread is still compiling
    release.set()
    thread.join(10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_users_own_settings_are_left_alone(thresholds):
    gc.set_threshold(0, 10, 10)  # collection turned off
    with rare_collections():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0
    gc.set_threshold(700, 10, 10)
    with rare_collections():
        gc.set_threshold(5000, 10, 10)  # changed by the user while a compile ran
    assert gc.get_threshold()[0] == 5000


def test_a_cpu_compile_runs_with_the_raised_threshold(thresholds, cpu, monkeypatch):
    """numba's CPU compiles too (compiler.cpu_program): a full collection they set off would walk
    everything the process holds. (The serial form left to numba: the emitter's does not run numba.)"""
    monkeypatch.setenv("QGRAPH_EMITTER", "0")
    import numpy as np
    from numba.core.dispatcher import Dispatcher

    import qgraph

    seen = []
    real = Dispatcher.compile

    def spy(self, sig):
        seen.append(gc.get_threshold())
        return real(self, sig)

    monkeypatch.setattr(Dispatcher, "compile", spy)

    @qgraph.kernel
    def halve(x):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5

    x = np.ones(5)
    halve(x)
    np.testing.assert_array_equal(x, np.full(5, 0.5))
    assert seen and all(t == (COMPILE_THRESHOLD, 10, 10) for t in seen)
    assert gc.get_threshold() == (700, 10, 10)
