"""qgraph.ndarray / from_numpy / to_numpy / fill on every arch."""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest

import qgraph


def test_ndarray_is_zero_filled_with_properties(arch):
    a = qgraph.ndarray(qgraph.f32, (3, 4))
    assert (a.shape, a.dtype, a.ndim, a.size) == ((3, 4), np.dtype(np.float32), 2, 12)
    np.testing.assert_array_equal(a.to_numpy(), np.zeros((3, 4), np.float32))
    assert a.device == arch


def test_zero_d_array(arch):
    a = qgraph.ndarray(qgraph.i32, ())
    assert a.shape == () and a.size == 1 and a.ndim == 0
    a.fill(7)
    assert a.to_numpy() == 7 and a.to_numpy().shape == ()


def test_from_numpy_round_trip(arch):
    src = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    a = qgraph.from_numpy(src)
    np.testing.assert_array_equal(a.to_numpy(), src)
    src[0, 0, 0] = 99  # a copy, not a view
    assert a.to_numpy()[0, 0, 0] == 0


def test_from_numpy_into_an_existing_array_casts(arch):
    a = qgraph.ndarray(qgraph.f64, (3,))
    a.from_numpy(np.array([1, 2, 3], np.int32))
    np.testing.assert_array_equal(a.to_numpy(), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"shape \(2,\) does not match"):
        a.from_numpy(np.zeros(2))


def test_from_numpy_of_a_non_contiguous_view(arch):
    src = np.arange(20.0).reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(qgraph.from_numpy(src).to_numpy(), src)


@pytest.mark.parametrize("dtype,value", [(np.float64, 2.5), (np.float32, -1.25), (np.int64, -3), (np.int16, 300),
                                         (np.uint8, 200), (np.int32, 123456), (np.float64, 0.0)])
def test_fill(arch, dtype, value):
    a = qgraph.ndarray(dtype, (1001,))
    a.fill(value)
    np.testing.assert_array_equal(a.to_numpy(), np.full(1001, value, dtype))


@pytest.mark.usefixtures("collect_only_new_objects")
def test_copies_and_pickles_own_their_memory(arch):
    """copy, deepcopy and pickle make a new array with the contents (and the vector element type);
    writing one leaves the other alone, and freeing the original leaves the copy usable."""
    a = qgraph.ndarray(qgraph.vec3, (5,)).from_numpy(np.arange(15, dtype=np.float32).reshape(5, 3))
    copies = [copy.copy(a), copy.deepcopy(a), pickle.loads(pickle.dumps(a))]
    del a
    gc.collect()
    for c in copies:
        assert c.shape == (5, 3) and c._sig == qgraph.ndarray(qgraph.vec3, (5,))._sig  # still an array of vec3
        np.testing.assert_array_equal(c.to_numpy(), np.arange(15, dtype=np.float32).reshape(5, 3))
    copies[0].fill(7.0)
    np.testing.assert_array_equal(copies[1].to_numpy(), np.arange(15, dtype=np.float32).reshape(5, 3))


def test_bad_dtype_and_shape():
    qgraph.init("cpu")
    with pytest.raises(TypeError, match="not a dtype"):
        qgraph.ndarray("float-ish", (2,))
    with pytest.raises(ValueError, match="negative dimension"):
        qgraph.ndarray(qgraph.f32, (2, -1))
    with pytest.raises(TypeError, match="shape must be an int or a tuple"):
        qgraph.ndarray(qgraph.f32, "big")


def test_int_shape_and_len(arch):
    a = qgraph.ndarray(qgraph.u8, 5)
    assert a.shape == (5,) and len(a) == 5
    assert "uint8" in repr(a)


def test_numpy_interop(arch):
    a = qgraph.from_numpy(np.arange(4.0))
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0))


def test_cuda_array_interface(cuda):
    a = qgraph.from_numpy(np.arange(6, dtype=np.float32))
    cai = a.__cuda_array_interface__
    assert cai["shape"] == (6,) and cai["typestr"] == "<f4" and cai["data"][0] != 0
    cupy = pytest.importorskip("cupy")
    np.testing.assert_array_equal(cupy.asnumpy(cupy.asarray(a)), np.arange(6))


def test_cpu_array_has_no_cuda_interface(cpu):
    with pytest.raises(AttributeError):
        _ = qgraph.ndarray(qgraph.f32, (2,)).__cuda_array_interface__
