"""Index expressions computed in 32 bits on CUDA (lang.cuda.index_ranges): clamps, wraps, flips
and products of loop variables, literals and shapes give NumPy's values on every backend, and
values that do not fit 32 bits (scalar arguments) keep 64-bit arithmetic. The ranges and the
postfix programs are checked without a device against Python's own evaluation."""

from __future__ import annotations

import ast
import random

import numpy as np
from helpers.index_kernels import clamped_locals, clamped_sweep, offset_rows, wrapped
from helpers.numeric import call

from qgraph.args.kinds import array_sig
from qgraph.compiler import cuda_program
from qgraph.lang.cuda.index_ranges import INT32_MAX, INT32_MIN, IndexRanges, Program32
from qgraph.lang.front.regions import Dim, Task
from qgraph.lang.types.extents import MAX_EXTENT


def test_a_clamped_stencil_matches_numpy(arch):
    rng = np.random.default_rng(11)
    p, div = rng.random((37, 70), dtype=np.float32), rng.random((37, 70), dtype=np.float32)
    p_new = np.zeros_like(p)
    call(clamped_sweep, p, p_new, div)
    q = np.pad(p, 1, mode="edge")
    expected = np.float32(0.25) * (q[:-2, 1:-1] + q[2:, 1:-1] + q[1:-1, :-2] + q[1:-1, 2:] - div)
    np.testing.assert_allclose(p_new, expected, rtol=1e-6)


def test_negative_indices_wrap_as_python_and_clamps_flips_and_products_match_numpy(arch):
    rng = np.random.default_rng(12)
    u, x, v = rng.random((9, 13)), rng.random(11), rng.random((4, 5, 6))
    out, flipped, out1, out3 = np.zeros_like(u), np.zeros_like(u), np.zeros_like(x), np.zeros_like(v)
    odd = np.zeros((4, 13))
    call(wrapped, u, x, v, out, flipped, out1, out3, odd)
    np.testing.assert_array_equal(odd, u[1:9:2])
    left = u[:, np.maximum(np.arange(13) - 1, 0)]
    np.testing.assert_allclose(out, np.roll(u, (1, 2), axis=(0, 1)) + 2 * u[::-1] + 3 * left + 5 * u[-1], rtol=1e-15)
    np.testing.assert_array_equal(flipped, u[::-1])
    n = np.arange(11)
    np.testing.assert_allclose(out1, np.roll(x, 1) + 2 * x[np.minimum(n + 1, 10)] + 3 * x[np.maximum(n - 2, 0)])
    a, b, c = np.indices(v.shape)
    expected3 = v[np.maximum(a - 1, 0), b, (c - 1) % 6] + 2 * v[a, np.minimum(b + 1, 4), 5 - c]
    np.testing.assert_allclose(out3, expected3, rtol=1e-15)


def test_clamps_held_in_locals_match_numpy(arch):
    p = np.random.default_rng(14).random((7, 6))
    out, out2 = np.zeros_like(p), np.zeros_like(p)
    call(clamped_locals, p, out, out2)
    i, j = np.indices(p.shape)
    ip = np.minimum(i + 1, 6)
    expected = p[ip, j] + 2 * p[np.maximum(i - 1, 0), (j - 1) % 6] + 3 * p[ip, ip % 3] + 5 * (j - 1)
    np.testing.assert_allclose(out, expected, rtol=1e-15)
    np.testing.assert_array_equal(out2, p[ip, j])


def test_indices_past_32_bits_keep_64_bit_arithmetic(arch):
    """i + 2**32 clamps to the last row; computed in 32 bits it would be row i."""
    u = np.random.default_rng(13).random((6, 5))
    out = np.zeros_like(u)
    call(offset_rows, u, out, (1 << 32) + 1)
    np.testing.assert_allclose(out, np.broadcast_to(u[-1], u.shape) + 2 * u[0, 1], rtol=1e-15)


# ---------------------------------------------------------------- ranges and programs, no device


def _task(*stops: str, starts: tuple = ()) -> Task:
    """A parallel task over `stops` (and `starts`, None for 0) with loop variables i, j, k."""
    starts = starts or (None,) * len(stops)
    dims = tuple(Dim(None if start is None else _expr(start), _expr(stop)) for stop, start in zip(stops, starts))
    return Task(0, True, 1, [ast.Pass()], ("i", "j", "k")[:len(stops)], dims)


def _expr(text: str) -> ast.expr:
    """`text` with min and max spelled as the generated code does (lang.lower.math_calls)."""
    return ast.parse(text.replace("min(", "_qg_min(").replace("max(", "_qg_max("), mode="eval").body


