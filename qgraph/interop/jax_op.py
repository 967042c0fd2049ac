"""qgraph.jax_op: a kernel as a JAX function that runs inside jax.jit and that jax.grad differentiates.

JAX's arrays are values, so the function is functional, as torch_op(functional=True) is: it takes
the kernel's parameters (JAX arrays for the arrays it indexes, Python numbers for the others) and
returns the arrays the kernel writes, as the kernel leaves them, starting from the values passed.
Each call is an XLA FFI call (interop/xla_ffi.py) whose handler runs the kernel on the buffers XLA
gives it: on the GPU on XLA's own stream, no copy (a written array's buffer is its result's, through
input_output_aliases; XLA copies it first only where the input is still used); on the CPU on NumPy
views of XLA's host buffers. Its custom_vjp's backward is a second FFI call that runs the kernel's
adjoint (autodiff.adjoint_calls), seeded with the results' cotangents.

Numbers are static: XLA's handler gets them by a call number (one int64 attribute) that names the
numbers, shapes and dtypes recorded when the call was traced, so a handler reads no Python object.
"""

from __future__ import annotations

import itertools
import keyword
import warnings
from dataclasses import dataclass

import numpy as np

from ..autodiff.adjoint_calls import adjoint_kernel, launch_adjoint, plan_for
from ..errors import QgraphError
from ..lang.front.writes import written_params
from ..runtime import current_arch
from ..runtime.arrays import borrowed
from ..tracebacks import entry_point
from . import xla_ffi
from .operator_params import array_params, scalar_type

_SERIAL = itertools.count()
MANY_NUMBERS = 64  # distinct number values traced before a warning: a changing number belongs in an array
_NUMBER_TYPES = {"bool": bool, "int": int, "float": float}


@dataclass
class _Call:
    """What a traced call fixed: its numbers by parameter, its arrays' shapes and dtypes."""

    numbers: tuple
    shapes: tuple
    dtypes: tuple
    plan: object = None  # the GradientPlan of its signature, made when its backward pass is traced
    last: tuple = ((), None)  # the last run's buffer addresses and the kernel's arguments made of them


