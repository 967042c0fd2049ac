"""Argument kinds own their layout: named offsets agree with the bytes qgraph packs."""

from __future__ import annotations

import numpy as np

from qgraph.args.kinds import ArrayLayout, FlagKind, arg_type, array_kind, numba_abi, scalar_kind


def test_array_layout_names_the_fields_numba_abi_packs():
    kind = array_kind(np.dtype(np.float32), 2, True)
    packed = numba_abi(0xDEAD0, (3, 5), (20, 4), 4)
    layout = kind.layout
    assert layout.size == len(packed) == kind.param_size == 72
    assert int.from_bytes(packed[layout.data], "little") == 0xDEAD0
    assert [int.from_bytes(packed[layout.shape(k)], "little") for k in range(2)] == [3, 5]
    assert [int.from_bytes(packed[layout.stride(k)], "little") for k in range(2)] == [20, 4]
    assert int.from_bytes(packed[ArrayLayout.NITEMS:ArrayLayout.NITEMS + 8], "little") == 15


def test_kinds_are_interned_and_know_their_key_text():
    a = array_kind(np.dtype(np.int32), 1, False)
    assert a is array_kind(np.dtype(np.int32), 1, False) and a.sig == "int32[1d,strided]"
    assert arg_type("int32[1d,strided]") is a and a.is_array
    f = scalar_kind(np.dtype(np.float32))
    assert f.sig == "float32" and not f.is_array and f.pack(1.5) == np.float32(1.5).tobytes()
    assert scalar_kind(np.dtype(np.bool_)).param_sizes == [1]


def test_flag_kind_reads_address_and_shape_from_parameter_bytes():
    one = numba_abi(0x1000, (1,), (4,), 4)
    zero_d = numba_abi(0x2000, (), (), 4)
    assert int.from_bytes(one[FlagKind.address], "little") == 0x1000
    assert int.from_bytes(zero_d[FlagKind.address], "little") == 0x2000
    assert one[FlagKind.shape_field] in FlagKind.SHAPE_OK and zero_d[FlagKind.shape_field] in FlagKind.SHAPE_OK
    assert FlagKind.shape_of(numba_abi(0x1000, (3,), (4,), 4)) == (3,) and FlagKind.shape_of(zero_d) == ()
    assert FlagKind.accepts("int32[0d]") and not FlagKind.accepts("int64[1d]")


def test_a_0d_array_as_one_element():
    kind, suffix = array_kind(np.dtype(np.float64), 0, True).one_element()
    assert kind.sig == "float64[1d]"
    assert numba_abi(0x10, (), (), 8) + suffix == numba_abi(0x10, (1,), (8,), 8)
