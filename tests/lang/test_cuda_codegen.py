"""CUDA code generation without a GPU: every test kernel's tasks compile to PTX for sm_90,
with the by-value parameter layout qgraph packs, and (where ptxas exists) assemble after
the griddepcontrol patch. Skipped where a piece of numba-cuda's compiler (NVVM, NVRTC,
libdevice) is not installed (helpers.arch.missing_cuda_compiler); failed then under QGRAPH_REQUIRE_CUDA=1."""

from __future__ import annotations

import math
import re
import shutil
import subprocess

import numpy as np
import pytest
from helpers import atomic_kernels as ta
from helpers import index_kernels as ti
from helpers import kernels as tk
from helpers import loop_kernels as tw
from helpers import reduction_kernels as tr
from helpers import updates as tu
from helpers.cuda_offline import A, S, compile_offline, ptx_of

import qgraph
from qgraph.args.kinds import arg_type, array_sig
from qgraph.args.structs import struct_sig
from qgraph.compiler import cuda_program, ptx_text, ptx_variants
from qgraph.lang.cuda import codegen as cuda_codegen
from qgraph.lang.lower.lowering import CUDA_ATOMICS, Symbols, lower_funcs
from qgraph.lang.options import KernelOptions

CASES = [
    (tk.saxpy, (A("f4", 1), A("f4", 1), S("f8"))), (tk.stencil, (A("f8", 2), A("f8", 2))),
    (tk.mixed, (A("f8", 1), A("f8", 1), A("f8", 1), S("i8"))),
    (tk.strided_range, (A("i8", 1), S("i8"), S("i8"), S("i8"))), (tk.with_funcs, (A("f8", 1),) * 4),
    (tk.cube, (A("i4", 3),)), (tk.skip_odd, (A("i4", 1),)),
    (tk.scalar_types, (A("f8", 1), S("i4"), S("f4"), S("bool"))), (tk.zero_d, (A("i8", 0), A("i8", 0))),
    (tk.zero_d_in_parallel_loop, (A("i8", 0), A("f8", 0), A("f8", 1))),
    (tk.zero_d_to_func, (A("f8", 0), A("f8", 1))), (ta.histogram, (A("i8", 1), A("i8", 1))),
    (ta.extremes, (A("i4", 1),) * 4), (ta.grid_counts, (A("i8", 2), S("i8"))),
    (tw.countdown, (A("i4", 1), A("i4", 1), A("i8", 1))), (tw.grow_until, (A("f8", 1), A("i4", 0), S("f8"))),
    (tk.signed_indices, (A("f4", 1), A("f4", 1), A("f8", 2))),
    (tr.total, (A("f4", 1), A("f4", 1))), (tr.smallest, (A("i8", 1), A("i8", 1))),
    (tr.dot, (A("f4", 1), A("f4", 1), A("f4", 0))), (tr.largest_change, (A("f4", 1), A("f4", 1), A("f4", 0))),
    (tr.positive_sum_and_max, (A("f8", 1), A("f8", 1), A("f8", 1))),
    (tr.graph_largest_0d, (A("f8", 1), A("f8", 0), A("i4", 0), A("i4", 1))),
    (tr.grid_total, (A("f8", 2), A("f8", 1), S("i8"))), (tr.histogram, (A("i8", 1), A("f8", 1), A("f8", 1))),
    (tr.private_updates, (A("f8", 1), A("f8", 1))), (tr.strided_sum, (A("f8", 1), A("f8", 1), S("i8"))),
    (tr.total, (A("u8", 1), A("u8", 1))), (tr.largest, (A("u4", 1), A("u4", 1))), (tr.total, (A("i4", 1), A("i4", 1))),
    (tk.serial_range_forms, (A("i8", 1), "int", "int", "int")),
    (ti.clamped_sweep, (A("f4", 2),) * 3), (ti.offset_rows, (A("f8", 2), A("f8", 2), S("i8"))),
    (ti.clamped_locals, (A("f8", 2),) * 3), (ti.index_code_of_counts, (A("i8", 2), "int", "int")),
    (ti.mark_3d, (A("i1", 3),)), (ti.three_d, (A("i8", 3),)),
    (ti.wrapped, (A("f8", 2), A("f8", 1), A("f8", 3), A("f8", 2), A("f8", 2), A("f8", 1), A("f8", 3), A("f8", 2))),
]