class JaxOperator:
    """The function qgraph.jax_op returns: call it with the kernel's parameters, inside jax.jit or not."""

    def __init__(self, kernel, name: str):
        src = kernel.source
        self.kernel = kernel
        self.name = name
        params = [p for p in src.params if p.source is None]
        if any(p.keyword_only for p in params):
            raise TypeError(f"qgraph.jax_op({src.name}): a JAX function takes positional parameters only")
        arrays = array_params(src)
        if not arrays:
            raise TypeError(f"qgraph.jax_op({src.name}): the kernel indexes none of its parameters, so the "
                            "function would take no array")
        written = {src.param_names[k] for k in written_params(src)}
        self.param_names = tuple(p.name for p in params)
        self._array_at = tuple(k for k, p in enumerate(params) if p.name in arrays)
        self._number_at = tuple(k for k, p in enumerate(params) if p.name not in arrays)
        self._number_types = tuple(_NUMBER_TYPES[scalar_type(src, params[k])] for k in self._number_at)
        # positions among the arrays of those the kernel writes: the function's results
        self._written = tuple(j for j, k in enumerate(self._array_at) if params[k].name in written)
        if not self._written:
            raise TypeError(f"qgraph.jax_op({src.name}): the kernel writes none of its arrays, so the function "
                            "would return nothing")
        self._calls: list[_Call] = []
        self._call_numbers: dict[tuple, int] = {}
        self._functions: dict[tuple, object] = {}
        serial = next(_SERIAL)
        self._targets = (f"qgraph_{name}_{serial}", f"qgraph_{name}_{serial}_adjoint")
        self._registered = False
        self._scratch = None

    def __repr__(self) -> str:
        return f"<qgraph.jax_op {self.name}({', '.join(self.param_names)})>"

    @entry_point  # its errors (a traced number, the kernel's compile) end at the user's call
    def __call__(self, *args):
        if len(args) != len(self.param_names):
            raise TypeError(f"qgraph.jax_op({self.name}) takes {len(self.param_names)} arguments "
                            f"({', '.join(self.param_names)}), got {len(args)}")
        numbers = tuple(self._number(args[k], k, tp) for k, tp in zip(self._number_at, self._number_types))
        function = self._functions.get(numbers)
        if function is None:
            function = self._functions[numbers] = self._differentiable(numbers)
            if len(self._functions) == MANY_NUMBERS:
                warnings.warn(f"qgraph.jax_op({self.name}): {MANY_NUMBERS} different values of its numbers "
                              f"({', '.join(self.param_names[k] for k in self._number_at)}) so far, each traced "
                              "and kept on its own; pass a number that changes every call as a one-element array "
                              "the kernel indexes", RuntimeWarning, stacklevel=3)  # past entry_point
        return function(*(args[k] for k in self._array_at))

    def _number(self, value, k: int, tp: type):
        import jax

        if isinstance(value, jax.core.Tracer):
            raise TypeError(f"qgraph.jax_op({self.name}): '{self.param_names[k]}' is a number of the kernel and "
                            "must be known when JAX traces the call; pass a Python number (under jax.jit, mark "
                            "it static with static_argnames=), or make it an array the kernel indexes")
        try:
            return tp(value)
        except (TypeError, ValueError):
            raise TypeError(f"qgraph.jax_op({self.name}): '{self.param_names[k]}' is a number of the kernel, "
                            f"got {type(value).__name__}") from None

    def _differentiable(self, numbers: tuple):
        """The custom_vjp function of the arrays, for these numbers."""
        import jax

        @jax.custom_vjp
        def function(*arrays):
            return self._forward(numbers, arrays)

        def forward(*arrays):
            outs = self._forward(numbers, arrays)
            return outs, (arrays, outs)

        def backward(saved, cotangents):
            arrays, outs = saved
            if len(self._written) == 1:
                outs, cotangents = (outs,), (cotangents,)
            return self._backward(numbers, arrays, outs, cotangents)

        function.defvjp(forward, backward)
        return function

    def _call_number(self, numbers: tuple, arrays: tuple) -> int:
        shapes = tuple(tuple(a.shape) for a in arrays)
        dtypes = tuple(np.dtype(a.dtype) for a in arrays)
        key = (numbers, shapes, dtypes, current_arch())  # compiled for the backend it was traced on
        found = self._call_numbers.get(key)
        if found is None:
            call = _Call(numbers, shapes, dtypes)
            self.kernel.compile_values(*self._values(call, self._examples(call, range(len(arrays)))))
            found = self._call_numbers[key] = len(self._calls)
            self._calls.append(call)
        return found

    def _examples(self, call: _Call, arrays) -> list:
        """Arrays of the call's shapes and dtypes, to compile its signature while JAX traces it: on
        the GPU, XLA records the handler's launches into a command buffer, where nothing compiles."""
        if current_arch() != "cuda":
            return [np.empty(call.shapes[j], call.dtypes[j]) for j in arrays]
        from ..dtypes import u8
        from ..runtime.arrays import ndarray

        scratch = ndarray(u8, (1,))  # a real address on the device, never read or written by a compile
        views = self._views(call, [scratch.address] * len(arrays), True, arrays)
        self._scratch = scratch  # alive until the next: what compile_values read stays valid
        return views

    def _prepare_adjoint(self, call: _Call) -> None:
        """The call's GradientPlan and its adjoint compiled, when JAX traces the backward pass (an
        adjoint that cannot be right raises here, at jax.grad, rather than when XLA runs it)."""
        if call.plan is not None:
            return
        count = len(self._array_at)
        values = self._values(call, self._examples(call, range(count)))
        plan = plan_for(self.kernel, self.kernel.compile_values(*values))
        if plan.states is not None:
            raise QgraphError(f"qgraph.jax_op({self.name}): the gradient of its device loop (line "
                              f"{plan.states.loop.lineno}) needs the states of its passes, which only qgraph.Tape "
                              "keeps; differentiate the kernel with qgraph.Tape instead")
        floats = [j for j in range(count) if call.dtypes[j].kind == "f"]
        names = tuple(self.param_names[self._array_at[j]] for j in floats)
        order = tuple(p.name for p in self.kernel.source.params if p.name in names)
        grads = dict(zip(names, self._examples(call, floats)))
        adjoint_kernel(self.kernel, order).compile_values(*values, *(grads[n] for n in order))
        call.plan = plan

    def _forward(self, numbers: tuple, arrays: tuple):
        import jax

        self._register()
        arrays = tuple(jax.numpy.asarray(a) for a in arrays)
        call = self._call_number(numbers, arrays)
        results = [jax.ShapeDtypeStruct(arrays[j].shape, arrays[j].dtype) for j in self._written]
        outs = _ffi().ffi_call(self._targets[0], results, vmap_method="sequential",
                               input_output_aliases={j: r for r, j in enumerate(self._written)},
                               )(*arrays, call=np.int64(call))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _backward(self, numbers: tuple, arrays: tuple, outs: tuple, cotangents: tuple) -> tuple:
        import jax

        call = self._call_number(numbers, arrays)
        self._prepare_adjoint(self._calls[call])
        floats = [j for j, a in enumerate(arrays) if np.issubdtype(a.dtype, np.floating)]
        if not floats:
            return (None,) * len(arrays)
        seeds = [cotangents[self._written.index(j)].astype(arrays[j].dtype) if j in self._written
                 else jax.numpy.zeros_like(arrays[j]) for j in floats]
        first = len(arrays) + len(outs)
        results = [jax.ShapeDtypeStruct(arrays[j].shape, arrays[j].dtype) for j in floats]
        grads = _ffi().ffi_call(self._targets[1], results, vmap_method="sequential",
                                input_output_aliases={first + r: r for r in range(len(floats))},
                                )(*arrays, *outs, *seeds, call=np.int64(call))
        by_array = dict(zip(floats, grads))
        return tuple(by_array.get(j) for j in range(len(arrays)))

    def _register(self) -> None:
        if self._registered:
            return
        import jax

        ffi = _ffi()
        platforms = {"cpu": False}
        if any(d.platform == "gpu" for d in jax.devices()):
            platforms["CUDA"] = True
        for platform, on_gpu in platforms.items():
            for target, run in zip(self._targets, (self._run_forward, self._run_adjoint)):
                handler = xla_ffi.make_handler(self._on(run, on_gpu), f"qgraph.jax_op({self.name})", on_gpu)
                ffi.register_ffi_target(target, xla_ffi.capsule(handler), platform=platform)
        self._registered = True

    def _on(self, run, on_gpu: bool):
        def handle(frame: xla_ffi.Frame) -> None:
            arch = current_arch()
            if (arch == "cuda") != on_gpu:
                raise QgraphError(f"JAX runs this call on the {'GPU' if on_gpu else 'CPU'}, and qgraph's backend is "
                                  f"{arch}; call qgraph.init('{'cuda' if on_gpu else 'cpu'}') first, or put the "
                                  "arrays where qgraph runs")
            run(frame, on_gpu)
        return handle

    def _views(self, call: _Call, addresses, on_gpu: bool, arrays: range) -> list:
        if on_gpu:
            return [borrowed(call.dtypes[j], call.shapes[j], address) for j, address in zip(arrays, addresses)]
        return [xla_ffi.host_view(address, call.shapes[j], call.dtypes[j]) for j, address in zip(arrays, addresses)]

    def _values(self, call: _Call, arrays: list) -> list:
        """The kernel's arguments in parameter order: the arrays' views and the call's numbers."""
        values = [None] * len(self.param_names)
        for k, view in zip(self._array_at, arrays):
            values[k] = view
        for k, number in zip(self._number_at, call.numbers):
            values[k] = number
        return values

    def _run_forward(self, frame: xla_ffi.Frame, on_gpu: bool) -> None:
        call = self._calls[frame.call_number()]
        addresses = frame.arguments()
        for r, address in zip(self._written, frame.results()):
            addresses[r] = address  # a written array's result buffer: the argument's value, copied or donated
        last, values = call.last
        if addresses != last:  # XLA's allocator mostly gives a program the same buffers each run
            values = self._values(call, self._views(call, addresses, on_gpu, range(len(addresses))))
            call.last = (addresses, values)
        if on_gpu:
            self.kernel(*values, stream=frame.stream())
        else:
            self.kernel(*values)

    def _run_adjoint(self, frame: xla_ffi.Frame, on_gpu: bool) -> None:
        call = self._calls[frame.call_number()]
        count = len(self._array_at)
        addresses = frame.arguments()
        before = self._views(call, addresses[:count], on_gpu, range(count))
        after = self._views(call, addresses[count:count + len(self._written)], on_gpu, self._written)
        floats = [j for j in range(count) if call.dtypes[j].kind == "f"]
        grads = self._views(call, frame.results(), on_gpu, floats)
        values = self._values(call, before)
        self._prepare_adjoint(call)
        for r, view in zip(self._written, after):
            name = self.param_names[self._array_at[r]]
            if call.plan.reads.get(name) == "after":
                values[self._array_at[r]] = view
        named = {self.param_names[self._array_at[j]]: g for j, g in zip(floats, grads)}
        launch_adjoint(self.kernel, tuple(values), named, stream=frame.stream() if on_gpu else None)


