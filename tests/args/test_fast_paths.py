"""Argument resolution's fast paths as structured pieces (args/fast_paths.py): how a chain of
paths renders, and that every fast path agrees with the slow path on what both accept.

Generation only (no device): the CUDA resolution packs bytes without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from qgraph.args.fast_paths import ArgPath, emit_chain
from qgraph.args.kinds import SCALAR_KINDS
from qgraph.args.resolve import cpu_slow, cuda_slow, resolution
from qgraph.lang import generated
from qgraph.lang.generated import Lines
from qgraph.runtime.arrays import Ndarray


def _resolver(fixed: tuple, arch: str):
    """A generated `resolve(a0, ...) -> ((s0, v0), ...)` for parameters annotated `fixed`."""
    n = len(fixed)
    ns: dict = {}
    body = Lines().line("pure = True")
    body.add(resolution(tuple(f"x{k}" for k in range(n)), fixed, arch, ns, Ndarray, mutable_flag="pure"))
    body.line(f"return ({', '.join(f'(s{k}, v{k})' for k in range(n))},), pure")
    return generated.function(body.function(f"resolve({', '.join(f'a{k}' for k in range(n))})"), "resolve",
                              f"test resolution {fixed} ({arch})", ns)


def test_a_chain_renders_guards_once_and_the_unguarded_path_as_else():
    out = Lines()
    emit_chain(out, [ArgPath("t is float", "_WF", "a0"),
                     ArgPath("t in _structs", pair="_structs[t](a0)", setup=("c = 1",), unstable="not c"),
                     ArgPath(None, pair="_slow(a0)", unstable=True)], 0, "pure")
    assert out.rendered() == ["if t is float:", "    s0, v0 = _WF, a0",
                              "elif t in _structs:", "    c = 1", "    s0, v0 = _structs[t](a0)",
                              "    if not c:", "        pure = False",
                              "else:", "    s0, v0 = _slow(a0)", "    pure = False"]
    alone = Lines()
    emit_chain(alone, [ArgPath(None, "_fix0", "_vec0(a0)", unstable=True)], 0, "")  # no flag: nothing cleared
    assert alone.rendered() == ["s0, v0 = _fix0, _vec0(a0)"]


NUMBERS = [0, 1, -1, 7, 127, 128, 255, 256, -129, 2**31 - 1, 2**31, -2**31 - 1, 2**63 - 1, 2**64 - 1, 2**64, 0.5, -2.5,
           3.4e38, 3.5e38, 1e300, float("inf"), float("nan"), True, False]


@pytest.mark.parametrize("arch", ["cpu", "cuda"])
def test_annotated_scalars_take_the_slow_paths_result_or_its_error(arch):
    """For every scalar kind, a number resolves on the fast path to what the slow path gives
    (key text, value or bytes), and what the fast path leaves names the argument as the slow path does."""
    kinds = [k.sig for k in SCALAR_KINDS]
    resolve = _resolver(tuple(kinds), arch)
    slow = cpu_slow if arch == "cpu" else (lambda v, name, fixed: cuda_slow(v, name, fixed)[:2])
    for number in NUMBERS + [np.float32(1.5), np.int32(-3), np.uint8(200), np.float64(2.0)]:
        try:
            got, _pure = resolve(*[number] * len(kinds))
        except TypeError as e:
            got_error = str(e)
        else:
            got_error = None
        expected = []
        for k, sig in enumerate(kinds):
            try:
                expected.append(slow(number, f"x{k}", sig))
            except TypeError as e:
                assert got_error == str(e), (number, sig)  # the first argument that fails raises
                break
        else:
            assert got_error is None, (number, got_error)
            for (s, v), (es, ev), sig in zip(got, expected, kinds):
                assert s == es == sig
                assert type(v) is type(ev) and (v == ev or v != v and ev != ev), (number, sig, v, ev)


@pytest.mark.parametrize("arch", ["cpu", "cuda"])
def test_free_numbers_resolve_as_the_slow_path_and_stay_pure(arch):
    resolve = _resolver((None,), arch)
    slow = cpu_slow if arch == "cpu" else (lambda v, name, fixed: cuda_slow(v, name, fixed)[:2])
    for number in [1.5, 3, -2**63, 2**63 - 1, np.float32(2.5), np.int16(-4), np.bool_(True)]:
        ((s, v),), pure = resolve(number)
        es, ev = slow(number, "x0", None)
        assert s == es and v == ev, number
        # (the cpu fast path passes a NumPy bool as it is, the slow path as a Python bool: numba types both alike)
        assert type(v) is type(ev) or arch == "cpu" and type(number) is np.bool_, number
        assert pure, number
    ((s, v),), pure = resolve(True)  # a bool is no int here: the slow path's, by its own type
    assert (s, v) == slow(True, "x0", None) == ("bool", v) and not pure
    with pytest.raises(TypeError, match="argument 'x0': 9223372036854775808 does not fit in int64"):
        resolve(2**63)
