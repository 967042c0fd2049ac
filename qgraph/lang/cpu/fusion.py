"""Which parallel tasks may share one numba function (a unit) so numba fuses their loops: those
whose every write numba's dependence analysis sees, in runs of at most MAX_UNIT_TASKS."""

from __future__ import annotations

import ast

from ..front.parse import KernelSource
from ..front.regions import Task
from ..lower.lowering import task_locals
from ..lower.updates import task_updates

_PURE_BUILTINS = {abs, min, max, int, float, bool, len, round, range}
# The most parallel tasks one unit (one numba function) holds. numba's parfor passes grow faster
# than linearly with the loops of one function: 200 fusable loops took 39.5 s to compile as one
# unit, 15.6 s in units of 16 (8: 17.9 s, 32: 17.1 s; numba alone on the same loops: 17.1 s;
# 13.95 s since loops drop their dead index copy),
# while fusion rarely has more than a few adjacent loops sharing arrays to gain from.
MAX_UNIT_TASKS = 16


def fusable(src: KernelSource, task: Task) -> bool:
    """True when numba sees every write of this parallel task (setitem only, pure calls).

    numba may reorder and fuse parallel loops in one function; its dependence analysis
    counts only setitem as a write, so a loop that writes through a call (an atomic, a
    helper, `x.fill()`) must stay in a function of its own.
    """
    if not task.parallel or task_updates(src, task) != ([], []):
        return False  # reductions and atomic scatters write through partials and calls
    local_names = task_locals(src, task)
    for stmt in task.body:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            root = node.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if not isinstance(root, ast.Name) or root.id in local_names:
                return False
            if not _is_pure_call(src.resolve(node.func), node):
                return False
    return True


def _is_pure_call(obj: object, node: ast.Call) -> bool:
    """A call that writes no array: math functions, a few builtins, NumPy ufuncs without out=."""
    import numpy as np

    if node.keywords:
        return False
    if any(obj is b for b in _PURE_BUILTINS):
        return True
    if callable(obj) and getattr(obj, "__module__", None) == "math":
        return True
    return isinstance(obj, np.ufunc)
