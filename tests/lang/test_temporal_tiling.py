"""Temporal tiling of stencil qgraph.repeat loops on CUDA (lang/front/temporal_tiling.py,
lang/cuda/tiling.py): which loops qualify (decided on the source, no compile), the Jacobi sweeps
of the fluids example and a 1-D 3-point stencil against NumPy on the CPU and CUDA, on CUDA the
same bits as the untiled loop for counts around S and grids that are not multiples of a tile,
overlapping arrays refused, and the tiled task's PTX (shared memory, barriers) without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.loop_kernels import smooth

import qgraph
from qgraph.lang.front.interchange import for_launch
from qgraph.lang.front.temporal_tiling import TiledRepeat, TiledTask, tiled
from qgraph.lang.options import KernelOptions
from qgraph.runtime.settings import Settings

ON = KernelOptions(temporal_tiling=True)
S = 3  # passes per launch of the kernels below (temporal_tiling=3): small counts cross it


@qgraph.kernel(temporal_tiling=S)
def jacobi(p, p_new, div, pairs: int):
    for _ in qgraph.repeat(pairs):
        for i, j in qgraph.ndrange(p.shape[0], p.shape[1]):
            pl = p[max(i - 1, 0), j]
            pr = p[min(i + 1, p.shape[0] - 1), j]
            pb = p[i, max(j - 1, 0)]
            pt = p[i, min(j + 1, p.shape[1] - 1)]
            p_new[i, j] = 0.25 * (pl + pr + pb + pt - div[i, j])
        for i, j in qgraph.ndrange(p.shape[0], p.shape[1]):
            pl = p_new[max(i - 1, 0), j]
            pr = p_new[min(i + 1, p.shape[0] - 1), j]
            pb = p_new[i, max(j - 1, 0)]
            pt = p_new[i, min(j + 1, p.shape[1] - 1)]
            p[i, j] = 0.25 * (pl + pr + pb + pt - div[i, j])


def _jacobi_reference(p, p_new, div, pairs):
    p, p_new = p.copy(), p_new.copy()
    for _ in range(max(pairs, 0)):
        for src, dst in ((p, p_new), (p_new, p)):
            up, down = np.vstack([src[:1], src[:-1]]), np.vstack([src[1:], src[-1:]])
            left, right = np.hstack([src[:, :1], src[:, :-1]]), np.hstack([src[:, 1:], src[:, -1:]])
            dst[:] = np.float32(0.25) * (up + down + left + right - div)
    return p, p_new


def _smooth_reference(a, b, k):
    a, b = a.copy(), b.copy()
    for _ in range(max(k, 0)):
        b[1:-1] = (a[:-2] + a[1:-1] + a[2:]) * 0.25
        a[1:-1] = b[:-2] * 0.25 + b[1:-1] * 0.5 + b[2:] * 0.25
    return a, b


def _tiled_tasks(kernel) -> list[TiledTask]:
    return [t for t in tiled(for_launch(kernel.source, ON), ON).tasks if isinstance(t, TiledTask)]


# --------------------------------------------------------------------------- which loops qualify


def test_stencil_loops_get_a_tiled_task():
    (task,) = _tiled_tasks(jacobi)
    assert len(task.parts) == 2 and task.radii == (1, 1)
    assert task.staged == ("p",) and task.rewritten == ("p_new",) and task.written_back == ("p_new",)
    assert set(task.arrays) == {"p", "p_new", "div"} and task.written == {"p", "p_new"}
    src = tiled(jacobi.source, ON)
    loop = src.body.children[0]
    assert isinstance(loop, TiledRepeat) and loop.tiled == task.index == len(src.tasks) - 1
    (line,) = _tiled_tasks(smooth)
    assert line.radii == (1, 1) and line.staged == ("a",) and line.written_back == ("b",) and not line.read_only
    assert task.read_only == ("div",)
    assert tiled(jacobi.source, KernelOptions(temporal_tiling=False)) is jacobi.source


BODIES = {
    "a read at an unbounded index": "for i in range(x.shape[0]):\n            y[i] = x[z[i]]\n"
    "        for i in range(x.shape[0]):\n            x[i] = y[i]",
    "a write off the element": "for i in range(x.shape[0] - 1):\n            y[i + 1] = x[i]\n"
    "        for i in range(x.shape[0] - 1):\n            x[i] = y[i]",
    "an atomic": "for i in range(x.shape[0]):\n            y[i] = x[i - 1]\n            qgraph.atomic_add(z, 0, 1)\n"
    "        for i in range(x.shape[0]):\n            x[i] = y[i]",
    "a neighbour of what the task writes": "for i in range(1, x.shape[0]):\n            y[i] = y[i - 1] + x[i]\n"
    "        for i in range(1, x.shape[0]):\n            x[i] = y[i]",
    "a clamp to another bound": "for i in range(x.shape[0]):\n            y[i] = x[min(i + 1, 5)]\n"
    "        for i in range(x.shape[0]):\n            x[i] = y[i]",
    "staged and written back": "for i in range(1, x.shape[0]):\n            y[i] = x[i - 1] + y[i]\n"
    "        for i in range(1, x.shape[0]):\n            x[i] = y[i]",
    "a conditional last store": "for i in range(1, x.shape[0]):\n            y[i] = x[i - 1]\n"
    "        for i in range(1, x.shape[0]):\n            if y[i] > 0:\n                x[i] = y[i]",
    "the last task reading what only it writes": "for i in range(1, x.shape[0] - 1):\n"
    "            y[i] = x[i - 1] + x[i + 1]\n"
    "        for i in range(1, x.shape[0] - 1):\n            x[i] = y[i] + x[i]",
    "one task": "for i in range(1, x.shape[0]):\n            y[i] = x[i - 1]",
    "a branch": "if qgraph.cond(f):\n            for i in range(1, x.shape[0]):\n                y[i] = x[i - 1]\n"
    "            for i in range(1, x.shape[0]):\n                x[i] = y[i]",
}


@pytest.mark.parametrize("body", list(BODIES.values()), ids=list(BODIES))
def test_what_is_not_tiled(body, tmp_path):
    path = tmp_path / "kernels_not_tiled.py"
    head = "import qgraph\n\n\ndef kernel(x, y, z, f, k: int):\n    for _ in qgraph.repeat(k):\n"
    path.write_text(f"{head}        {body}\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    source = qgraph.kernel(namespace["kernel"]).source
    assert tiled(source, ON) is source


# --------------------------------------------------------------------------- results


@pytest.mark.parametrize("shape", [(37, 45), (5, 7)], ids=["not a multiple of a tile", "less than a tile"])
def test_jacobi_sweeps(arch, shape):
    rng = np.random.default_rng(7)
    p0, q0, d = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    div = qgraph.from_numpy(d)
    untiled = jacobi.variant(temporal_tiling=False)
    # the kernel's first count builds a straight line (S passes a group, 3 left over); later counts
    # the WHILE form, whose 16 copies a pass leave these counts to the remainder loop, so the form
    # unrolled S times runs a group in each WHILE pass, the count's remainder as copies
    grouped = jacobi.variant(unroll=S)
    for pairs in (2 * S + 3, 0, 1, S - 1, S, S + 1):  # a new count each call
        found = [(qgraph.from_numpy(p0), qgraph.from_numpy(q0)) for _ in range(3)]
        for kernel, arrays in zip((jacobi, grouped, untiled), found):
            kernel(*arrays, div, pairs)
        for k, ref in enumerate(_jacobi_reference(p0, q0, d, pairs)):
            kept = found[2][k].to_numpy()
            np.testing.assert_array_equal(found[0][k].to_numpy(), kept)
            np.testing.assert_array_equal(found[1][k].to_numpy(), kept)
            np.testing.assert_allclose(kept, ref, rtol=1e-5, atol=1e-5)
    assert jacobi.stats.iterations == grouped.stats.iterations == (S + 1,)
    assert jacobi.stats.num_tasks == 2  # the tasks as written, on both backends
    if arch == "cuda":  # S passes a node pair: fewer nodes than the copies
        assert 0 < jacobi.stats.graph_nodes < untiled.stats.graph_nodes


def test_a_one_dimensional_stencil(arch):
    rng = np.random.default_rng(11)
    a0, b0 = rng.standard_normal(2100), rng.standard_normal(2100)  # two tiles of 1014 and a part of one
    untiled = smooth.variant(temporal_tiling=False)
    for k in (2 * S + 3, S):
        found, kept = (qgraph.from_numpy(a0), qgraph.from_numpy(b0)), (qgraph.from_numpy(a0), qgraph.from_numpy(b0))
        smooth(*found, k)
        untiled(*kept, k)
        for a, b, ref in zip(found, kept, _smooth_reference(a0, b0, k)):
            np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
            np.testing.assert_allclose(a.to_numpy(), ref, rtol=1e-13)


def test_the_while_form_runs_groups_of_passes(cuda):
    """Unrolled 2S times per WHILE pass (not a straight line): two tiled groups a pass, the remainder
    loop's copies as written."""
    rng = np.random.default_rng(13)
    p0, q0, d = (rng.standard_normal((20, 40)).astype(np.float32) for _ in range(3))
    unrolled = jacobi.variant(unroll=2 * S)
    out = []
    for kernel in (unrolled, jacobi.variant(temporal_tiling=False, unroll=2 * S)):
        p, q = qgraph.from_numpy(p0), qgraph.from_numpy(q0)
        kernel(p, q, qgraph.from_numpy(d), 4 * S + 1)
        out.append((p.to_numpy(), q.to_numpy()))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])
    assert unrolled.stats.iterations == (4 * S + 1,)


