"""Ctrl-C during a compile is never lost (compiler/compile_signals.py): llvmlite's ctypes
callbacks drop a KeyboardInterrupt raised inside them, so the compile raises it afterwards."""

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
