"""Progress bars (tqdm) for the command line's long steps, drawn only where a person watches.

A bar goes to standard error, and only when standard error is a terminal, the command was not
given --quiet, and the CI variable is unset (GitHub Actions, GitLab CI and most CI services
set CI=true; their logs would keep every redraw). Standard output never carries a bar, so
the results stay plain text in a pipe or a file.
"""

from __future__ import annotations

import os
import sys
import threading

_FALSE = ("", "0", "false", "no", "off")


def bars_wanted(quiet: bool = False, stream=None, environ=None) -> bool:
    """Whether to draw progress bars on `stream` (standard error): a terminal, not --quiet, not CI."""
    stream = sys.stderr if stream is None else stream
    environ = os.environ if environ is None else environ
    if quiet or environ.get("CI", "").strip().lower() not in _FALSE:
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class StepBar:
    """A bar over a command's named steps: the count says how many are done, the text which one
    runs. Its clock keeps moving while a step runs (a compile is one long step), so a slow step
    does not look like a hang. Disabled, it writes nothing."""

    REFRESH_SECONDS = 0.25

    def __init__(self, label: str, total: int, enabled: bool, stream=None) -> None:
        from tqdm import tqdm

        self._bar = tqdm(
            total=max(total, 1),
            desc=label,
            file=stream or sys.stderr,
            disable=not enabled,
            leave=False,
            dynamic_ncols=True,
            bar_format="{desc} {bar:20} {n}/{total} [{elapsed}{postfix}]",
        )
        self._started = False
        self._stop = threading.Event()
        if enabled:
            threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        while not self._stop.wait(self.REFRESH_SECONDS):
            self._bar.refresh()

    def step(self, name: str) -> None:
        """The step before (if any) is done; `name` runs now."""
        if self._started:
            self._bar.update(1)
        self._started = True
        self._bar.set_postfix_str(name)

    def note(self, text: str) -> None:
        """Replace the running step's text (a live value of a long step)."""
        self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        """Stop the clock and erase the bar (the command's output follows it)."""
        self._stop.set()
        self._bar.close()

    def __enter__(self) -> StepBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
