"""Philox4x32-10 and the draws kernels make from it, bit-identical on the CPU, on CUDA and in NumPy.

Plain Python on NumPy fixed-width integers: compiled by `numba.njit`, by
`numba.cuda.jit(device=True)` (see `bind`, which gives each target copies calling that
target's compiled callees) and run as is on NumPy arrays (`reference`).

Mapping of a draw onto Philox (one draw = one block of four 32-bit words):

    counter = (draw, stream[0:32], index[0:32], index[32:64])
    key     = seed + GOLDEN * stream[32:64]   (mod 2**64; k0 = low word, k1 = high word)

Distinct counters under one key are independent; the whole iteration id and the low half of
the stream are in the counter, so only the stream's high half shares the key with the seed.
Two inputs collide only if seed - seed' == GOLDEN * (h' - h) mod 2**64 (h = stream >> 32):
never while |seed - seed'| * |h - h'| < 2**54 (GOLDEN is 2**64 / golden ratio, whose
multiples stay far from 0 mod 2**64).

Every float result is built from integers by correctly rounded single operations: int to
float conversions, multiplies by powers of two, one sqrt and one final multiply. Logarithm,
sine and cosine are computed in fixed point, so there is no floating multiply-add that NVVM
could contract into an FMA (it does by default) and no libm/libdevice function whose last bit
differs between targets. The f32 draws use float32 only (no f64 instruction in their PTX).
"""

from __future__ import annotations

import math
import types
from decimal import Decimal, localcontext

import numpy as np

_U = np.uint64
_0, _1, _2 = _U(0), _U(1), _U(2)
_S6, _S8, _S11, _S32, _S64 = _U(6), _U(8), _U(11), _U(32), _U(64)
_MASK32 = _U(0xFFFFFFFF)
_M0, _M1 = _U(0xD2511F53), _U(0xCD9E8D57)
_W0, _W1 = _U(0x9E3779B9), _U(0xBB67AE85)
GOLDEN = _U(0x9E3779B97F4A7C15)  # round(2**64 / phi), odd
PLASTIC = _U(0x91E10DA5C79E7B1D)  # round(2**64 / rho**2) | 1, rho the plastic number (x**3 = x + 1)
_CLZ_STEPS = (_U(32), _U(16), _U(8), _U(4), _U(2), _U(1))
_F64_UNIT = np.float64(2.0**-53)
_F32_UNIT = np.float32(2.0**-24)


def _q63_tables():
    """Fixed-point constants, rounded to 63 fraction bits (computed to 50 digits)."""
    with localcontext() as ctx:
        ctx.prec = 50
        one = Decimal(2) ** 63

        def q(x):
            return _U(int((x * one).to_integral_value()))

        ln1p = tuple(q((1 + Decimal(2) ** -j).ln()) for j in range(1, 17))  # ln(1 + 2**-j)
        recip = tuple(q(Decimal(1) / k) for k in range(2, 6))  # 1/2, 1/3, 1/4, 1/5
        sin = tuple(q(Decimal(1) / math.factorial(2 * k + 1)) for k in range(10))
        cos = tuple(q(Decimal(1) / math.factorial(2 * k)) for k in range(10))
        pi_q62 = q(Decimal("3.14159265358979323846264338327950288419716939937510") / 2)
        return ln1p, recip, sin, cos, q(Decimal(2).ln()), pi_q62


_LN1P, _RECIP, _SIN, _COS, _LN2, _PI_Q62 = _q63_tables()

# Precision of the fixed-point normals: fraction bits, log shift-add steps, log series terms, sin/cos terms.
_F64_FRAC, _F64_STEPS, _F64_TERMS, _F64_TRIG = _U(63), _U(16), _U(3), _U(10)
_F32_FRAC, _F32_STEPS, _F32_TERMS, _F32_TRIG = _U(31), _U(8), _U(2), _U(6)


