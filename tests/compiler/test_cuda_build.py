"""compiler/cuda_program.build_program without a GPU: a specialisation compiled with numba-cuda
and NVVM, linked by a stand-in linker, stored in the code cache and loaded from it again."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import kernels as tk
from helpers import loop_kernels as tw
from helpers import reduction_kernels as tr
from helpers.cuda_offline import A, S

from qgraph.backends.inspection import offline_key
from qgraph.bench.kernels import kernels_for
from qgraph.compiler import cuda_program, ptx_text
from qgraph.compiler.code_cache import CodeCache
from qgraph.compiler.ptx_stats import entry_body


def _three_tasks():
    kernel = kernels_for(3).graph
    key = offline_key(tuple(np.zeros(256, np.float32) for _ in range(3)) + (256, np.float32(1.0)))
    return kernel.source, key


def test_a_specialisation_builds_then_loads_from_the_cache_without_a_device(sm90, tmp_path):
    src, key = _three_tasks()
    linked = []

    def link(ptx_list):
        linked.append(ptx_list)
        return "".join(ptx for _, ptx in ptx_list).encode()

    cache = CodeCache(str(tmp_path))
    built = cuda_program.build_program(src, key, (9, 0), link, cache)
    assert not built.cached and built.waits and len(built.entries) == 3 and all(s > 0 for s in built.sizes)
    # the plain entries and their launch_dependents twins, linked apart (compiler.cuda_images)
    assert {frozenset(name for _, ptx in group for name in ptx_text.ptx_entries(ptx)) for group in linked} == \
        {frozenset(built.entries), frozenset(e + cuda_program.TRIGGER for e in built.entries)}
    assert built.images.entries == (tuple(built.entries), tuple(e + cuda_program.TRIGGER for e in built.entries))
    again = cuda_program.build_program(src, key, (9, 0), link, cache)
    assert again.cached and len(linked) == 2
    assert (again.entries, again.sizes, again.images) == (built.entries, built.sizes, built.images)


def test_a_kernel_with_a_flag_loop_also_links_its_gated_variants(sm90, tmp_path):
    """The copies of an unrolled flag loop run each task's gated variant (graph_unroll), and the serial
    task ending its body (the flag's) its gating variants, which call qgraph_next_pass (linked too)."""
    kernel = kernels_for(2).loop
    key = offline_key(tuple(np.zeros(256, np.float32) for _ in range(2)) + (np.zeros(1, np.int32),) * 2
                      + (256, np.float32(1.0)))
    linked = []
    built = cuda_program.build_program(kernel.source, key, (9, 0), lambda p: linked.append(p) or b"x",
                                       CodeCache(str(tmp_path)))
    groups = {frozenset(name for _, ptx in group for name in ptx_text.ptx_entries(ptx)) for group in linked}
    suffixes = ("", cuda_program.TRIGGER, cuda_program.GATED, cuda_program.TRIGGER + cuda_program.GATED)
    gating = {built.entries[-1] + cuda_program.GATING + gated for gated in ("", cuda_program.GATED)}
    assert groups == {frozenset(e + suffix for e in built.entries) for suffix in suffixes} | {frozenset(gating)}
    # the gating variants call qgraph_next_pass: linked in their group
    assert [any(".visible .func  (.param .b32 func_retval0) qgraph_next_pass(" in ptx for _, ptx in group)
            for group in linked].count(True) == 1


def _compile(kernel, key, together):
    from qgraph.args.kinds import arg_type
    from qgraph.lang.lower.lowering import lower_funcs

    src = kernel.source
    codes = cuda_program.task_codes(src, key)
    return cuda_program.compile_ptx(src, codes.codes, codes.orders, codes.types, lower_funcs(codes.symbols),
                                     (9, 0), [arg_type(s) for s in key], together=together)


def _same_code(body: str, entry: str) -> str:
    """An entry's body without what differs between two compiles of the same code: its own name,
    block labels (numbered per function of the module) and numba's shared-array counter."""
    body = re.sub(r"\$L__BB\d+_", "$L__BB_", body.replace(entry, "ENTRY"))
    return re.sub(r"_cudapy_smem_\d+", "SMEM", body)


def _without_version(entry: str) -> str:
    return re.sub(r"B\d+v\d+B", "B_v_B", entry)  # numba numbers each compile of a function


@pytest.mark.parametrize("kernel,key", [
    (tk.mixed, (A("f8", 1), A("f8", 1), A("f8", 1), S("i8"))),
    (tr.positive_sum_and_max, (A("f8", 1), A("f8", 1), A("f8", 1))),
    (tw.grow_until, (A("f8", 1), A("i4", 0), S("f8"))),
    (tk.with_funcs, (A("f8", 1),) * 4),
], ids=["mixed", "reductions", "device_loop", "funcs"])
def test_tasks_compiled_together_are_the_tasks_compiled_apart(sm90, kernel, key):
    """One NVVM run gives one module holding every task's entry, with the code each task gets
    when it is compiled on its own (what the offline PTX tables show)."""
    together, entries, sizes = _compile(kernel, key, True)
    apart, apart_entries, apart_sizes = _compile(kernel, key, False)
    assert len(together) == 1 and len(apart) == len(entries) and sizes == apart_sizes
    (_, module), = together
    assert list(ptx_text.ptx_entries(module)) == entries
    assert [_without_version(e) for e in entries] == [_without_version(e) for e in apart_entries]
    for entry, apart_entry, (_, ptx) in zip(entries, apart_entries, apart):
        assert _same_code(entry_body(module, entry), entry) == _same_code(entry_body(ptx, apart_entry), apart_entry)
