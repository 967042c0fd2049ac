"""The helper kernels' state blocks (driver/loop_state.py): the C source indexes each block with
word indices generated from the Python layout, and the loop modes and body bits are the enums'."""

from __future__ import annotations

import ctypes
import re

import pytest

from qgraph.driver.loop_state import (
    BRANCH_FIELDS,
    HELPER_SOURCE,
    LOOP_FIELDS,
    BranchBodies,
    BranchState,
    LoopMode,
    LoopState,
)

LAYOUTS = [("QG_LOOP", LoopState, LOOP_FIELDS), ("QG_BRANCH", BranchState, BRANCH_FIELDS)]
ENUMS = [("QG_LOOP_MODE", LoopMode), ("QG_BRANCH_BODY", BranchBodies)]


def test_the_blocks_are_the_sizes_the_graph_allocates():
    assert ctypes.sizeof(LoopState) == 10 * 8  # with `live` (unrolled copies) and the cancel word
    assert ctypes.sizeof(BranchState) == 3 * 8
    assert [LoopState.trip_record.offset, LoopState.handle.offset, LoopState.stop_record.offset] == [24, 32, 48]


@pytest.mark.parametrize("prefix,layout,fields", LAYOUTS)
def test_the_c_source_declares_every_field_at_its_python_offset(prefix, layout, fields):
    declared = dict(re.findall(rf"^\s*({prefix}_[A-Z_]+) = (\d+),?", HELPER_SOURCE, re.M))
    for name, _ in fields:
        assert int(declared.pop(f"{prefix}_{name.upper()}")) * 8 == getattr(layout, name).offset
    assert declared == {f"{prefix}_WORDS": str(ctypes.sizeof(layout) // 8)}


@pytest.mark.parametrize("prefix,members", ENUMS)
def test_the_c_source_spells_the_enums_values(prefix, members):
    for member in members:
        assert f"{prefix}_{member.name} = {int(member)}" in HELPER_SOURCE


def test_the_kernels_use_no_bare_offsets_or_modes():
    kernels = HELPER_SOURCE[HELPER_SOURCE.index("__global__"):]
    assert not re.search(r"state\[\d", kernels), "index a state block with its generated word names"
    assert not re.search(r"mode == \d|\] & \d", kernels), "compare with the generated enum constants"


def _require_nvrtc() -> None:
    """Skip only where the NVRTC library itself is missing (found before anything compiles)."""
    from cuda.pathfinder import DynamicLibNotFoundError, load_nvidia_dynamic_lib

    try:
        load_nvidia_dynamic_lib("nvrtc")
    except DynamicLibNotFoundError as e:
        pytest.skip(f"NVRTC is not installed here: {e}")


def test_nvrtc_compiles_the_helpers_and_agrees_with_the_python_layout():
    """A checker compiled with the helpers: the compiler's values of the word indices and enum
    constants equal the ctypes offsets and the Python enums (a mismatch fails the compile)."""
    from qgraph.driver.nvrtc import compile_cubin

    _require_nvrtc()
    checks = [f"static_assert({prefix}_{name.upper()} * 8 == {getattr(layout, name).offset}, \"{name}\");"
              for prefix, layout, fields in LAYOUTS for name, _ in fields]
    checks += [f"static_assert({prefix}_{m.name} == {int(m)}, \"{m.name}\");" for prefix, members in ENUMS
               for m in members]
    for cc in [(9, 0), (10, 0)]:
        assert len(compile_cubin(HELPER_SOURCE + "\n".join(checks), "layout_check.cu", cc)) > 1000


@pytest.mark.parametrize("kernel", ["qgraph_while_condition", "qgraph_loop_gate"])
def test_a_pass_costs_two_trips_to_memory_whatever_the_loop_checks(kernel):
    """The condition and gate kernels sit on the loop's critical path: the block's words are loaded
    together before any decision, then together what they point at (flag, stop record, cancel word),
    each skipped only where its pointer is 0; nothing is stored before (docs/watching.md)."""
    from qgraph.driver.nvrtc import compile_ptx

    _require_nvrtc()
    ptx = compile_ptx(HELPER_SOURCE, "next_pass.cu", (9, 0))
    body = ptx[ptx.index(f".entry {kernel}(") :]
    body = body[: body.index("\n}")]
    ops = [line.split()[0] for line in body.splitlines() if line.strip() and not line.strip().startswith(("//", "$"))]
    first_branch = next(k for k, op in enumerate(ops) if op == "bra" or op.startswith("@"))
    assert ops[:first_branch].count("ld.volatile.global.u64") == len(LOOP_FIELDS) - 2  # all but handle, trip record
    loads = [k for k, op in enumerate(ops) if op.startswith("ld.volatile.u")]  # through the block's pointers
    first_store = next(k for k, op in enumerate(ops) if op.startswith("st."))
    assert len(loads) == 3 and max(loads) < first_store
