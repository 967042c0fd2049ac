"""Counter-based random numbers: Philox4x32-10 and the draws kernels make from it.

Plain Python on fixed-width NumPy integers, compiled by numba for each backend
(compiler.random_functions), so a seed gives bit-identical numbers on the CPU and on CUDA;
`reference` computes the same numbers with NumPy arrays, for tests.

One draw is one Philox block. Its 64-bit key is the seed; its 128-bit counter holds the
draw number within the iteration (32 bits), the iteration (48 bits) and the stream
(48 bits: the kernel call's epoch and the task, see lang.flat.calls.random_prologue):

    c0 = draw, c1 = index[0:32], c2 = index[32:48] | stream[32:48] << 16, c3 = stream[0:32]
"""

from __future__ import annotations

import math

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)
_MASK16 = np.uint64(0xFFFF)
_S8, _S11, _S16, _S32 = np.uint64(8), np.uint64(11), np.uint64(16), np.uint64(32)
_F64_UNIT = np.float64(2.0 ** -53)
_F32_UNIT = np.float32(2.0 ** -24)
_ONE = np.uint64(1)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32 with 10 rounds (Random123's constants); 32-bit values held in uint64."""
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        c0, c1, c2, c3 = ((p1 >> _S32) ^ c1 ^ k0) & _MASK32, p1 & _MASK32, ((p0 >> _S32) ^ c3 ^ k1) & _MASK32, \
            p0 & _MASK32
        k0 = (k0 + _W0) & _MASK32
        k1 = (k1 + _W1) & _MASK32
    return c0, c1, c2, c3


def block(seed, stream, index, draw):
    """The four 32-bit words of one draw (see the module docstring for the counter)."""
    c2 = ((index >> _S32) & _MASK16) | (((stream >> _S32) & _MASK16) << _S16)
    return philox4x32_10(draw & _MASK32, index & _MASK32, c2, stream & _MASK32, seed & _MASK32, seed >> _S32)


def uniform_f64(seed, stream, index, draw):
    """Uniform in [0, 1): 53 random bits."""
    r0, r1, _, _ = block(seed, stream, index, draw)
    return np.float64(((r0 << _S32) | r1) >> _S11) * _F64_UNIT


def uniform_f32(seed, stream, index, draw):
    """Uniform in [0, 1) in float32: 24 random bits (never 1.0)."""
    r0, _, _, _ = block(seed, stream, index, draw)
    return np.float32(r0 >> _S8) * _F32_UNIT


def mul_rounded(a, b):
    """a * b, rounded on its own: each backend binds its own (on CUDA an explicit mul.rn,
    which is never fused into an FMA), so the normals below are bit-identical everywhere."""
    return a * b


_LN2_HI, _LN2_LO = np.float64(6.93147180369123816490e-01), np.float64(1.90821492927058770002e-10)
_SQRT_HALF = np.float64(0.70710678118654752440)
_ONE64, _TWO64, _M2_64 = np.float64(1.0), np.float64(2.0), np.float64(-2.0)
_UNIT52 = np.float64(2.0 ** -52)
_ONE32, _TWO32, _M2_32 = np.float32(1.0), np.float32(2.0), np.float32(-2.0)
_UNIT23 = np.float32(2.0 ** -23)
_SQRT_HALF32 = np.float32(0.70710678118654752440)
_LN2_32 = np.float32(0.69314718055994530942)


def _log64(s):
    """log(s) for s > 0 from +, -, *, / and frexp only (the same bits on every backend):
    log(m * 2**e) = e log 2 + 2 atanh((m - 1) / (m + 1)), m in [sqrt(1/2), sqrt(2))."""
    m, e = math.frexp(s)
    m = np.float64(m)
    if m < _SQRT_HALF:
        m = m + m
        e -= 1
    f = (m - _ONE64) / (m + _ONE64)
    z = mul_rounded(f, f)
    p = np.float64(1.0 / 21.0)
    p = np.float64(1.0 / 19.0) + mul_rounded(z, p)
    p = np.float64(1.0 / 17.0) + mul_rounded(z, p)
    p = np.float64(1.0 / 15.0) + mul_rounded(z, p)
    p = np.float64(1.0 / 13.0) + mul_rounded(z, p)
    p = np.float64(1.0 / 11.0) + mul_rounded(z, p)
    p = np.float64(1.0 / 9.0) + mul_rounded(z, p)
    p = np.float64(1.0 / 7.0) + mul_rounded(z, p)
    p = np.float64(1.0 / 5.0) + mul_rounded(z, p)
    p = np.float64(1.0 / 3.0) + mul_rounded(z, p)
    p = _ONE64 + mul_rounded(z, p)
    k = np.float64(e)
    return mul_rounded(k, _LN2_HI) + (mul_rounded(k, _LN2_LO) + mul_rounded(mul_rounded(_TWO64, f), p))


def _log32(s):
    """log(s) in float32 (see _log64)."""
    m, e = math.frexp(s)
    m = np.float32(m)
    if m < _SQRT_HALF32:
        m = m + m
        e -= 1
    f = (m - _ONE32) / (m + _ONE32)
    z = mul_rounded(f, f)
    p = np.float32(1.0 / 9.0)
    p = np.float32(1.0 / 7.0) + mul_rounded(z, p)
    p = np.float32(1.0 / 5.0) + mul_rounded(z, p)
    p = np.float32(1.0 / 3.0) + mul_rounded(z, p)
    p = _ONE32 + mul_rounded(z, p)
    return mul_rounded(np.float32(e), _LN2_32) + mul_rounded(mul_rounded(_TWO32, f), p)


def normal_f64(seed, stream, index, draw):
    """Standard normal: Marsaglia's polar method (no sine or cosine), a rejected pair taking
    the next Philox block of the same counter."""
    r0, r1, r2, r3 = block(seed, stream, index, draw)
    while True:
        v1 = np.float64(((r0 << _S32) | r1) >> _S11) * _UNIT52 - _ONE64
        v2 = np.float64(((r2 << _S32) | r3) >> _S11) * _UNIT52 - _ONE64
        s = mul_rounded(v1, v1) + mul_rounded(v2, v2)
        if s < _ONE64 and s > np.float64(0.0):
            return mul_rounded(v1, math.sqrt(mul_rounded(_M2_64, _log64(s)) / s))
        r0, r1, r2, r3 = philox4x32_10(r0, r1, r2, r3, seed & _MASK32, seed >> _S32)


def normal_f32(seed, stream, index, draw):
    """Standard normal in float32 (see normal_f64)."""
    r0, r1, r2, r3 = block(seed, stream, index, draw)
    while True:
        v1 = np.float32(r0 >> _S8) * _UNIT23 - _ONE32
        v2 = np.float32(r1 >> _S8) * _UNIT23 - _ONE32
        s = mul_rounded(v1, v1) + mul_rounded(v2, v2)
        if s < _ONE32 and s > np.float32(0.0):
            return mul_rounded(v1, math.sqrt(mul_rounded(_M2_32, _log32(s)) / s))
        r0, r1, r2, r3 = philox4x32_10(r0, r1, r2, r3, seed & _MASK32, seed >> _S32)


def rand_int(lo, hi, seed, stream, index, draw):
    """An int64 in [lo, hi): 64 random bits modulo the span (bias below span / 2**64)."""
    r0, r1, _, _ = block(seed, stream, index, draw)
    span = np.uint64(hi - lo)
    if span == np.uint64(0):
        return np.int64(lo)
    return np.int64(lo) + np.int64(((r0 << _S32) | r1) % span)


FUNCTIONS = {"_qg_rand_uniform_f64": uniform_f64, "_qg_rand_uniform_f32": uniform_f32,
             "_qg_rand_normal_f64": normal_f64, "_qg_rand_normal_f32": normal_f32, "_qg_rand_int": rand_int}
"""The names generated code calls (lang.flat.calls.RANDOM_FUNCTIONS) and what they are."""


# --------------------------------------------------------------------------- NumPy reference


def loop_index(*indices) -> np.ndarray:
    """The iteration id of loop indices, as the generated code computes it: exact for 1-D
    loops below 2**48 iterations, 2-D loops with both extents below 2**24 and 3-D loops
    with all extents below 2**16."""
    i = [np.asarray(k, np.int64).astype(np.uint64) for k in indices]
    if len(i) == 1:
        return i[0]
    if len(i) == 2:
        return (i[0] << np.uint64(24)) | (i[1] & np.uint64(0xFFFFFF))
    return (i[0] << np.uint64(32)) | ((i[1] & _MASK16) << _S16) | (i[2] & _MASK16)


def reference(seed: int, stream: int, index, draw: int, kind: str, lo: int = 0, hi: int = 1) -> np.ndarray:
    """The numbers the kernels draw, for an array of iteration ids (NumPy, vectorised)."""
    index = np.asarray(index).astype(np.uint64)
    n = index.shape
    full = [np.full(n, np.uint64(v), np.uint64) for v in (seed, stream, draw)]
    seed_a, stream_a, draw_a = full
    with np.errstate(over="ignore"):
        r0, r1, r2, r3 = block(seed_a, stream_a, index, draw_a)
    if kind == "uniform_f64":
        return (((r0 << _S32) | r1) >> _S11).astype(np.float64) * _F64_UNIT
    if kind == "uniform_f32":
        return (r0 >> _S8).astype(np.float32) * _F32_UNIT
    if kind in ("normal_f64", "normal_f32"):  # a rejection loop: element by element, in plain Python
        fn = normal_f64 if kind == "normal_f64" else normal_f32
        out = [fn(np.uint64(seed), np.uint64(stream), i, np.uint64(draw)) for i in index.ravel()]
        return np.array(out, np.float64 if kind == "normal_f64" else np.float32).reshape(n)
    if kind == "randint":
        span = np.uint64(hi - lo)
        return np.int64(lo) + (((r0 << _S32) | r1) % span).astype(np.int64)
    raise ValueError(f"unknown kind {kind!r}")
