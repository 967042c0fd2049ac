"""Module-level values a kernel reads (lang.front.globals_used): arrays are read at call time (and
can be written), numbers are compile-time constants checked at every call: never stale."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph

PARAMS = np.zeros(2)  # replaced by a device array on cuda (see `_params`)
GRAVITY = 9.8
HISTORY = np.zeros(1)
COEFFS = [1.0, 2.0]  # a list: kernels cannot read it


@qgraph.kernel
def fall(v, dt: float):
    for i in range(v.shape[0]):
        v[i] -= PARAMS[0] * dt * GRAVITY
    PARAMS[1] += 1.0  # a write the host sees


@qgraph.func
def reads_history(i):
    return HISTORY[0] + i


@qgraph.kernel
def uses_history(x):
    for i in range(x.shape[0]):
        x[i] = reads_history(i)


def _params(arch, values):
    global PARAMS
    PARAMS = np.array(values, np.float64) if arch == "cpu" else qgraph.from_numpy(np.array(values, np.float64))
    return PARAMS


def _host(a):
    return a if isinstance(a, np.ndarray) else a.to_numpy()


def test_module_level_arrays_are_read_and_written_at_call_time(arch):
    params = _params(arch, [0.0, 0.0])
    v = qgraph.from_numpy(np.zeros(4))
    fall(v, 1.0)
    np.testing.assert_array_equal(v.to_numpy(), 0.0)
    if arch == "cpu":
        params[0] = 1.0  # the host writes the module array in place
    else:
        params.from_numpy(np.array([1.0, _host(params)[1]]))
    fall(v, 1.0)
    np.testing.assert_allclose(v.to_numpy(), -9.8)
    assert _host(PARAMS)[1] == 2.0
    replaced = _params(arch, [2.0, 0.0])  # the name now holds another array
    fall(v, 1.0)
    np.testing.assert_allclose(v.to_numpy(), -9.8 * 3)
    assert _host(replaced)[1] == 1.0
    assert fall.stats.specialisations == 1


def test_a_changed_module_level_number_raises_until_reset(arch):
    global GRAVITY
    _params(arch, [1.0, 0.0])
    v = qgraph.from_numpy(np.zeros(2))
    fall(v, 1.0)
    GRAVITY = 1.0
    try:
        with pytest.raises(qgraph.QgraphError, match=r"module-level number GRAVITY changed.*now 1\.0.*qgraph.reset"):
            fall(v, 1.0)
        qgraph.reset()
        qgraph.init(arch)
        _params(arch, [1.0, 0.0])
        v = qgraph.from_numpy(np.zeros(2))
        fall(v, 1.0)
        np.testing.assert_allclose(v.to_numpy(), -1.0)
    finally:
        GRAVITY = 9.8
        qgraph.reset()


def test_numpy_module_array_on_cuda_says_how_to_fix(cuda):
    global PARAMS
    PARAMS = np.zeros(2)
    with pytest.raises(TypeError, match=r"module-level NumPy array 'PARAMS'.*PARAMS = qgraph.from_numpy"):
        fall(qgraph.from_numpy(np.zeros(2)), 1.0)


def test_a_func_reading_a_module_array_is_an_error(arch):
    with pytest.raises(qgraph.QgraphSyntaxError, match="reads the module-level array 'HISTORY'.*pass it in"):
        uses_history(qgraph.from_numpy(np.zeros(3)))


def _closure_kernel(scale: float):
    """A kernel reading `scale` from this function; `rebind` rebinds it as user code would."""
    @qgraph.kernel
    def scaled(x):
        for i in range(x.shape[0]):
            x[i] = scale * i

    def rebind(value):
        nonlocal scale
        scale = value
    return scaled, rebind


def test_a_rebound_number_of_the_enclosing_function_raises_until_reset(arch):
    scaled, rebind = _closure_kernel(2.0)
    rebind(5.0)  # before the first call: compiled with the value the name holds then
    x = qgraph.from_numpy(np.zeros(4))
    scaled(x)
    np.testing.assert_allclose(x.to_numpy(), 5.0 * np.arange(4))
    rebind(3.0)
    try:
        with pytest.raises(qgraph.QgraphError, match=r"kernel scaled: the number scale read from the enclosing "
                                                     r"function changed.*now 3\.0.*qgraph.reset"):
            scaled(x)
        qgraph.reset()
        qgraph.init(arch)
        x = qgraph.from_numpy(np.zeros(4))
        scaled(x)
        np.testing.assert_allclose(x.to_numpy(), 3.0 * np.arange(4))
    finally:
        qgraph.reset()


def test_a_rebound_number_read_by_a_func_of_the_enclosing_function_raises(arch):
    offset = 1.0

    @qgraph.func
    def shifted(i):
        return i + offset

    @qgraph.kernel
    def fill(x):
        for i in range(x.shape[0]):
            x[i] = shifted(i)

    x = qgraph.from_numpy(np.zeros(3))
    fill(x)
    np.testing.assert_allclose(x.to_numpy(), np.arange(3) + 1.0)
    offset = 2.0
    with pytest.raises(qgraph.QgraphError, match=r"the number offset read from the enclosing function changed"):
        fill(x)
    assert offset == 2.0


@qgraph.func
def first_coefficient():
    return COEFFS[0]


@qgraph.kernel
def reads_a_list(x):
    for i in range(x.shape[0]):
        x[i] = COEFFS[0] * i


@qgraph.kernel
def reads_a_list_through_a_func(x):
    for i in range(x.shape[0]):
        x[i] = first_coefficient()


@qgraph.kernel
def bounds_from_a_list(x):
    for i in range(len(COEFFS)):
        x[i] = 1.0


def test_a_list_dict_or_set_read_from_outside_gets_the_documented_error(arch):
    table = {"a": 1.0}

    @qgraph.kernel
    def reads_a_dict(x):
        for i in range(x.shape[0]):
            x[i] = table["a"]

    cases = [(reads_a_list, "COEFFS", "list", "x[i] = COEFFS[0] * i"),
             (reads_a_list_through_a_func, "COEFFS", "list", "return COEFFS[0]"),
             (bounds_from_a_list, "COEFFS", "list", "for i in range(len(COEFFS)):"),
             (reads_a_dict, "table", "dict", 'x[i] = table["a"]')]
    for kernel, name, type_name, line in cases:
        with pytest.raises(qgraph.QgraphSyntaxError) as info:
            kernel(qgraph.from_numpy(np.zeros(3)))
        assert str(info.value).startswith(f"{__file__}:"), str(info.value)
        assert (f"cannot compile kernel {kernel.__name__} for (x: float64[1d]): the global '{name}' is a "
                f"{type_name}, which kernels cannot use: pass it as an argument (an array or a number)"
                in str(info.value))
        assert info.value.source_line.strip() == line
