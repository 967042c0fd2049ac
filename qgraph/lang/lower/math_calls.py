"""min and max in kernel code, with Python's rule on both backends (lowering.lower_statements
runs this on every task body and @qgraph.func body).

`min(a, b, ...)` and `max(a, b, ...)` become `_qg_min(_qg_min(a, b), ...)`: pairwise from the
left, each step keeping the earlier value unless the later one is strictly smaller (larger),
as CPython does. So a NaN, a signed zero or an int next to a float gives CPython's result on
both backends. numba's CPU min/max already follow that rule, and the CPU binds the names to
the builtins (compiler.cpu_program); numba-cuda lowers float min/max to fminf/fmaxf, which
drop a NaN, so CUDA binds them to device functions compiled from `python_min`/`python_max`
(compiler.numba_adapter). qgraph.clamp and np.clip reach this as min(max(x, lo), hi)
(lang.flat.calls), so a NaN `x` stays NaN, as on the host.
"""

from __future__ import annotations

import ast
import builtins
import math

import numpy as np

MIN, MAX = "_qg_min", "_qg_max"
_NAMES = {builtins.min: MIN, builtins.max: MAX}


def python_min(a, b):
    return b if b < a else a


def python_max(a, b):
    return b if b > a else a


PYTHON_RULE = {MIN: python_min, MAX: python_max}  # generated name -> its definition (for CUDA)

# Rounding follows Python and NumPy on both backends: math.floor/ceil/trunc give an int
# (numba-cuda's give a float), np.floor/ceil/trunc a float of the argument's type (numba-cuda
# has none), and math.floor(v) of a vector rounds per component to floats (as np.floor), so a
# vector keeps its type. lang.lower.lowering renames the calls; each backend binds the names.
ROUNDING = {math.floor: "_qg_floor", math.ceil: "_qg_ceil", math.trunc: "_qg_trunc",
            np.floor: "_qg_ffloor", np.ceil: "_qg_fceil", np.trunc: "_qg_ftrunc"}
# NumPy ufuncs of numbers that numba-cuda cannot lower (its ufunc table raised KeyError for
# np.sqrt on the GPU host), spelled as the math function with the same result; the CPU keeps
# numba's own. Bound on CUDA as `_qg_math` (the math module) and the builtin abs.
_SAME_AS_MATH = {"sqrt": "sqrt", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
                 "log10": "log10", "log1p": "log1p", "sin": "sin", "cos": "cos", "tan": "tan", "arcsin": "asin",
                 "arccos": "acos", "arctan": "atan", "arctan2": "atan2", "sinh": "sinh", "cosh": "cosh",
                 "tanh": "tanh", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "hypot": "hypot",
                 "fabs": "fabs", "copysign": "copysign", "fmod": "fmod", "isnan": "isnan", "isinf": "isinf",
                 "isfinite": "isfinite", "degrees": "degrees", "radians": "radians", "rad2deg": "degrees",
                 "deg2rad": "radians"}
NUMPY_AS_MATH = {getattr(np, name): f"_qg_math.{fn}" for name, fn in _SAME_AS_MATH.items()}
NUMPY_AS_MATH.update({np.abs: "abs", np.absolute: "abs"})
TO_FLOAT = {math.floor: "_qg_ffloor", math.ceil: "_qg_fceil", math.trunc: "_qg_ftrunc"}  # for vectors

# Result types of math calls, for the weak typing of Python numbers (lang.types.precision): math/NumPy
# functions whose float result has the precision of their arguments
FLOAT_MATH = frozenset(getattr(math, n) for n in (
    "sqrt", "exp", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "asin", "acos", "atan",
    "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "hypot", "pow", "fabs", "copysign", "erf",
    "erfc", "gamma", "lgamma", "degrees", "radians", "fmod", "remainder"))
FLOAT_NUMPY = frozenset(getattr(np, n) for n in (
    "sqrt", "exp", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "arcsin", "arccos",
    "arctan", "arctan2", "sinh", "cosh", "tanh", "hypot", "fabs", "abs", "absolute", "floor", "ceil", "trunc",
    "minimum", "maximum", "power", "copysign", "fmin", "fmax"))
INT_RESULT = frozenset((math.floor, math.ceil, math.trunc, math.isnan, math.isinf, math.isfinite, int, bool,
                         len, np.isnan, np.isinf, np.isfinite))
SAME_AS_ARGS = frozenset((abs, min, max))


def _int_floor(x):
    return int(math.floor(x))


def _int_ceil(x):
    return int(math.ceil(x))


def _int_trunc(x):
    return int(math.trunc(x))


def _float_floor(x):
    return math.floor(x)


def _float_ceil(x):
    return math.ceil(x)


def _float_trunc(x):
    return math.trunc(x)


# generated name -> (the CPU's function: numba's own, already right; CUDA's definition)
ROUNDING_FUNCTIONS = {"_qg_floor": (math.floor, _int_floor), "_qg_ceil": (math.ceil, _int_ceil),
                      "_qg_trunc": (math.trunc, _int_trunc), "_qg_ffloor": (np.floor, _float_floor),
                      "_qg_fceil": (np.ceil, _float_ceil), "_qg_ftrunc": (np.trunc, _float_trunc)}


class MinMax(ast.NodeTransformer):
    def __init__(self, resolve, local_names: set[str]) -> None:
        self.resolve = resolve  # KernelSource.resolve
        self.local_names = local_names

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, (ast.Name, ast.Attribute)) or len(node.args) < 2 or node.keywords \
                or any(isinstance(a, ast.Starred) for a in node.args):
            return node
        root = func
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or root.id in self.local_names:
            return node
        obj = self.resolve(func)
        name = next((n for fn, n in _NAMES.items() if obj is fn), None)
        if name is None:
            return node
        out = node.args[0]
        for arg in node.args[1:]:
            out = ast.copy_location(ast.Call(ast.copy_location(ast.Name(name, ast.Load()), func), [out, arg], []),
                                    node)
        return out


def lower_min_max(resolve, stmts: list[ast.stmt], local_names: set[str]) -> list[ast.stmt]:
    """`stmts` (rewritten in place) with every call of the builtin min/max on two or more
    arguments spelled with the generated names."""
    rewriter = MinMax(resolve, local_names)
    return [rewriter.visit(s) for s in stmts]
