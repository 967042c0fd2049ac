"""lang.philox: Philox4x32-10 known answers, the draws compiled by numba (CPU, and CUDA PTX)
equal to the NumPy reference bit for bit, their distributions, edge words and iteration ids."""

from __future__ import annotations

import math
import os

import numba
import numpy as np
import pytest

from qgraph.lang import philox

KINDS = ("uniform_f64", "uniform_f32", "normal_f64", "normal_f32", "randint")
# Random123's known-answer vectors (kat_vectors) for philox4x32_10: counter, key, output.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
# (seed, stream, draw): stream high words go into the key, low words into the counter.
STATES = [(0, 0, 0), (12345, 7, 3), (2**64 - 1, 2**64 - 1, 2**32 - 1), (0xDEADBEEF, (5 << 32) | 9, 17)]
LO, HI = -3, 5


@pytest.fixture(scope="module")
def cpu_fns():
    return philox.bind(numba.njit)


def _runner(fn, kind):
    """An njit loop calling the compiled draw for every index (randint with LO, HI)."""
    if kind == "randint":
        @numba.njit
        def run(seed, stream, index, draw, out):
            for i in range(index.size):
                out[i] = fn(LO, HI, seed, stream, index[i], draw)
    else:
        @numba.njit
        def run(seed, stream, index, draw, out):
            for i in range(index.size):
                out[i] = fn(seed, stream, index[i], draw)
    return run


def _indices(n, rng):
    """Small ids, ids near 2**32 and 2**64 and random 64-bit ids."""
    edges = np.array([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1], np.uint64)
    return np.concatenate([edges, np.arange(n, dtype=np.uint64), rng.integers(0, 2**64 - 1, n, np.uint64, True)])


def test_known_answer_vectors(cpu_fns):
    for counter, key, expected in KAT:
        assert tuple(int(w) for w in philox.philox4x32_10(*counter, *key)) == expected  # NumPy scalars
        got = cpu_fns["philox4x32_10"](*(np.uint32(w) for w in counter + key))
        assert tuple(int(w) for w in got) == expected
        arrays = philox.philox4x32_10(*(np.full(3, w, np.uint32) for w in counter + key))
        assert all(a.dtype == np.uint32 and (a == e).all() for a, e in zip(arrays, expected))


@pytest.mark.parametrize("kind", KINDS)
def test_njit_matches_reference_bit_for_bit(cpu_fns, kind):
    rng = np.random.default_rng(1)
    index = _indices(50_000, rng)
    run = _runner(cpu_fns[kind], kind)
    for seed, stream, draw in STATES:
        ref = philox.reference(seed, stream, index, draw, kind, LO, HI)
        out = np.empty_like(ref)
        run(np.uint64(seed), np.uint64(stream), index, np.uint32(draw), out)
        assert out.dtype == ref.dtype == {"f64": np.float64, "f32": np.float32}.get(kind[-3:], np.int64)
        np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))


def test_inputs_change_the_numbers():
    index = np.arange(10_000, dtype=np.uint64)
    base = philox.reference(1, 2, index, 3, "uniform_f64")
    for seed, stream, draw in [(2, 2, 3), (1, 3, 3), (1, 2, 4), (1, 2 + (1 << 32), 3), (1 + (1 << 32), 2, 3)]:
        assert (philox.reference(seed, stream, index, draw, "uniform_f64") != base).all()
    assert (philox.reference(1, 2, index + np.uint64(1 << 32), 3, "uniform_f64") != base).all()