@pytest.mark.parametrize("kernel,key", CASES, ids=[k.__name__ for k, _ in CASES])
def test_tasks_compile_with_the_packed_layout(sm90, kernel, key, tmp_path):
    ptx_list, entries, sizes = compile_offline(kernel, key)
    src = kernel.source
    assert len(entries) == len(cuda_program.task_codes(src, key).tasks) and all(size > 0 for size in sizes)
    ptxas = shutil.which("ptxas")
    for name, ptx in ptx_list:
        patched = ptx_text.add_grid_dependency_control(ptx)
        assert patched.count("griddepcontrol.wait;") == len(ptx_text.ptx_entries(ptx))
        if ptxas:
            path = tmp_path / name
            path.write_text(patched)
            out = subprocess.run([ptxas, "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                                 capture_output=True, text=True)
            assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("kernel,key", CASES, ids=[k.__name__ for k, _ in CASES])
def test_both_launch_variants_link_into_one_cubin(sm90, kernel, key, tmp_path):
    """The tasks' module is linked with its launch_dependents twin (see build_program); module-scope
    symbols such as numba's shared arrays must not be defined twice."""
    ptxas, nvlink = shutil.which("ptxas"), shutil.which("nvlink")
    if not (ptxas and nvlink):
        pytest.skip("ptxas and nvlink are needed")
    modules = {}
    for name, ptx in compile_offline(kernel, key)[0]:
        trigger = ptx_text.add_grid_dependency_control(ptx, trigger=True)
        modules.update({name: ptx_text.add_grid_dependency_control(ptx),
                        f"trigger_{name}": ptx_text.renamed(trigger, list(ptx_text.ptx_entries(ptx)), "_qg_trigger")})
    _assemble_and_link(modules, tmp_path, ptxas, nvlink)


def _assemble_and_link(modules: dict[str, str], tmp_path, ptxas: str, nvlink: str) -> None:
    """Each PTX module through ptxas for sm_90, then all of them through nvlink: both succeed."""
    objects = []
    for variant, text in modules.items():
        (tmp_path / variant).write_text(text)
        obj = str(tmp_path / (variant + ".o"))
        out = subprocess.run([ptxas, "-arch=sm_90", "-c", str(tmp_path / variant), "-o", obj],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        objects.append(obj)
    out = subprocess.run([nvlink, "-arch=sm_90", *objects, "-o", str(tmp_path / "all.cubin")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_a_reduction_is_one_atomic_per_block_after_warp_shuffles(sm90):
    (ptx,) = ptx_of(tr.total, (A("f4", 1), A("f4", 1)))
    assert "shfl.sync.down" in ptx and "bar.sync" in ptx
    assert len(re.findall(r"^\s*(?:@%p\d+ )?(?:atom|red)\.global", ptx, re.M)) == 1
    assert ".f64" not in ptx  # a float32 reduction stays float32


def test_thread_private_updates_compile_without_atomics(sm90):
    (ptx,) = ptx_of(tr.private_updates, (A("f8", 1), A("f8", 1)))
    assert not re.search(r"\b(atom|red)\.", ptx)


def test_a_scatter_is_atomic(sm90):
    (ptx,) = ptx_of(tr.histogram, (A("i8", 1), A("f8", 1), A("f8", 1)))
    assert re.search(r"\b(atom|red)\.global\.add\.f64", ptx)


def test_deterministic_reductions_combine_without_atomics_on_the_target(sm90, tmp_path):
    from qgraph.lang.cuda.reductions import scratch_params

    src = tr.positive_sum_and_max.source
    types = [arg_type(s) for s in (A("f8", 1), A("f8", 1), A("f8", 1))]
    symbols = Symbols(dict(CUDA_ATOMICS))
    (task,) = src.tasks
    order = cuda_program.param_order(src, task, types)
    code = cuda_codegen.cuda_task(src, task, [src.param_names[i] for i in order], symbols, types,
                                  KernelOptions(deterministic=True))
    assert code.scratch == tuple(scratch_params(list(code.reductions)))
    ptx_list, _, sizes = cuda_program.compile_ptx(src, [code], [order], [types], lower_funcs(symbols), (9, 0), types)
    ptx = ptx_list[0][1]
    # the only atomic left is the block counter's (an integer add); targets get plain stores
    assert re.findall(r"\b(?:atom|red)\.global\.(\w+)\.(\w+)", ptx) == [("add", "u32")]
    assert "membar" in ptx or "fence" in ptx
    assert sizes == [8 * 3 + 3 * 56 + 3 * 56]  # bounds, 3 arrays, 2 partials arrays and a counter


@pytest.mark.parametrize("dtype,width", [("f4", "32"), ("f8", "64")])
def test_float_extrema_use_native_integer_atomics(sm90, dtype, width):
    (ptx,) = ptx_of(tr.largest, (A(dtype, 1), A(dtype, 1)))
    assert "cas" not in ptx  # no compare-and-swap loop
    assert sorted(set(re.findall(r"atom\.global\.(\w+\.\w+)", ptx))) == [f"max.s{width}", f"min.u{width}"]


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("dtype,width", [("f4", "32"), ("f8", "64")])
def test_a_float_max_into_a_0d_array_compiles(sm90, dtype, width, deterministic):
    """`qgraph.atomic_max(err, (), v)` (Taichi's err[None]): the block combine's integer atomic
    on the float's bits goes to the 0-d array passed as one element (numba-cuda's atomics take
    no 0-d array); deterministic mode stores the combined value with a plain store."""
    key = (A(dtype, 1), A(dtype, 1), A(dtype, 0))
    (code,) = cuda_program.task_codes(tr.largest_change.source, key, KernelOptions(deterministic=deterministic)).codes
    assert code.one_element == (frozenset() if deterministic else {"err"})
    ((_, ptx),), _, _ = compile_offline(tr.largest_change, key, deterministic=deterministic)
    ops = sorted(set(re.findall(r"atom\.global\.(\w+\.\w+)", ptx)))
    assert ops == (["add.u32"] if deterministic else [f"max.s{width}", f"min.u{width}"])


@qgraph.kernel
def drain(idx, w, h, old):
    for i in range(idx.shape[0]):
        h[idx[i]] -= w[i]
        old[i] = qgraph.atomic_sub(h, 0, w[i])


@pytest.mark.parametrize("dtype,width", [("f4", "f32"), ("f8", "f64")])
def test_float_subtraction_is_a_native_atomic_add(sm90, dtype, width):
    """numba-cuda's float atomic sub is a compare-and-swap loop; qgraph adds the negated value
    instead (one instruction), in a reduction's block combine, a scatter and an explicit call."""
    (reduction,) = ptx_of(tr.total_minus, (A(dtype, 1), A(dtype, 1)))
    (scatter,) = ptx_of(drain, (A("i8", 1), A(dtype, 1), A(dtype, 1), A(dtype, 1)))
    for ptx in (reduction, scatter):
        assert "cas" not in ptx
        assert re.search(rf"\b(atom|red)\.global\.add\.{width}", ptx)


@pytest.mark.parametrize("context", tu.CONTEXTS)
def test_every_update_form_into_0d_arrays_compiles(sm90, context):
    """The generated update kernels of tests/lang/test_updates.py with 0-d targets (plain and struct
    fields), for float32: every form, in every context, to PTX."""
    for shape in [s for s in tu.SHAPES if s.name in ("0-d", "struct-field")]:
        dtype = np.dtype(np.float32)
        fields = struct_sig(tu.Fields, (A(dtype, 0),) * len(tu.IDENTS))
        key = (A(dtype, 1), A(np.int64, 1), A(dtype, 2)) + ((fields,) if shape.name == "struct-field"
                                                             else (A(dtype, 0),) * len(tu.IDENTS))
        ptx_list, entries, _ = compile_offline(tu.update_kernel(context, shape), key,
                                               deterministic=context == "deterministic")
        assert len(entries) == 1
        if context in ("reduction", "atomic"):
            assert re.search(r"\b(atom|red)\.global\.", ptx_list[0][1])


@qgraph.kernel
def all_pairs(px, py, m, ax, eps2):
    for i in range(px.shape[0]):
        acc = 0.0
        for j in range(px.shape[0]):
            dx = px[j] - px[i]
            dy = py[j] - py[i]
            inv = 1.0 / math.sqrt(dx * dx + dy * dy + eps2)
            acc += m[j] * dx * inv * inv * inv
        ax[i] = acc


@qgraph.kernel
def stencil_2d(u, out):
    for i, j in qgraph.ndrange((1, u.shape[0] - 1), (1, u.shape[1] - 1)):
        out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])


def _instructions(ptx: str) -> list[str]:
    body = ptx[ptx.index("{"):]
    return [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith(
        ("//", ".", "{", "}", "$", "ld.param")) and not line.strip().endswith(":")]


def test_index_math_has_no_wraparound_and_no_division(sm90):
    """Serial `range` loops and 2-D blocks leave no negative-index fix-ups (a sign-bit shift or
    select per access) and no integer division in the generated code."""
    (pairs,) = ptx_of(all_pairs, (A("f4", 1),) * 4 + ("float",))
    (stencil,) = ptx_of(stencil_2d, (A("f4", 2),) * 2)
    for ptx in (pairs, stencil):
        code = _instructions(ptx)
        assert not [i for i in code if re.match(r"shr\.s64\s+%rd\d+, %rd\d+, 63", i)]
        assert not [i for i in code if re.match(r"(div|rem)\.[su]", i)]
        assert not [i for i in code if ".f64" in i and not i.startswith("cvt.rn.f32.f64")]  # eps2: one cvt
    assert len(_instructions(stencil)) < 80  # 67 on numba-cuda 0.30.4 (the 1-D mapping took 234)
    assert "mad.lo.s32" in stencil  # 32-bit element offsets (lang.cuda.addressing)


def test_a_stencils_neighbours_share_one_offset(sm90):
    """`u[i - 1, j, k]` ... `u[i, j, k + 1]` of a 3-D stencil over (1, n - 1) ranges: one 32-bit
    offset of (i, j, k) for all six loads (two mad.lo.s32, and two for the store, in each of the
    task's two forms, lang.cuda.loops.tiled_loops), the others a
    loop-invariant byte step or an immediate (`[%rd+4]`), as `c - plane`, `c + 1` in CUDA C++."""
    (ptx,) = ptx_of(ti.laplacian, (A("f4", 3),) * 2)
    code = _instructions(ptx)
    # not the thread indices' mads; the body twice: the one-pass form and the grid-stride form
    assert len(re.findall(r"// begin inline asm\s+mad\.lo\.s32", ptx)) == 2 * 4, code
    assert [i for i in code if re.match(r"ld\.global\.f32\s+%f\d+, \[%rd\d+\+4\]", i)], code
    assert [i for i in code if re.match(r"ld\.global\.f32\s+%f\d+, \[%rd\d+\+-4\]", i)], code


def _wide_integer_ops(ptx: str) -> list[str]:
    """64-bit compares, min/max and sign-bit shifts (the wraparound fix-up)."""
    return [i for i in _instructions(ptx) if re.match(r"(setp\.\w+|min|max)\.[su]64|shr\.s64", i)]


def test_a_clamped_stencil_computes_its_indices_and_bounds_in_32_bits(sm90):
    """`p[min(i + 1, p.shape[0] - 1), j]`, `p[max(i - 1, 0), j]` (the stable-fluids sweep): 32-bit
    min/max and one 32-bit compare per bound, as `int` in CUDA C++ (lang.cuda.index_ranges); the
    same kernel with a large array, or a clamp of a scalar argument, keeps 64-bit arithmetic."""
    (ptx,) = ptx_of(ti.clamped_sweep, (A("f4", 2),) * 3)
    code = _instructions(ptx)
    assert not _wide_integer_ops(ptx), code
    assert [i for i in code if i.startswith("min.s32")] and [i for i in code if i.startswith("max.s32")], code
    assert len([i for i in code if re.match(r"setp\.\w+\.u32", i)]) == 2, code  # x and y: one pass, no loop
    (wide,) = ptx_of(ti.clamped_sweep, (array_sig(np.dtype("f4"), 2, True, 1 << 31),) * 3)
    assert [i for i in _instructions(wide) if re.match(r"setp\.\w+\.[su]64", i)]
    (scalar,) = ptx_of(ti.offset_rows, (A("f8", 2), A("f8", 2), S("i8")))
    assert [i for i in _instructions(scalar) if re.match(r"min\.s64", i)]


def test_the_thread_index_is_one_widening_multiply_masked_to_48_bits(sm90):
    """blockIdx.x * blockDim.x + threadIdx.x (one intrinsic in the generated code, typed once):
    a 32x32->64-bit multiply, no 64-bit one, and the mask that lets LLVM drop wraparound checks."""
    (ptx,) = ptx_of(tk.saxpy, CASES[0][1])
    code = _instructions(ptx)
    assert [i for i in code if re.match(r"mul\.wide\.u32\s", i)], code
    assert [i for i in code if i.startswith("and.b64") and i.endswith(", 281474976710655;")], code
    assert not [i for i in code if re.match(r"mul\.lo\.[su]64", i)], code
    assert not [i for i in code if re.match(r"shr\.s64\s+%rd\d+, %rd\d+, 63", i)], code


@qgraph.kernel(debug=True)
def checked_division(a, b, q):
    for i in range(a.shape[0]):
        q[i] = a[i] // b[i]
        q[i] %= b[i]


def test_debug_mode_checks_integer_divisors_on_the_target(sm90):
    """The divisor check compiles for CUDA: a compare-and-swap into the record per site."""
    key = (A("i8", 1), A("i8", 1), A("i8", 1))
    src = checked_division.source
    codes = cuda_program.task_codes(src, key, KernelOptions(debug="bounds"))
    sites = [s for s in codes.debug.sites if s.array in ("//", "%")]
    lines = open(__file__).read().splitlines()
    expected = [("//", lines.index("        q[i] = a[i] // b[i]") + 1), ("%", lines.index("        q[i] %= b[i]") + 1)]
    assert [(s.array, s.lineno) for s in sites] == expected
    ptx_list, _, _ = cuda_program.compile_ptx(src, codes.codes, codes.orders, codes.types,
                                               lower_funcs(codes.symbols), (9, 0), [arg_type(s) for s in key],
                                               debug=True)
    ptx = "".join(text for _, text in ptx_list)
    # one compare-and-swap into the record per checked place: the indices and both divisors
    assert len(re.findall(r"atom\.global\.cas\.b64", ptx)) == len(codes.debug.sites)


@pytest.mark.parametrize("kernel,key", [CASES[14], CASES[7]], ids=["countdown", "scalar_types"])
def test_the_gated_variant_links_with_one_parameter_more(sm90, kernel, key, tmp_path):
    """An unrolled loop's copies run each task's gated variant (graph_unroll): renamed, the address of
    the loop's `live` word as one more 8-byte parameter after the others, read after the wait."""
    ptxas, nvlink = shutil.which("ptxas"), shutil.which("nvlink")
    if not (ptxas and nvlink):
        pytest.skip("ptxas and nvlink are needed")
    modules = {}
    for name, ptx in compile_offline(kernel, key)[0]:
        entries = list(ptx_text.ptx_entries(ptx))
        waited = ptx_text.add_grid_dependency_control(ptx)
        gated = ptx_text.gated(waited, entries, cuda_program.GATED)
        trigger = ptx_text.renamed(ptx_text.add_grid_dependency_control(ptx, trigger=True), entries,
                                   cuda_program.TRIGGER)
        gated_trigger = ptx_text.gated(trigger, [e + cuda_program.TRIGGER for e in entries], cuda_program.GATED)
        sizes = ptx_text.ptx_entries(gated)
        for entry, params in ptx_text.ptx_entries(ptx).items():
            assert sizes[entry + cuda_program.GATED] == params + [8]
            body = ptx_text.entry_text(gated, entry + cuda_program.GATED)
            assert body.index("griddepcontrol.wait;") < body.index("ld.global.u64 %qg_gate_v") < body.index("ret;")
        modules.update({name: waited, f"gated_{name}": gated, f"trigger_{name}": trigger,
                        f"gated_trigger_{name}": gated_trigger})
    _assemble_and_link(modules, tmp_path, ptxas, nvlink)


def test_the_gating_variant_does_the_gates_work_where_it_would_return(sm90, tmp_path):
    """The serial task ending a flag loop's body gets gating variants (graph_unroll: no gate kernel
    between unrolled copies): only that entry, with the state block's address as one more parameter,
    every return a branch to one call of qgraph_next_pass (NVRTC's .func, linked with it); the gated
    one returns at once, not calling it, where `live` is 0."""
    from qgraph.driver.loop_state import NEXT_PASS_FUNCTION, next_pass_ptx

    ptxas, nvlink = shutil.which("ptxas"), shutil.which("nvlink")
    if not (ptxas and nvlink):
        pytest.skip("ptxas and nvlink are needed")
    kernel, key = CASES[14]  # countdown: a parallel task, then the serial flag update
    assert ptx_variants.gating_tasks(kernel.source.body) == {1}
    ((name, ptx),) = compile_offline(kernel, key)[0]
    entries = list(ptx_text.ptx_entries(ptx))
    waited = ptx_text.add_grid_dependency_control(ptx)
    variants = dict(ptx_variants.gating_variants(name, waited, [entries[1]]))
    gating, gated = variants[f"gating_{name}"], variants[f"gating_gated_{name}"]
    suffix = cuda_program.GATING
    assert list(ptx_text.ptx_entries(gating)) == [entries[1] + suffix]
    assert ptx_text.ptx_entries(gating)[entries[1] + suffix] == ptx_text.ptx_entries(ptx)[entries[1]] + [8]
    assert ptx_text.ptx_entries(gated)[entries[1] + suffix + cuda_program.GATED] == \
        ptx_text.ptx_entries(ptx)[entries[1]] + [8, 8]
    body = ptx_text.entry_text(gating, entries[1] + suffix)
    returns = [m.start() for m in re.finditer(r"^\s*(?:@%\w+\s+)?ret;", body, re.M)]
    assert len(returns) == 1 and body.index(f"call.uni (qg_next_pass_ret), {NEXT_PASS_FUNCTION}") < returns[0]
    body = ptx_text.entry_text(gated, entries[1] + suffix + cuda_program.GATED)
    assert body.index("@%qg_gate_p ret;") < body.index("call.uni")
    _assemble_and_link({name: waited, **variants, "next_pass.ptx": next_pass_ptx((9, 0))}, tmp_path, ptxas, nvlink)


def _backward_branches(ptx: str) -> list[str]:
    """Branches to a label defined above them: the loops of the generated code."""
    lines = [line.strip() for line in ptx.splitlines()]
    labels = {line[:-1]: k for k, line in enumerate(lines) if re.match(r"^\$\w+:$", line)}
    return [line for k, line in enumerate(lines)
            if (found := re.search(r"\bbra(?:\.uni)?\s+(\$\w+);", line)) and labels.get(found.group(1), k) < k]


def test_tiled_loops_run_one_pass_where_the_grid_covers_them(sm90, tmp_path):
    """A 2-D loop whose counts are below 2**31 (the fluids sweep) has no loop at all: its y blocks
    spread over the grid's y and z (launch_code.tile_shape), so one `if` per dimension bounds it
    and ptxas needs 18 registers (27 with the grid-stride loop, 20 for the hand-written sweep).
    A 2-D loop of a large array and a 3-D loop keep a grid-stride form for launches the grid
    cannot cover, behind a uniform test of the launch shape."""
    (narrow,) = ptx_of(ti.clamped_sweep, (A("f4", 2),) * 3)
    assert not _backward_branches(narrow), _instructions(narrow)
    (wide,) = ptx_of(ti.clamped_sweep, (array_sig(np.dtype("f4"), 2, True, 1 << 31),) * 3)
    (cube,) = ptx_of(ti.laplacian, (A("f4", 3),) * 2)
    for ptx in (wide, cube):
        assert _backward_branches(ptx) and "%nctaid.z" in ptx, _instructions(ptx)
    ptxas = shutil.which("ptxas")
    if ptxas:
        path = tmp_path / "sweep.ptx"
        path.write_text(ptx_text.add_grid_dependency_control(narrow))
        out = subprocess.run([ptxas, "-v", "-arch=sm_90", str(path), "-o", str(tmp_path / "k.cubin")],
                             capture_output=True, text=True)
        assert int(re.search(r"Used (\d+) registers", out.stderr).group(1)) <= 20, out.stderr
