"""Persistent per-node kernel parameter blocks and the generated code that fills them.

A task's parameter block is `bounds + arg bytes + ...` (see cuda_backend). Each launch
site (an eager task, or a kernel node of a graph) owns one `ParamBuffer`: a fixed-size
bytearray whose address the driver reads through `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER).
The driver copies the block at launch / node-update time, so the buffer can be rewritten
as soon as the call returns.

Per specialisation, launch code is generated as straight-line Python (one statement per
task, constants bound as default arguments): the hot path has no loops over tasks, no
dict lookups and no attribute chains.
"""

from __future__ import annotations

import ctypes

from .cuda_backend import TaskKernel

CU_LAUNCH_PARAM_END = 0
CU_LAUNCH_PARAM_BUFFER_POINTER = 1
CU_LAUNCH_PARAM_BUFFER_SIZE = 2


class ParamBuffer:
    """A parameter block handed to the driver by address; rewrite with `data[:] = block`."""

    __slots__ = ("data", "_view", "_size", "_extra", "extra")

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        if size == 0:
            self._view = self._size = self._extra = None
            self.extra = 0  # a kernel without parameters takes neither kernelParams nor extra
            return
        self._view = (ctypes.c_char * size).from_buffer(self.data)
        self._size = ctypes.c_size_t(size)
        self._extra = (ctypes.c_void_p * 5)(CU_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(self._view),
                                             CU_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(self._size),
                                             CU_LAUNCH_PARAM_END)
        self.extra = ctypes.addressof(self._extra)


def block_expr(tk: TaskKernel) -> str:
    """Python expression of a task's parameter block from `b` (bounds) and `p` (arg bytes)."""
    parts = [] if tk.bounds_slot is None else [f"b[{tk.bounds_slot}]"]
    suffixes = tk.suffixes or {}
    parts += [f"p[{k}]" + (f" + {suffixes[k]!r}" if k in suffixes else "") for k in tk.arg_slots]
    return " + ".join(parts) if parts else "b''"


def grid_expr(tk: TaskKernel, at_least_one: bool) -> str:
    """Python expression of a task's grid size from `n` (iteration counts)."""
    if not tk.parallel:
        return "1"
    expr = f"(n[{tk.bounds_slot}] + {tk.block - 1}) // {tk.block}"
    return f"({expr} or 1)" if at_least_one else expr


def generate(source: str, name: str, constants: dict):
    """Compile generated launch code; `constants` become the function's default arguments."""
    ns: dict = {}
    exec(source, ns)
    fn = ns[name]
    fn.__defaults__ = tuple(constants[p] for p in fn.__code__.co_varnames[fn.__code__.co_argcount -
                                                                            len(constants):fn.__code__.co_argcount])
    return fn


def signature_with_constants(params: str, constants: dict) -> str:
    """`def f(<params>, c1=None, c2=None, ...)`: the constants arrive as fast locals."""
    extra = ", ".join(f"{c}=None" for c in constants)
    return f"{params}, {extra}" if extra else params