def _normal_cdf(x):
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(x) / math.sqrt(2.0)))


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_moments(dtype):
    index = np.arange(1_000_000, dtype=np.uint64)
    u = philox.reference(2024, 11, index, 0, f"uniform_{dtype}").astype(np.float64)
    assert abs(u.mean() - 0.5) < 0.002 and abs(u.var() - 1 / 12) < 5e-4
    assert u.min() >= 0.0 and u.max() < 1.0
    counts = np.bincount((u * 100).astype(np.int64), minlength=100)
    assert ((counts - 10_000) ** 2 / 10_000).sum() < 99 + 6 * math.sqrt(2 * 99)  # chi-square, 99 dof

    z = philox.reference(2024, 11, index, 1, f"normal_{dtype}").astype(np.float64)
    assert np.isfinite(z).all() and np.abs(z).max() < 9.5
    assert abs(z.mean()) < 0.005 and abs(z.var() - 1.0) < 0.01
    assert abs((z**3).mean()) < 0.02 and abs((z**4).mean() - 3.0) < 0.05
    edges = np.concatenate([[-np.inf], np.linspace(-4, 4, 81), [np.inf]])
    expected = np.diff(_normal_cdf(edges)) * z.size
    counts = np.histogram(z, edges)[0]
    assert ((counts - expected) ** 2 / expected).sum() < 81 + 6 * math.sqrt(2 * 81)  # chi-square, 81 dof


def test_randint_uniform_over_range():
    index = np.arange(1_000_000, dtype=np.uint64)
    k = philox.reference(7, 0, index, 2, "randint", LO, HI)
    assert k.dtype == np.int64 and k.min() == LO and k.max() == HI - 1
    counts = np.bincount(k - LO, minlength=HI - LO)
    expected = k.size / (HI - LO)
    assert ((counts - expected) ** 2 / expected).sum() < 7 + 6 * math.sqrt(2 * 7)  # chi-square, 7 dof
    for lo, hi in [(-(2**63), 2**63 - 1), (-(2**62), 2**62), (10**18, 10**18 + 3), (5, 6), (-1, 0)]:
        k = philox.reference(7, 0, index[:100_000], 2, "randint", lo, hi)
        assert lo <= k.min() and k.max() < hi
        offset = (k.view(np.uint64) - np.array(lo, np.int64).view(np.uint64)).astype(np.float64)  # k - lo
        assert abs(offset.mean() - (hi - lo - 1) / 2) < 0.01 * (hi - lo)


def _edge_block(seed, stream, index, draw):
    """Stand-in for _block: every word is `seed` (to reach the extreme words)."""
    w = np.uint64(seed)
    return w, w, w, w


@pytest.mark.parametrize("word", [0, 1, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF])
def test_extreme_words(monkeypatch, word):
    """All-zero / all-one Philox words: uniforms stay below 1 (the f32 one too), normals are
    finite (u1 > 0, no log 0) and within sqrt(128 ln 2) = 9.42, randint stays in range."""
    monkeypatch.setattr(philox, "_block", _edge_block)
    compiled = philox.bind(numba.njit)
    s, x = np.uint64(word), (word << 32) | word
    for fns in (vars(philox), compiled):  # NumPy scalars, njit
        with np.errstate(over="ignore"):
            assert 0.0 <= fns["uniform_f64"](s, s, s, s) == (x >> 11) * 2.0**-53 < 1.0
            f32 = fns["uniform_f32"](s, s, s, s)
            assert isinstance(f32, np.float32 | float) and 0.0 <= f32 < np.float32(1.0)
            for name in ("normal_f64", "normal_f32"):
                z = fns[name](s, s, s, s)
                assert math.isfinite(z) and abs(z) < 9.43
            assert LO <= fns["randint"](LO, HI, s, s, s, s) < HI
    assert compiled["uniform_f32"](np.uint64(0xFFFFFFFF), s, s, s) == np.float32(1 - 2.0**-24)


