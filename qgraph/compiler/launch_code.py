"""Generated launch code: parameter-block and grid expressions, straight-line launch functions.

A task's parameter block is `bounds + arg bytes + ...` (see compiler.cuda_program). Per
specialisation, launch code is generated as straight-line Python (one statement per task,
constants bound as default arguments): the hot path has no loops over tasks, no dict
lookups and no attribute chains.
"""

from __future__ import annotations

from ..lang import generated
from .cuda_program import TaskKernel


def block_expr(tk: TaskKernel) -> str:
    """Python expression of a task's parameter block from `b` (bounds) and `p` (arg bytes)."""
    parts = [] if tk.bounds_slot is None else [f"b[{tk.bounds_slot}]"]
    suffixes = tk.suffixes or {}
    args = [f"p[{k}]" + (f" + {suffixes[k]!r}" if k in suffixes else "") for k in tk.arg_slots]
    if tk.scratch is not None:  # deterministic reductions' scratch arrays follow the array arguments
        args.insert(tk.scratch_at, repr(tk.scratch.abi))
    parts += args
    return " + ".join(parts) if parts else "b''"


def grid_expr(tk: TaskKernel, at_least_one: bool) -> str:
    """Python expression of a task's grid size from `n` (iteration counts)."""
    if not tk.parallel:
        return "1"
    expr = f"(n[{tk.bounds_slot}] + {tk.block - 1}) // {tk.block}"
    if tk.grid_limit:
        expr = f"min({expr}, {tk.grid_limit})"
    return f"({expr} or 1)" if at_least_one else expr


def generate(source: str, name: str, constants: dict, label: str):
    """Compile generated launch code; `constants` become the function's default arguments."""
    fn = generated.function(source, name, label, {})
    fn.__defaults__ = tuple(constants[p] for p in fn.__code__.co_varnames[fn.__code__.co_argcount -
                                                                            len(constants):fn.__code__.co_argcount])
    return fn


def signature_with_constants(params: str, constants: dict) -> str:
    """`def f(<params>, c1=None, c2=None, ...)`: the constants arrive as fast locals."""
    extra = ", ".join(f"{c}=None" for c in constants)
    return f"{params}, {extra}" if extra else params
