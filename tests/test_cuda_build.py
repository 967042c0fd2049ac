"""compiler/cuda_program.build_program without a GPU: a specialisation compiled with numba-cuda
and NVVM, linked by a stand-in linker, stored in the code cache and loaded from it again."""

from __future__ import annotations

import numpy as np
from test_cuda_codegen import sm90  # noqa: F401  (the fixture: numba-cuda told compute capability 9.0)

from qgraph.bench.kernels import kernels_for
from qgraph.bench.ptx_stats import offline_key
from qgraph.compiler import cuda_program, ptx_text
from qgraph.compiler.code_cache import CodeCache


def _three_tasks():
    kernel = kernels_for(3).graph
    key = offline_key(tuple(np.zeros(256, np.float32) for _ in range(3)) + (256, np.float32(1.0)))
    return kernel._source, key


def test_a_specialisation_builds_then_loads_from_the_cache_without_a_device(sm90, tmp_path):  # noqa: F811
    src, key = _three_tasks()
    linked = []

    def link(ptx_list):
        linked.append(ptx_list)
        return "".join(ptx for _, ptx in ptx_list).encode()

    cache = CodeCache(str(tmp_path))
    built = cuda_program.build_program(src, key, (9, 0), link, cache)
    assert not built.cached and built.waits and len(built.entries) == 3 and all(s > 0 for s in built.sizes)
    defined = {name for _, ptx in linked[0] for name in ptx_text.ptx_entries(ptx)}
    assert defined == set(built.entries) | {e + cuda_program.TRIGGER for e in built.entries}
    again = cuda_program.build_program(src, key, (9, 0), link, cache)
    assert again.cached and len(linked) == 1
    assert (again.entries, again.sizes, again.cubin) == (built.entries, built.sizes, built.cubin)
