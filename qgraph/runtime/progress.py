"""`kernel(..., progress=True)`: a live progress bar (or a callback) for a call's device loops.

While the call runs, a watcher thread polls, without waiting for the call's work: the outermost
loop's passes (CUDA: beside the launcher's cancel word, runtime.cancel, written by its condition
kernel each pass in device memory the watcher copies through a stream of its own, or by the host
fallback after each pass; CPU: in the runner's record) and the latest value of each
`qgraph.report` from the ring (runtime.history). `progress=True` draws a
tqdm bar with the passes, their rate and those values (tqdm turns itself off when stderr is no
terminal); `progress=fn` calls `fn(passes, values)` instead, and a return of False cancels the
loop (`kernel.cancel()`); an exception it raises cancels the loop too and the call raises it.
The calling thread waits for the device meanwhile, so Ctrl-C cancels
the loop there (DeviceState.sync). On the CPU the calling thread runs the loop, which hands the
watcher the GIL within about 2.5 ms (compiler.cpu_interrupts).
"""

from __future__ import annotations

import sys
import threading

from ..errors import LoopCancelled
from . import state as runtime

POLL_SECONDS = 0.1


class Watcher(threading.Thread):
    """Polls a kernel's passes and reports until `finish()`; draws a bar or calls a callback."""

    def __init__(self, kernel, progress) -> None:
        super().__init__(name=f"qgraph: progress of {kernel.source.qualname}", daemon=True)
        self.kernel = kernel
        self.callback = progress if callable(progress) else None
        self.bar = None
        if self.callback is None and sys.stderr is not None:  # no stderr (pythonw, a daemon): no bar
            from tqdm.auto import tqdm

            self.bar = tqdm(desc=kernel.source.qualname, unit=" passes", disable=None, leave=True)
        self.done = threading.Event()
        self.error: BaseException | None = None  # what the callback raised: the call raises it

    def run(self) -> None:
        while not self.done.wait(POLL_SECONDS):
            try:
                self.update(self.passes())
            except BaseException as e:  # the callback's: the loop is cancelled and the call raises it
                self.error = e
                self.kernel.cancel()
                return

    def passes(self) -> int:
        """The outermost loop's passes so far (the launchers read now: a first call makes its own)."""
        return self.kernel.loop_passes()

    def values(self) -> dict[str, float]:
        history = self.kernel.history
        latest = {}
        for name in history:
            row = history.latest(name)
            if row is not None:
                latest[name] = float(row[1])
        return latest

    def update(self, passes: int) -> None:
        values = self.values()
        if self.callback is not None:
            if self.callback(passes, values) is False:
                self.kernel.cancel()
            return
        if self.bar is not None:
            self.bar.n = passes
            if values:
                self.bar.set_postfix({k: f"{v:.4g}" for k, v in values.items()}, refresh=False)
            self.bar.refresh()

    def finish(self, passes: int | None) -> None:
        """Stop polling; the last update shows the call's final passes (None: it failed)."""
        self.done.set()
        self.join()
        if passes is not None:
            self.update(passes)
        if self.bar is not None:
            self.bar.close()


def watch_call(kernel, progress, args: tuple, stream) -> None:
    """Run one call of `kernel` with a watcher (see the module docstring), waiting for it to end."""
    watcher = Watcher(kernel, progress)
    watcher.start()
    passes = None
    try:
        kernel.launch_values(*args, stream)
        runtime.sync()
        passes = kernel.stats.iterations[0] if kernel.stats.iterations else 0
    except LoopCancelled:
        if watcher.error is None:
            raise
    finally:
        watcher.finish(passes)
    if watcher.error is not None:  # a progress callback raised: the loop was cancelled for it
        raise watcher.error
