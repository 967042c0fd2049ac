"""CUDA task kernels as NVVM IR: each generated task function an LLVM module of its own, a kernel
entry taking its arguments in numba-cuda's flattened layout (what compiler.cuda_program packs), the
helpers it calls emitted beside it. NVVM compiles the modules together (compiler.nvvm).

The layout per argument: an int64 or a float as itself; an array as its meminfo and parent
pointers, its item count and size, its data pointer, then its shape and strides (i64 each).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass

from llvmlite import ir

from . import cuda_dialect
from .emitter import FunctionEmitter
from .kinds import NVPTX, Array, NotEmittable, Scalar
from .module import EmittedModule, settled_pass
from .values import I8P, I64, ArrayValue, c_strides

# numba-cuda's NVVM data layout (numba/cuda/cudadrv/nvvm.py)
DATA_LAYOUT = ("e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-"
               "v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")


@dataclass
class KernelCode:
    ir: str  # the module's NVVM IR, annotated as a kernel
    name: str  # the entry's name (unique to the IR: its digest)
    param_sizes: list  # bytes of each parameter, in order (the PTX entry's)


class KernelModule(EmittedModule):
    """One task kernel's module (one pass of it)."""

    views = staticmethod(cuda_dialect.view)
    wraps_unsigned_indices = True  # CUDA kernels' address arithmetic as before (checked on the GPU host)
    range_flags = ()

    def __init__(self, helpers: dict, settled: dict) -> None:
        super().__init__(helpers, settled)
        self.ir.triple, self.ir.data_layout = NVPTX, DATA_LAYOUT  # for_nvvm: math through libdevice

    def unique(self, prefix: str) -> str:
        return f"{prefix}_{next(self.counter)}"

    def kernel(self, fe: FunctionEmitter, name: str, kinds: list) -> list:
        """The entry `name` for arguments of `kinds` (Scalar or Array); its parameter sizes."""
        params = [a.arg for a in fe.fdef.args.args]
        if len(params) != len(kinds) or fe.fdef.args.vararg or fe.fdef.args.kwonlyargs:
            raise NotEmittable("the arguments do not match the task's parameters")
        ir_types, sizes = [], []
        for kind in kinds:
            if isinstance(kind, Array):
                element = ir.IntType(8) if kind.dtype.kind == "b" else kind.dtype.ir
                ir_types += [I8P, I8P, I64, I64, element.as_pointer()] + [I64] * (2 * kind.ndim)
                sizes += [8] * (5 + 2 * kind.ndim)
            elif kind.kind == "b":
                raise NotEmittable("a bool argument")
            else:
                ir_types.append(kind.ir)
                sizes.append(kind.bits // 8)
        function = ir.Function(self.ir, ir.FunctionType(ir.VoidType(), ir_types), name)
        fe.role = "kernel"
        fe.begin(function, {})
        b, position = fe.builder, 0
        for param, kind in zip(params, kinds):
            if isinstance(kind, Array):
                n = kind.ndim
                parts = function.args[position:position + 5 + 2 * n]
                position += 5 + 2 * n
                shape = list(parts[5:5 + n])
                steps = c_strides(b, shape, kind.dtype) if kind.contiguous else list(parts[5 + n:])
                fe.bound[param] = ArrayValue(b.bitcast(parts[4], I8P), shape, steps, kind)
                continue
            value = function.args[position]
            position += 1
            fe.bind_scalar(param, value, kind)
        fe.statements(fe.fdef.body)
        if not fe.builder.block.is_terminated:
            fe.builder.ret_void()
        fe.finish_entry()
        return sizes

    def returned(self, fe: FunctionEmitter, value) -> None:
        if getattr(fe, "role", None) != "kernel":
            return self.helper_returned(fe, value)
        if value is not None:
            raise NotEmittable("a task returning a value")
        fe.builder.ret_void()

    def raised(self, fe: FunctionEmitter, error: type, message: str) -> None:
        raise NotEmittable("a raise in CUDA code")

    def object(self, obj) -> ir.Value:
        raise NotEmittable("a Python object in CUDA code")

    def annotated(self, name: str, ir_version: tuple) -> str:
        """The module's text with `name` marked as a kernel and NVVM's IR version."""
        function = self.ir.globals[name]
        kernel = self.ir.add_metadata([function, "kernel", ir.IntType(32)(1)])
        self.ir.add_named_metadata("nvvm.annotations", kernel)
        version = self.ir.add_metadata([ir.IntType(32)(v) for v in ir_version])
        self.ir.add_named_metadata("nvvmir.version", version)
        return str(self.ir)


def kernel_code(fdef: ast.FunctionDef, namespace: dict, kinds: list, helpers: dict, ir_version: tuple,
                label: str) -> KernelCode:
    """`fdef` (a generated task function) as a kernel for arguments of `kinds`; `namespace` resolves
    its other names, `helpers` maps a called name to the FunctionDef and namespace emitted beside it."""
    module, sizes = settled_pass(lambda settled: KernelModule(helpers, settled), fdef, namespace,
                                 lambda module, emitter: module.kernel(emitter, "_qg_kernel", kinds))
    text = module.annotated("_qg_kernel", ir_version)
    unique = f"_qg_{label}_{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return KernelCode(text.replace('@"_qg_kernel"', f'@"{unique}"'), unique, sizes)


def helper_functions() -> dict:
    """The helpers generated CUDA code calls (lang.lower.math_calls: Python-rule min/max, the rounding
    to ints) as FunctionDefs of their own source, with their module's namespace."""
    import inspect

    from ..lower import math_calls

    namespace = vars(math_calls)
    functions = {**math_calls.PYTHON_RULE, **{name: math_calls.ROUNDING_FUNCTIONS[name][1]
                                              for name in cuda_dialect.INT_ROUNDING}}
    return {name: (ast.parse(inspect.getsource(f)).body[0], namespace) for name, f in functions.items()}


__all__ = ["KernelCode", "Scalar", "helper_functions", "kernel_code"]
