"""Ctrl-C while a kernel compiles.

llvmlite calls back into Python through ctypes while numba compiles (its object cache
notification, for one). A KeyboardInterrupt raised inside such a callback is printed and
dropped ("Exception ignored on calling ctypes callback function"): the compile went on, and
a kernel that then looped for ever ignored the Ctrl-C that had already come. While a compile
runs in the main thread under Python's default SIGINT handler, the handler here records the
signal as well as raising; a compile that returns normally after one raises KeyboardInterrupt
naming the kernel. A user's own SIGINT handler is left alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading


@contextlib.contextmanager
def interruptible_compile(kernel: str):
    """Run a compile so that a Ctrl-C during it is never lost (see the module's docstring)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    seen: list[int] = []

    def on_sigint(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt(f"kernel {kernel} was interrupted while compiling")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if seen:  # raised where something swallowed it: raise it here, after the compile
        raise KeyboardInterrupt(f"kernel {kernel} was interrupted while compiling")
