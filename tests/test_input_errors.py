"""Bad input gets a clear error naming the argument or line and the fix (part of issue 16):
read-only and non-native byte-order NumPy arrays, numbers that do not fit an annotated
parameter, stream= and decorator options on every arch, init() spellings, and kernel
definitions numba would reject with its own words (methods, reserved names, the walrus)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.kernels import axpy

import qgraph


@qgraph.kernel
def scale32(x, a: qgraph.f32):
    for i in range(x.shape[0]):
        x[i] *= a


@qgraph.kernel
def fill_to(x, n: int):
    for i in range(n):
        x[0] = i


def test_read_only_arrays_are_inputs_only(cpu):
    x, y = np.ones(4), np.zeros(4)
    x.setflags(write=False)
    axpy(x, y, 2.0)  # a read-only input is fine
    np.testing.assert_array_equal(y, 2.0)
    y.setflags(write=False)
    with pytest.raises(TypeError, match=r"argument 'y' is a read-only NumPy array, but the kernel writes into it "
                                        r"\(line \d+\); pass a writable array \(np.array\(y\) copies it\)"):
        axpy(x, y, 2.0)
    axpy(x, np.zeros(4), 1.0)  # the next good call works


def test_non_native_byte_order_is_named(cpu):
    with pytest.raises(TypeError, match=r"argument 'x' has non-native byte order \(>f8\); convert it first"):
        axpy(np.ones(4).astype(">f8"), np.zeros(4), 1.0)


def test_numbers_that_do_not_fit_name_the_parameter(arch):
    x = qgraph.ndarray(qgraph.f32, (4,))
    with pytest.raises(TypeError, match=r"argument 'a': 1e\+300 does not fit in float32 \(it would become inf\)"):
        scale32(x, 1e300)
    with pytest.raises(TypeError, match=r"argument 'a': 100000000000\.\.\. \(401 digits\) does not fit in float64"):
        axpy(x, x, 10**400)
    with pytest.raises(TypeError, match=r"argument 'n': 9223372036854775810 does not fit in int64"):
        fill_to(qgraph.ndarray(qgraph.i64, (1,)), 2**63 + 2)
    scale32(x, float("inf"))  # infinities and NaN pass as such
    scale32(x, 3.0e38)
    fill_to(qgraph.ndarray(qgraph.i64, (1,)), 3)


def test_stream_and_options_are_checked_on_every_arch(arch):
    x = qgraph.ndarray(qgraph.f64, (4,))
    with pytest.raises(TypeError, match="stream=: str is not a stream"):
        axpy(x, x, 1.0, stream="foo")
    with pytest.raises(TypeError, match="cuda_graph must be True or False, got 'yes'"):
        qgraph.kernel(cuda_graph="yes")


def test_init_takes_the_spellings_qgraph_arch_takes(cpu):
    qgraph.init(" CPU ")
    assert qgraph.current_arch() == "cpu"
    with pytest.raises(ValueError, match=r"init\(arch='gpu'\): expected 'cuda', 'cpu' or None"):
        qgraph.init("gpu")
    qgraph.init("cpu")


def test_definitions_numba_would_reject_get_qgraph_errors():
    with pytest.raises(qgraph.QgraphSyntaxError, match="takes 'self' first, like a method"):
        class Solver:  # noqa: F841
            @qgraph.kernel
            def step(self, x):
                for i in range(x.shape[0]):
                    x[i] = 0
    with pytest.raises(qgraph.QgraphSyntaxError, match="parameter name '_qg_state' uses the prefix _qg_"):
        @qgraph.kernel
        def reserved(x, _qg_state):
            for i in range(x.shape[0]):
                x[i] = _qg_state
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"the walrus operator \(:=\) is not supported"):
        @qgraph.kernel
        def walrus(x):
            for i in range(x.shape[0]):
                if (v := x[i]) > 0:
                    x[i] = v


@qgraph.func
def countdown(n):
    return 0 if n <= 0 else countdown(n - 1)


@qgraph.kernel
def uses_countdown(x):
    for i in range(x.shape[0]):
        x[i] = countdown(i)


def test_a_recursive_func_gets_the_documented_error_at_module_level_and_inside_a_function(arch):
    @qgraph.func
    def nested_countdown(n):  # its own name is an empty closure cell while it is decorated
        return 0 if n <= 0 else nested_countdown(n - 1)

    @qgraph.kernel
    def uses_nested(x):
        for i in range(x.shape[0]):
            x[i] = nested_countdown(i)

    for kernel, func in ((uses_countdown, "countdown"), (uses_nested, "nested_countdown")):
        with pytest.raises(qgraph.QgraphSyntaxError, match=rf"{func} calls itself: recursive @qgraph.func helpers "
                                                           "are not supported"):
            kernel(qgraph.from_numpy(np.zeros(3)))


def test_a_call_with_missing_or_unknown_arguments_names_the_kernel(arch):
    x = qgraph.from_numpy(np.ones(4))
    with pytest.raises(TypeError, match=r"^kernel axpy\(\) missing 1 required positional argument: 'a'$"):
        axpy(x, x)
    with pytest.raises(TypeError, match=r"^kernel axpy\(\) got an unexpected keyword argument 'b'$"):
        axpy(x, x, 1.0, b=2.0)
    with pytest.raises(TypeError, match=r"^kernel axpy.compile\(\) missing 1 required positional argument: 'a'$"):
        axpy.compile(x, x)
    axpy(x, x, 1.0)  # the next good call works
    np.testing.assert_array_equal(x.to_numpy(), 2.0)


@qgraph.func
def store(a, i, v):
    a[i] = v


@qgraph.func
def store_through(v, i, out):
    store(out, i, v)  # a func passing its parameter on to one that writes it


@qgraph.func
def load(a, i):
    return a[i]


@qgraph.kernel
def copy_through_funcs(x, y, z):
    for i in range(x.shape[0]):
        store(y, i, load(x, i))
        store_through(out=z, i=i, v=load(x, i))


def test_read_only_arrays_written_through_funcs_get_the_read_only_message(cpu):
    x, y, z = np.ones(4), np.zeros(4), np.zeros(4)
    x.setflags(write=False)
    copy_through_funcs(x, y, z)  # read through a func: fine
    np.testing.assert_array_equal(y, 1.0)
    np.testing.assert_array_equal(z, 1.0)
    for name, ro in (("y", y), ("z", z)):
        ro.setflags(write=False)
        with pytest.raises(TypeError, match=rf"argument '{name}' is a read-only NumPy array, but the kernel writes "
                                            rf"into it \(line \d+\)"):
            copy_through_funcs(x, y, z)
        ro.setflags(write=True)
