"""The collector's threshold during a CUDA compile: raised, shared by nested and concurrent
compiles, and always given back (a compile that fails included)."""

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