def test_ranges_follow_loop_starts_stops_and_the_shapes_that_stop_them():
    task = _task("a.shape[0]", "b.shape[1] - 1", starts=(None, "2"))
    ranges = IndexRanges.of_task(task, {"a": 2, "b": 2})
    assert ranges.loops == {"i": (0, MAX_EXTENT - 1), "j": (2, MAX_EXTENT - 2)}
    assert ranges.visit(_expr("min(i + 1, a.shape[0] - 1)")) == (0, MAX_EXTENT - 1)  # i runs: a.shape[0] >= 1
    assert ranges.visit(_expr("b.shape[1] - 1")) == (3, MAX_EXTENT - 1)  # j runs from 2: b.shape[1] >= 4
    assert ranges.visit(_expr("max(i - 1, 0)")) == (0, MAX_EXTENT - 2)
    assert ranges.visit(_expr("i - 1")) == (-1, MAX_EXTENT - 2)
    assert ranges.visit(_expr(f"i + {INT32_MAX - MAX_EXTENT + 1}")) == (INT32_MAX - MAX_EXTENT + 1, INT32_MAX)
    for unknown in ("i + n", "a.shape[0] * a.shape[1]", "c.shape[0]", "a.shape[2]", "i // 2", "i + 1.0",
                    f"i + {INT32_MAX - MAX_EXTENT + 2}"):
        assert ranges.visit(_expr(unknown)) is None, unknown
    assert ranges.counts_fit(task)
    assert not ranges.counts_fit(_task("a.shape[0]", "n"))
    assert not ranges.counts_fit(_task("a.shape[0]", "a.shape[1] - a.shape[0]", starts=(None, "0 - a.shape[1]")))


def _int32(value: int) -> int:
    return (value - INT32_MIN) % (1 << 32) + INT32_MIN


def _run(program: str, leaves: list[int], extent: int) -> int:
    """The postfix program as compiler.numba_addressing lowers it: every step in int32."""
    stack: list[int] = []
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "min": min, "max": max}
    for token in program.split():
        if token[0] == "a":
            stack.append(_int32(leaves[int(token[1:])]))
        elif token == "w":
            value = stack.pop()
            stack.append(value + extent if value < 0 else value)
        elif token == "neg":
            stack.append(_int32(-stack.pop()))
        elif token in ops:
            b, a = stack.pop(), stack.pop()
            stack.append(_int32(ops[token](a, b)))
        else:
            stack.append(int(token))
    (value,) = stack
    return value


# (index expression, the axis of `a` it indexes)
_EXPRESSIONS = [("min(i + 1, a.shape[0] - 1)", 0), ("max(i - 1, 0)", 0), ("i - 1", 0), ("a.shape[1] - 1 - j", 1),
                ("-1 - j", 1), ("-1 * i + a.shape[0] - 1", 0), ("min(max(j - 3, 0), a.shape[1] - 2)", 1),
                ("i - a.shape[0]", 0)]


def test_programs_give_python_values_at_the_ends_of_their_ranges():
    """Each program, run in int32 at loop values and extents up to MAX_EXTENT, is the exact value
    (no step overflows), wrapped by the extent where it may be negative, as Python indexes."""
    ranges = IndexRanges.of_task(_task("a.shape[0]", "a.shape[1]"), {"a": 2})
    rng = random.Random(7)
    for text, axis in _EXPRESSIONS:
        expr = _expr(text)
        program = Program32(ranges)
        code = program.dimension(expr)
        assert program.narrowed == 1, text
        for _ in range(300):
            shape = tuple(rng.choice([1, 2, MAX_EXTENT, rng.randint(1, MAX_EXTENT)]) for _ in range(2))
            env = {"i": rng.choice([0, shape[0] - 1, rng.randrange(shape[0])]),
                   "j": rng.choice([0, shape[1] - 1, rng.randrange(shape[1])]),
                   "a": type("A", (), {"shape": shape}), "_qg_min": min, "_qg_max": max}
            values = [eval(compile(ast.Expression(leaf), "<leaf>", "eval"), env) for leaf in program.leaves]
            exact = eval(compile(ast.Expression(expr), "<expr>", "eval"), env)
            assert exact >= 0 or code.endswith(" w"), text
            expected = exact + shape[axis] if exact < 0 else exact
            assert _run(code, values, shape[axis]) == expected, (text, env["i"], env["j"], shape)


def test_an_index_of_unknown_range_is_one_64_bit_leaf():
    program = Program32(IndexRanges.of_task(_task("a.shape[0]"), {"a": 1}))
    assert program.dimension(_expr("min(i + n, 5)")) == "o0" and program.narrowed == 0


def test_a_local_assigned_once_is_a_32_bit_leaf_and_one_assigned_twice_is_not():
    """The CUDA task's generated subscripts (lang.cuda.addressing), without a device."""
    a = array_sig(np.dtype(np.float64), 2, True)
    code = ast.unparse(cuda_program.task_codes(clamped_locals.source, (a, a, a)).codes[0].function)
    assert "_qg_ldx(p, 'a0;a1', (ip, j))" in code and "'a0 1 - 0 max;a1 w', (i, jm)" in code, code
    assert "_qg_ldx(p, 'o0;a1', (_qg_min(k, p.shape[0] - 1), j))" in code, code