def _ffi():
    import jax

    ffi = getattr(jax, "ffi", None)
    if ffi is None:  # JAX before 0.4.38 kept it in jax.extend
        from jax.extend import ffi
    return ffi


@entry_point
def jax_op(kernel, name: str | None = None) -> JaxOperator:
    """`kernel` as a JAX function, usable inside jax.jit and differentiable with jax.grad/jax.vjp.
    It takes the kernel's parameters in order (JAX arrays for the arrays it indexes, Python numbers
    for the others) and returns the arrays the kernel writes (one array, or a tuple in parameter
    order), computed from the values passed; the arguments are not changed. Gradients run the
    kernel's adjoint and reach every float array argument (a written one's with respect to the
    value passed). On the GPU it runs on XLA's stream without a copy; on the CPU on XLA's buffers."""
    try:
        import jax  # noqa: F401
    except ImportError:
        raise ImportError("qgraph.jax_op needs JAX (pip install jax)") from None
    from ..decorator import Kernel

    if not isinstance(kernel, Kernel):
        raise TypeError(f"qgraph.jax_op takes a @qgraph.kernel, got {kernel!r}")
    op_name = name or kernel.source.name
    if not isinstance(op_name, str) or not op_name.isidentifier() or keyword.iskeyword(op_name):
        raise ValueError(f"jax_op name must be a Python identifier (it names the XLA FFI target), got {op_name!r}")
    return JaxOperator(kernel, op_name)
