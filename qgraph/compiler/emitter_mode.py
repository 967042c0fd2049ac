"""QGRAPH_EMITTER: whether qgraph's own LLVM emitter compiles what it covers (the CPU's serial form,
CUDA's task kernels) before numba does. `0` leaves everything to numba; `strict` raises an emitter's
own failure instead of falling back to numba (qgraph's tests set it, so a bug cannot hide)."""

from __future__ import annotations

import os

OFF, ON, STRICT = "off", "on", "strict"


def emitter_mode() -> str:
    """OFF, ON (the default) or STRICT, read from the environment at each compile."""
    mode = os.environ.get("QGRAPH_EMITTER", "1").strip().lower()
    if mode in ("0", "off", "false", "no"):
        return OFF
    return STRICT if mode == "strict" else ON
