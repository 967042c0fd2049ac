"""Ctrl-C during a compile is never lost (compiler/compile_signals.py): llvmlite's ctypes
callbacks drop a KeyboardInterrupt raised inside them, so the compile raises it afterwards. The
cyclic garbage collector waits for the compile."""

from __future__ import annotations

import os
import signal

import pytest

from qgraph.compiler.compile_signals import interruptible_compile


def _swallowed_interrupt() -> None:
    """What a ctypes callback does to a KeyboardInterrupt raised inside it: prints and drops it."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        signal.getsignal(signal.SIGINT)  # a bytecode boundary: the handler has run by now
    except KeyboardInterrupt:
        pass


def test_a_swallowed_ctrl_c_is_raised_after_the_compile():
    with pytest.raises(KeyboardInterrupt, match="kernel relax was interrupted while compiling"):
        with interruptible_compile("relax"):
            _swallowed_interrupt()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_that_propagates_is_raised_once_and_a_quiet_compile_raises_nothing():
    with pytest.raises(KeyboardInterrupt, match="interrupted while compiling"):
        with interruptible_compile("relax"):
            os.kill(os.getpid(), signal.SIGINT)
            signal.getsignal(signal.SIGINT)
    with interruptible_compile("relax"):
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_users_own_handler_is_left_alone():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with interruptible_compile("relax"):
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            os.kill(os.getpid(), signal.SIGINT)
            signal.getsignal(signal.SIGINT)
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_collector_waits_for_a_compile_and_comes_back_after_one_that_failed(cpu):
    import gc

    import numpy as np

    import qgraph

    @qgraph.kernel
    def halve(x):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5

    seen = []
    x = np.ones(4)
    gc.callbacks.append(lambda phase, info: seen.append(phase))
    try:
        with interruptible_compile("halve"):
            assert not gc.isenabled()
            halve(x)  # a compile inside one: the collector stays off, and is not turned on by it
            assert not gc.isenabled()
            gc.collect()  # (an explicit collection still runs)
        assert gc.isenabled() and seen
        with pytest.raises(RuntimeError, match="a failed compile"):
            with interruptible_compile("halve"):
                raise RuntimeError("a failed compile")
        assert gc.isenabled()
        gc.disable()  # a caller's own choice is kept
        with interruptible_compile("halve"):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.callbacks.pop()
    np.testing.assert_array_equal(x, np.full(4, 0.5))
