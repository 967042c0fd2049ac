"""Multi-dimensional loops on 2-D thread blocks (CUDA) give the same results as NumPy and the
CPU backend whatever the extents: short and long dimensions, grids past the 65535 limit of
y and z, non-zero and runtime starts, `continue`, and shapes that change between graph
replays (the node's block shape is updated in place)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.index_kernels import index_code_of_counts, laplacian, mark_3d, three_d
from helpers.numeric import call

import qgraph
from qgraph.compiler.launch_code import tile_shape


@qgraph.kernel
def index_code(out):
    for i, j in qgraph.ndrange(out.shape[0], out.shape[1]):
        out[i, j] = i * 100003 + j


@qgraph.kernel(cuda_graph=True)
def index_code_graphed(out):
    for i, j in qgraph.ndrange(out.shape[0], out.shape[1]):
        out[i, j] = i * 100003 + j


@qgraph.kernel
def shifted(out, a, b):
    for i, j in qgraph.ndrange((a, out.shape[0]), (b, out.shape[1] - 1)):
        if (i + j) % 3 == 0:
            continue
        out[i, j] = i - j


def _index_codes(shape):
    i, j = np.indices(shape)
    return i * 100003 + j


@pytest.mark.parametrize("shape", [(37, 3), (3, 37), (1, 1), (0, 5), (5, 0), (1000, 1), (1, 1000), (129, 257)])
def test_every_index_is_visited_once(arch, shape):
    out = np.full(shape, -1, dtype=np.int64)
    call(index_code, out)
    np.testing.assert_array_equal(out, _index_codes(shape))


def test_a_y_extent_past_the_grid_limit(arch):
    shape = (70000 * 8 + 5, 32)  # more rows than 65535 blocks of 8 cover: the kernel loops over y
    out = np.full(shape, -1, dtype=np.int64)
    call(index_code, out)
    np.testing.assert_array_equal(out, _index_codes(shape))


def test_a_y_extent_past_the_grid_limit_with_counts_of_any_size(arch):
    shape = (70000 * 8 + 5, 33)  # scalar counts: 64-bit indices; one pass over the grid's y and z
    out = np.full(shape, -1, dtype=np.int64)
    call(index_code_of_counts, out, *shape)
    np.testing.assert_array_equal(out, _index_codes(shape))


def test_a_3d_y_extent_past_the_grid_limit(arch):
    out = np.zeros((2, 65535 * 256 + 3, 1), dtype=np.int8)  # y blocks of 256 past 65535: the y loop
    call(mark_3d, out)
    assert out.min() == 1 and out.max() == 1


def test_a_z_extent_past_the_grid_limit(arch):
    out = np.full((70001, 2, 3), -1, dtype=np.int64)
    call(three_d, out)
    a, b, c = np.indices(out.shape)
    np.testing.assert_array_equal(out, (a * 7 + b) * 11 + c)


def test_runtime_starts_and_continue(arch):
    out = np.zeros((40, 50), dtype=np.int64)
    call(shifted, out, 3, 5)
    expected = np.zeros_like(out)
    for i in range(3, 40):
        for j in range(5, 49):
            if (i + j) % 3:
                expected[i, j] = i - j
    np.testing.assert_array_equal(out, expected)


def test_three_dimensional_stencil_matches_numpy(arch):
    u = np.random.default_rng(1).random((34, 20, 45)).astype(np.float32)
    out = np.zeros_like(u)
    call(laplacian, u, out)
    expected = np.zeros_like(u)
    expected[1:-1, 1:-1, 1:-1] = (u[:-2, 1:-1, 1:-1] + u[2:, 1:-1, 1:-1] + u[1:-1, :-2, 1:-1] + u[1:-1, 2:, 1:-1]
                                  + u[1:-1, 1:-1, :-2] + u[1:-1, 1:-1, 2:] - 6 * u[1:-1, 1:-1, 1:-1])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_graph_replays_follow_changing_shapes(arch):
    for shape in [(64, 64), (300, 3), (3, 300), (64, 64), (2, 2)]:
        out = np.full(shape, -1, dtype=np.int64)
        call(index_code_graphed, out)
        np.testing.assert_array_equal(out, _index_codes(shape))
    if arch == "cuda":
        assert index_code_graphed.stats.builds == 1  # one graph, its node updated for each shape
        assert index_code_graphed.stats.node_updates >= 1  # a cached instance updated in place


def test_tile_shapes_fill_blocks_and_cover_the_extents():
    for counts in [(2046, 2046), (3, 10**6), (10**6, 3), (254, 254, 254), (7, 5), (10**8, 40), (0, 4)]:
        gx, gy, gz, bx, by = tile_shape(counts, 256)
        assert bx * by <= 256 and gx * bx >= counts[-1]
        assert gy <= 65535 and gz <= 65535 and min(gx, gy, gz) >= 1
        if min(counts) >= 8:
            assert bx * by == 256  # no idle threads in a block for extents that fill it
    assert tile_shape((2046, 2046), 256)[3:] == (32, 8)  # a warp reads 128 contiguous bytes of float32
    # a 2-D loop spreads its y blocks over the grid's y and z (one pass) while they fit 65535**2
    for counts in [(65535 * 8, 32), (65535 * 8 + 1, 32), (70000 * 8 + 5, 33), ((1 << 31) - 1, 32)]:
        gx, gy, gz, bx, by = tile_shape(counts, 256)
        assert (bx, by) == (32, 8) and gy <= 65535 and gz <= 65535 and gy * gz * by >= counts[0]
        assert (gy * gz - 1) * by < counts[0] + gz * by  # no more than a row of blocks in z idle
    assert tile_shape((65535 * 8, 32), 256)[1:3] == (65535, 1)
    assert tile_shape((1 << 40, 1), 256) == (1, 65535, 1, 1, 256)  # past 65535**2 blocks: the y loop
    assert tile_shape((70001, 3, 2), 256)[1:3] == (1, 65535)  # a 3-D loop's z: the z loop
    assert tile_shape((700, 3, 2), 256)[1:3] == (1, 700)
    with pytest.raises(OverflowError, match="2\\*\\*48"):
        tile_shape((1 << 30, 1 << 20), 256)


@qgraph.kernel
def sum_and_max(x, total, peak):
    for i, j in qgraph.ndrange(x.shape[0], x.shape[1]):
        total[0] += x[i, j]
        qgraph.atomic_max(peak, 0, x[i, j])


@qgraph.kernel
def cube_sum(x, total):
    for i, j, k in qgraph.ndrange((1, x.shape[0]), x.shape[1], x.shape[2]):
        if k == 0:
            continue
        total[0] += x[i, j, k]


@pytest.mark.parametrize("shape", [(37, 3), (3, 37), (1, 1), (0, 4), (2049, 2047), (3, 700001), (700001, 3)])
def test_reductions_over_blocks_of_any_shape(arch, shape):
    x = np.random.default_rng(2).integers(-1000, 1000, shape).astype(np.int64)
    total, peak = np.zeros(1, dtype=np.int64), np.full(1, -(1 << 62), dtype=np.int64)
    call(sum_and_max, x, total, peak)
    assert total[0] == x.sum()
    assert peak[0] == (x.max() if x.size else -(1 << 62))


def test_a_three_dimensional_reduction_with_continue(arch):
    x = np.random.default_rng(3).integers(-50, 50, (70, 9, 33)).astype(np.int64)
    total = np.zeros(1, dtype=np.int64)
    call(cube_sum, x, total)
    assert total[0] == x[1:, :, 1:].sum()


@qgraph.kernel
def mirrored(u, out, w):
    for i, j in qgraph.ndrange(u.shape[0], u.shape[1]):
        out[i, j] = u[i - u.shape[0], -1 - j]  # negative indices count from the end
        w[i, j] += 0.5 * u[i, j]
    for i, j, k in qgraph.ndrange(2, 3, 4):
        w[i, j] += k


def test_two_and_three_dimensional_indexing_keeps_python_semantics(arch):
    """On CUDA these subscripts use 32-bit offsets (lang.cuda.addressing)."""
    u = np.random.default_rng(4).random((33, 70))
    out, w = np.zeros_like(u), np.ones_like(u)
    call(mirrored, u, out, w)
    np.testing.assert_array_equal(out, u[:, ::-1])
    expected = 1 + 0.5 * u
    expected[:2, :3] += 6  # 0 + 1 + 2 + 3, from the second loop (one k at a time: a scatter)
    np.testing.assert_allclose(w, expected, rtol=1e-12)


@qgraph.kernel
def neighbours(u, out, w):
    for i, j in qgraph.ndrange((1, u.shape[0]), u.shape[1]):
        out[i, j] = u[i - 1, j] + 2 * u[i, j - 1] + 3 * u[i, j + 1 - 1]  # j - 1 wraps at j = 0
        w[i - 1, j] += u[i, j]


def test_neighbour_subscripts_share_an_offset_and_keep_python_semantics(arch):
    """Subscripts at loop variables plus literals that stay non-negative share one offset on CUDA
    (lang.cuda.addressing); a delta that could go negative (`j - 1` from 0) still wraps around."""
    u = np.random.default_rng(5).random((12, 9))
    out, w = np.zeros_like(u), np.zeros_like(u)
    call(neighbours, u, out, w)
    expected = np.zeros_like(u)
    expected[1:] = u[:-1] + 2 * np.roll(u, 1, axis=1)[1:] + 3 * u[1:]
    np.testing.assert_allclose(out, expected, rtol=1e-15)
    np.testing.assert_allclose(w[:-1], u[1:], rtol=1e-15)


@qgraph.kernel
def shifted_3d(u, out):
    for i, j, k in qgraph.ndrange((1, u.shape[0] - 1), (2, u.shape[1]), u.shape[2]):
        out[i, j - 2, k] = u[i + 1, j - 2, k] - u[i - 1, j - 1, k - 1] + 0.5 * u[i, j, k + 0]


def test_three_dimensional_neighbours_match_numpy(arch):
    u = np.random.default_rng(6).random((7, 8, 9))
    out = np.zeros_like(u)
    call(shifted_3d, u, out)
    expected = np.zeros_like(u)
    expected[1:-1, :-2] = u[2:, :-2] - np.roll(u, 1, axis=2)[:-2, 1:-1] + 0.5 * u[1:-1, 2:]
    np.testing.assert_allclose(out, expected, rtol=1e-15)


def test_large_arrays_have_a_key_text_of_their_own():
    """From LARGE (2**31 - 2**16) elements, or an extent that long (an empty array's other extents
    are not bounded by its size), an array keeps 64-bit indexing on CUDA; below, index
    expressions have the 2**16 of room lang.cuda.index_ranges counts on."""
    from qgraph.args.kinds import arg_type, array_sig
    from qgraph.lang.types.extents import LARGE, MAX_EXTENT

    assert LARGE == (1 << 31) - (1 << 16) and MAX_EXTENT == LARGE - 1
    small = array_sig(np.dtype(np.float32), 2, True, LARGE - 1, longest=MAX_EXTENT)
    large = array_sig(np.dtype(np.float32), 2, True, LARGE)
    empty = array_sig(np.dtype(np.float32), 2, True, 0, longest=LARGE)
    assert small == "float32[2d]" and large == empty == "float32[2d,large]"
    assert not arg_type(small).large and arg_type(large).large
    assert arg_type(large).numba_type() == arg_type(small).numba_type()