def test_loop_index(cpu_fns):
    rng = np.random.default_rng(3)
    i = [rng.integers(-(2**40), 2**40, 1000) for _ in range(3)]
    ref = philox.loop_index(*i)
    assert ref.dtype == np.uint64
    assert [cpu_fns["loop_index"](*(int(v[k]) for v in i)) for k in range(1000)] == [int(r) for r in ref]
    assert (philox.loop_index(np.arange(10), 0, 0) == np.arange(10, dtype=np.uint64)).all()
    shapes = [(1 << 22,), (2048, 2048), (3, 1 << 20), (1 << 20, 3), (160, 160, 160), (1 << 18, 3, 3), (3, 3, 1 << 18),
              (7, 1 << 17, 5)]
    for shape in shapes:
        grids = np.meshgrid(*(np.arange(n, dtype=np.int64) - n // 2 for n in shape), indexing="ij")
        ids = philox.loop_index(*(g.ravel() for g in grids), *([0] * (3 - len(shape))))
        ids.sort()
        assert (ids[1:] != ids[:-1]).all(), shape


def test_golden_multiples_stay_far_from_zero():
    """What loop_index (2-D) and the key's stream mixing rely on: |G d mod 2**64| >= 2**62 / d."""
    d = np.arange(1, 1 << 20, dtype=np.uint64)
    with np.errstate(over="ignore"):
        v = np.abs((d * philox.GOLDEN).view(np.int64).astype(np.float64))
    assert (v * d.astype(np.float64) >= 2.0**62).all()


def _cuda_compile_or_skip():
    try:
        from numba import cuda

        from qgraph.compiler.numba_adapter import assumed_compute_capability

        with assumed_compute_capability((9, 0)):
            fns = philox.bind(cuda.jit(device=True))
            cuda.compile_ptx(fns["loop_index"].py_func, (numba.int64,) * 3, device=True, cc=(9, 0))
    except Exception as e:  # no NVVM / libdevice: nothing to compile with
        pytest.skip(f"numba.cuda cannot compile here: {e}")
    return cuda, fns, assumed_compute_capability


def test_ptx_compiles_with_no_f64_in_f32_draws_and_no_fma():
    cuda, fns, assumed = _cuda_compile_or_skip()
    u64, u32, i64 = numba.uint64, numba.uint32, numba.int64
    sigs = {"philox4x32_10": (u32,) * 6, "uniform_f64": (u64, u64, u64, u32), "uniform_f32": (u64, u64, u64, u32),
            "normal_f64": (u64, u64, u64, u32), "normal_f32": (u64, u64, u64, u32),
            "randint": (i64, i64, u64, u64, u64, u32), "loop_index": (i64, i64, i64)}
    with assumed((9, 0)):
        for name, sig in sigs.items():
            ptx, _ = cuda.compile_ptx(fns[name].py_func, sig, device=True, cc=(9, 0))
            code = [line.strip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith(".")]
            assert not [line for line in code if line.startswith(("call", "fma")) or ".local" in line], name
            if not name.endswith("f64"):
                assert not [line for line in code if ".f64" in line], name


@pytest.mark.cuda
def test_cuda_matches_reference_bit_for_bit():
    from numba import cuda

    if not cuda.is_available():
        if os.environ.get("QGRAPH_REQUIRE_CUDA") == "1":
            pytest.fail("QGRAPH_REQUIRE_CUDA=1 but numba.cuda finds no GPU")
        pytest.skip("no CUDA GPU")
    fns = philox.bind(cuda.jit(device=True))
    uf64, uf32, nf64, nf32, rint = (fns[k] for k in KINDS)
    loop_index = fns["loop_index"]

    @cuda.jit
    def kernel(seed, stream, draw, index, a, b, c, d, e, ids):
        i = cuda.grid(1)
        if i < index.size:
            a[i], b[i] = uf64(seed, stream, index[i], draw), uf32(seed, stream, index[i], draw)
            c[i], d[i] = nf64(seed, stream, index[i], draw), nf32(seed, stream, index[i], draw)
            e[i] = rint(LO, HI, seed, stream, index[i], draw)
            ids[i] = loop_index(i, i // 7 - 3, -i)

    index = _indices(200_000, np.random.default_rng(5))
    for seed, stream, draw in STATES:
        outs = [cuda.device_array(index.size, t) for t in (np.float64, np.float32, np.float64, np.float32, np.int64)]
        ids = cuda.device_array(index.size, np.uint64)
        kernel[(index.size + 255) // 256, 256](np.uint64(seed), np.uint64(stream), np.uint32(draw),
                                                cuda.to_device(index), *outs, ids)
        for kind, out in zip(KINDS, outs):
            ref = philox.reference(seed, stream, index, draw, kind, LO, HI)
            np.testing.assert_array_equal(out.copy_to_host().view(np.uint8), ref.view(np.uint8), err_msg=kind)
        i = np.arange(index.size, dtype=np.int64)
        np.testing.assert_array_equal(ids.copy_to_host(), philox.loop_index(i, i // 7 - 3, -i))