# --------------------------------------------------------------------------- Philox4x32-10


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32 with 10 rounds (Random123's constants): four uint32 from a 128-bit counter
    and a 64-bit key, each given as four / two 32-bit words (any integer type)."""
    c0, c1, c2, c3 = np.uint32(_U(c0) & _MASK32), np.uint32(_U(c1) & _MASK32), np.uint32(_U(c2) & _MASK32), \
        np.uint32(_U(c3) & _MASK32)
    k0, k1 = _U(k0) & _MASK32, _U(k1) & _MASK32
    for _ in range(10):
        p0 = _M0 * _U(c0)  # 32 x 32 -> 64 bits from uint32 words: one mul.wide.u32 on CUDA
        p1 = _M1 * _U(c2)
        c0, c1, c2, c3 = np.uint32((p1 >> _S32) ^ _U(c1) ^ k0), np.uint32(p1 & _MASK32), \
            np.uint32((p0 >> _S32) ^ _U(c3) ^ k1), np.uint32(p0 & _MASK32)
        k0 = (k0 + _W0) & _MASK32
        k1 = (k1 + _W1) & _MASK32
    return c0, c1, c2, c3


def _block(seed, stream, index, draw):
    """The Philox block of one draw (the mapping in the module docstring), as four uint64."""
    seed, stream, index = _U(seed), _U(stream), _U(index)
    key = seed + GOLDEN * (stream >> _S32)
    r0, r1, r2, r3 = philox4x32_10(_U(draw), stream, index, index >> _S32, key, key >> _S32)
    return _U(r0), _U(r1), _U(r2), _U(r3)


def loop_index(i0, i1, i2):
    """The uint64 iteration id of up to three int64 loop indices (pass 0 for absent ones):
    i0 + GOLDEN * i1 + PLASTIC * i2 mod 2**64. One index gives i0 itself; two are distinct
    for all extents with E0 * E1 <= 2**54, three for all extents with E0 * E1 * E2 <= 2**50
    (a rank-1 lattice with golden-ratio / plastic-number multipliers; checked by lattice
    reduction), whatever the loops' shapes and offsets."""
    return _U(np.int64(i0)) + GOLDEN * _U(np.int64(i1)) + PLASTIC * _U(np.int64(i2))


# --------------------------------------------------------------------------- fixed point


def _mulhi(a, b):
    """floor(a * b / 2**64) for uint64 a, b (four 32 x 32 -> 64 products)."""
    a0, a1, b0, b1 = a & _MASK32, a >> _S32, b & _MASK32, b >> _S32
    p01, p10 = a0 * b1, a1 * b0
    mid = ((a0 * b0) >> _S32) + (p01 & _MASK32) + (p10 & _MASK32)
    return a1 * b1 + (p01 >> _S32) + (p10 >> _S32) + (mid >> _S32)


def _mulq(a, b, frac):
    """floor(a * b / 2**frac), frac < 64, for a result below 2**64; with frac <= 32 the
    operands are below 2**32 and one 64-bit product does."""
    if frac <= _S32:
        return (a * b) >> frac
    return (_mulhi(a, b) << (_S64 - frac)) | ((a * b) >> frac)


def _select(a, b, take_a):
    """take_a (0 or 1, uint64) ? a : b, without a branch (works on scalars and arrays)."""
    return b ^ ((a ^ b) & (_0 - take_a))


def _neg_log(x, frac, steps, terms):
    """-ln(u) for u = (x | 1) / 2**64 in (0, 1), as (n, acc): -ln u = n ln 2 + acc / 2**frac.

    u = m 2**-n with m in [1/2, 1) (n = leading zeros); -ln m by multiplicative normalization
    (m *= 1 + 2**-j whenever that stays below 1, adding ln(1 + 2**-j), j = 1..steps, shifts
    and adds only), then the rest -ln(1 - y) = y + y**2/2 + ... (y < 2**-steps) to y**(terms + 1).
    Absolute error below (steps + terms + 2) * 2**-frac (truncations; the series' tail is smaller)."""
    m = x | _1
    n = _0
    for s in _CLZ_STEPS:
        shift = _U((m >> (_S64 - s)) == _0) * s
        m = m << shift
        n = n + shift
    m = m >> (_S64 - frac)  # [1/2, 1) with `frac` fraction bits
    one = _1 << frac
    drop = _U(63) - frac
    acc = _0
    for j in range(steps):
        d = m >> (_U(j) + _1)
        take = _0 - _U(m + d < one)  # all ones or zero
        m = m + (d & take)
        acc = acc + ((_LN1P[j] >> drop) & take)
    y = one - m
    h = _RECIP[terms - _1] >> drop
    for i in range(terms - _1):
        h = (_RECIP[terms - _2 - _U(i)] >> drop) + _mulq(y, h, frac)
    return n, acc + y + _mulq(y, _mulq(y, h, frac), frac)


def _two_neg_log(x, frac, steps, terms):
    """-2 ln u (u as in _neg_log) as (t, scale_up): -2 ln u = t * 2**(1 - frac) * 2**(6 scale_up),
    t < 2**frac: t holds acc when n = 0 and n ln 2 + acc to frac - 6 bits otherwise."""
    n, acc = _neg_log(x, frac, steps, terms)
    up = _U(n != _0)
    t = n * (_LN2 >> (_U(69) - frac)) + (acc >> (_S6 * up))
    return t, up


def _cos_turn(a, frac, terms):
    """cos(2 pi a / 2**(frac + 1)) for an integer angle a (frac + 1 bits) as (mag, neg):
    |cos| = mag / 2**frac, negative when neg. Octant reduction is exact on the integer; the
    reduced angle x <= pi/4 goes through a `terms`-term sine or cosine series in fixed point.
    Absolute error below (terms + 3) * 2**-frac."""
    quarter = frac - _1
    q = a >> quarter  # quadrant
    f = a & ((_1 << quarter) - _1)
    o = f >> (quarter - _1)  # second half of the quadrant: use the complement angle
    g = _select((_1 << quarter) - f, f, o)
    x = _mulq(g, _PI_Q62 >> (_U(63) - frac), quarter)  # radians, `frac` fraction bits
    z = _mulq(x, x, frac)
    use_sin = (q & _1) ^ o
    drop = _U(63) - frac
    p = _select(_SIN[terms - _1], _COS[terms - _1], use_sin) >> drop
    for i in range(terms - _1):
        k = terms - _2 - _U(i)
        p = (_select(_SIN[k], _COS[k], use_sin) >> drop) - _mulq(z, p, frac)
    mag = _mulq(_select(x, _1 << frac, use_sin), p, frac)
    return mag, (q >> _1) ^ (q & _1)


def _normal_parts_f64(seed, stream, index, draw):
    """The integers of a float64 normal: -2 ln u1 from words 0-1, the angle from words 2-3."""
    r0, r1, r2, r3 = _block(seed, stream, index, draw)
    t, up = _two_neg_log((r0 << _S32) | r1, _F64_FRAC, _F64_STEPS, _F64_TERMS)
    mag, neg = _cos_turn((r2 << _S32) | r3, _F64_FRAC, _F64_TRIG)
    scale = np.float64(2.0**-62) * np.float64(_1 << (_S6 * up))
    sign = np.float64(np.int64(1) - np.int64(2) * np.int64(neg))
    return np.float64(np.int64(t)) * scale, np.float64(mag) * np.float64(2.0**-63) * sign


def _normal_parts_f32(seed, stream, index, draw):
    """_normal_parts_f64 at 31 fraction bits, in float32 (u1 still from 64 bits: tails to 9.42)."""
    r0, r1, r2, r3 = _block(seed, stream, index, draw)
    t, up = _two_neg_log((r0 << _S32) | r1, _F32_FRAC, _F32_STEPS, _F32_TERMS)
    mag, neg = _cos_turn(r2, _F32_FRAC, _F32_TRIG)
    scale = np.float32(2.0**-30) * np.float32(_1 << (_S6 * up))
    sign = np.float32(np.int64(1) - np.int64(2) * np.int64(neg))
    return np.float32(np.int64(t)) * scale, np.float32(mag) * np.float32(2.0**-31) * sign


# --------------------------------------------------------------------------- draws


def uniform_f64(seed, stream, index, draw):
    """Uniform float64 in [0, 1): 53 random bits, k * 2**-53."""
    r0, r1, _, _ = _block(seed, stream, index, draw)
    return np.float64(((r0 << _S32) | r1) >> _S11) * _F64_UNIT


def uniform_f32(seed, stream, index, draw):
    """Uniform float32 in [0, 1): 24 random bits, k * 2**-24 (at most 1 - 2**-24, never 1.0)."""
    r0, _, _, _ = _block(seed, stream, index, draw)
    return np.float32(r0 >> _S8) * _F32_UNIT


def normal_f64(seed, stream, index, draw):
    """Standard normal float64, Box-Muller from one block: sqrt(-2 ln u1) cos(2 pi u2) with
    u1 = (64 random bits | 1) / 2**64 > 0 (never log 0; |z| <= sqrt(128 ln 2) = 9.42) and a
    64-bit angle. Fixed point: -2 ln u1 to a relative 2**-56 (u1 < 1/2) or an absolute 2**-59,
    cos to 2**-62; the result is within 6e-16 of the exact value (measured), about 1 ulp."""
    two_t, c = _normal_parts_f64(seed, stream, index, draw)
    return math.sqrt(two_t) * c


def normal_f32(seed, stream, index, draw):
    """Standard normal float32 (as normal_f64, u1 still from 64 bits, a 32-bit angle; fixed point
    at 31 bits: -2 ln u1 to a relative 2**-23, cos to 2**-30; within 3.5e-7 of exact, measured)."""
    two_t, c = _normal_parts_f32(seed, stream, index, draw)
    return math.sqrt(two_t) * c


def randint(lo, hi, seed, stream, index, draw):
    """An int64 uniform in [lo, hi) for int64 lo < hi (lo when lo == hi): lo + floor(x * span
    / 2**64) with 64 random bits x (multiply-high, no rejection). Each value has probability
    floor or ceil of 2**64 / span over 2**64: relative bias below span / 2**64."""
    r0, r1, _, _ = _block(seed, stream, index, draw)
    lo_u = _U(np.int64(lo))
    return np.int64(lo_u + _mulhi((r0 << _S32) | r1, _U(np.int64(hi)) - lo_u))


DRAWS = ("uniform_f64", "uniform_f32", "normal_f64", "normal_f32", "randint", "loop_index", "philox4x32_10")
"""The functions generated code calls; `bind` compiles them with their callees."""
_CALLEES = ("philox4x32_10", "_block", "_mulhi", "_mulq", "_select", "_neg_log", "_two_neg_log", "_cos_turn",
            "_normal_parts_f64", "_normal_parts_f32")


def bind(jit) -> dict:
    """name -> jit(copy of the function) for each name in DRAWS, `jit` being e.g. numba.njit or
    numba.cuda.jit(device=True). The copies' globals hold the compiled callees (callees first),
    as numba calls only compiled functions; the module's own functions stay plain Python."""
    namespace = dict(globals())
    compiled = {}
    for name in _CALLEES + DRAWS:
        if name not in compiled:
            f = globals()[name]
            compiled[name] = namespace[name] = jit(types.FunctionType(f.__code__, namespace, name, f.__defaults__))
    return {name: compiled[name] for name in DRAWS}


# --------------------------------------------------------------------------- NumPy reference


def reference(seed: int, stream: int, index, draw: int, kind: str, lo: int = 0, hi: int = 1) -> np.ndarray:
    """The numbers the compiled draws give, for an array of iteration ids (vectorised NumPy,
    the same source run on arrays). kind: uniform_f64, uniform_f32, normal_f64, normal_f32 or
    randint (with lo, hi)."""
    index = np.asarray(index).astype(np.uint64)
    seed_u, stream_u, draw_u = (np.full(index.shape, v, np.uint64) for v in (seed, stream, draw))
    with np.errstate(over="ignore"):
        if kind == "uniform_f64":
            return uniform_f64(seed_u, stream_u, index, draw_u)
        if kind == "uniform_f32":
            return uniform_f32(seed_u, stream_u, index, draw_u)
        if kind in ("normal_f64", "normal_f32"):
            parts = _normal_parts_f64 if kind == "normal_f64" else _normal_parts_f32
            two_t, c = parts(seed_u, stream_u, index, draw_u)
            return np.sqrt(two_t) * c
        if kind == "randint":
            lo_a, hi_a = np.full(index.shape, lo, np.int64), np.full(index.shape, hi, np.int64)
            return randint(lo_a, hi_a, seed_u, stream_u, index, draw_u)
    raise ValueError(f"unknown kind {kind!r}")