def test_a_grid_whose_tiles_pass_a_wave_rebuilds_the_graph_untiled_once(cuda):
    """A graph built for a small grid runs the loop tiled; a call on a grid whose tiles no longer fit
    one wave (graph_unroll.MAX_TILED_WAVES) rebuilds it untiled, once: back on the small grid it stays
    untiled (no rebuild at every change), and every call has the untiled kernel's bits."""
    kernel, untiled = jacobi.variant(temporal_tiling=S), jacobi.variant(temporal_tiling=False)
    rng = np.random.default_rng(17)
    grids = {shape: [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
             for shape in ((20, 40), (700, 700))}  # 2 tiles; 32 x 32 tiles of 22 x 22, past a wave

    def run(k, shape):
        p0, q0, d = grids[shape]
        found = [(qgraph.from_numpy(p0), qgraph.from_numpy(q0)) for _ in range(2)]
        for f, arrays in zip((k, untiled), found):
            f(*arrays, qgraph.from_numpy(d), 4)
        for a, b in zip(*found):
            np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
        return k.stats.builds, k.stats.graph_nodes

    builds, tiled_nodes = run(kernel, (20, 40))
    untiled_nodes = untiled.stats.graph_nodes
    assert tiled_nodes < untiled_nodes
    assert run(kernel, (700, 700)) == (builds + 1, untiled_nodes)
    assert run(kernel, (20, 40)) == (builds + 1, untiled_nodes)


def test_overlapping_arrays_are_refused(cuda):
    from numba import cuda as numba_cuda

    base = numba_cuda.to_device(np.zeros((9, 8), np.float32))
    div = qgraph.from_numpy(np.zeros((8, 8), np.float32))
    with pytest.raises(qgraph.QgraphError, match=r"'p' and 'p_new' share memory.*temporal_tiling=False"):
        jacobi(base[1:], base[:-1], div, 2)
    jacobi.variant(temporal_tiling=False)(base[1:], base[:-1], div, 2)  # untiled, it runs


# --------------------------------------------------------------------------- the option and the code


def test_the_option_and_its_environment_variable():
    assert Settings.from_environ({"QGRAPH_TEMPORAL_TILING": "0"}).temporal_tiling is False
    assert Settings.from_environ({}).temporal_tiling is True  # on unless turned off (docs/benchmarks.md)
    assert tiled(jacobi.source, KernelOptions(temporal_tiling=False)) is jacobi.source
    assert isinstance(tiled(jacobi.source, KernelOptions()).tasks[-1], TiledTask)
    with pytest.raises(TypeError, match="temporal_tiling must be"):
        KernelOptions(temporal_tiling=0)


def test_a_tiled_block_is_its_region():
    from qgraph.compiler.launch_code import tiles_of

    # (gx, gy, gz, bx, by): a block per tile, a thread per cell of the tile and its halo
    assert tiles_of((256, 128), (26, 26), 3) == (5, 10, 1, 32, 32)
    assert tiles_of((5, 7), (22, 22), 5) == (1, 1, 1, 32, 32)
    assert tiles_of(2100, (1014,), 5) == (3, 1, 1, 1024, 1)


def test_the_tiled_task_stages_in_shared_memory(cuda_compiler, monkeypatch):
    import numba.cuda.dispatcher as dispatcher

    from qgraph.args.kinds import arg_type, array_sig, scalar_sig
    from qgraph.compiler import cuda_program
    from qgraph.lang.lower.lowering import lower_funcs

    class Hopper:
        compute_capability = (9, 0)

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: Hopper())
    src = tiled(for_launch(jacobi.source, ON), KernelOptions(temporal_tiling=S))
    f4 = array_sig(np.dtype("f4"), 2, True)
    key = (f4, f4, f4, scalar_sig(np.dtype("i8")))
    codes = cuda_program.task_codes(src, key, KernelOptions(temporal_tiling=S))
    h = 2 * S - 1  # S - 1 passes of two radius-1 sweeps and the first once more
    assert codes.codes[-1].temporal == (S, (32 - 2 * h, 32 - 2 * h), h, ("div",))  # a 32x32 block, a thread a cell
    flat = codes.flat
    ptx, entries, sizes = cuda_program.compile_ptx(
        flat.src,
        codes.codes,
        codes.orders,
        codes.types,
        lower_funcs(codes.symbols),
        (9, 0),
        [arg_type(s) for s in key],
    )
    text = "".join(t for _, t in ptx)
    tiled_entry = text.split(".entry")[-1]
    assert len(entries) == 3 and "ld.shared.f32" in tiled_entry and ".local" not in tiled_entry
    # one barrier after staging and one after each of the 2S - 1 sweeps but the last, no loop over cells
    assert tiled_entry.count("bar.sync") == 2 * S - 1 and tiled_entry.count("ld.shared.f32") == 5 * (2 * S - 1)
