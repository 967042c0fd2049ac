"""The PTX variants a specialisation's tasks are linked in on Hopper and newer, grouped for linking.

Every task gets a launch_dependents twin (TRIGGER); a kernel with a flag loop gets the gated twins
of both (GATED: its unrolled copies return at once once the loop ended) and, for the serial task
ending a loop body, gating variants doing the gate kernel's work (GATING), which call the device
loops' qgraph_next_pass helper. Each group is linked into its own cubin (compiler.cuda_images).
"""

from __future__ import annotations

from ..driver.loop_state import NEXT_PASS_FUNCTION, next_pass_ptx
from ..lang.front.parse import KernelSource, Task
from ..lang.front.regions import device_loops
from . import ptx_text

TRIGGER = "_qg_trigger"  # entry-name suffix of each task's launch_dependents variant
GATED = "_qg_gated"  # entry-name suffix of the variant a device loop's unrolled copies run (ptx_text.gated)
GATING = "_qg_gating"  # of the variant of a flag loop body's last, serial task doing the gate's work (ptx_text.gating)


def has_gated_variant(src: KernelSource) -> bool:
    """A kernel with a flag loop gets its tasks' gated variant (for its unrolled copies) where it waits."""
    return any(True for _ in device_loops(src.body))


def gating_tasks(body) -> set[int]:
    """The tasks that end a flag loop's body (in region `body`) and run on one thread: each gets gating
    variants, which do the work of the gate kernel between unrolled copies after their body (graphs.unroll)."""
    lasts = (loop.body.children[-1] for loop in device_loops(body) if loop.body.children)
    return {task.index for task in lasts if isinstance(task, Task) and not task.parallel}


def gating_variants(name: str, plain: str, entries: list[str]) -> list[tuple[str, str]]:
    """The gating variants (ptx_text.gating) of `entries` of module `plain`, and those gated: the last
    task of an unrolled loop's first copy, and of its gated copies. One thread: no launch_dependents twin
    (cuda_program.TaskKernel.function_for)."""
    if not entries:
        return []
    gating = ptx_text.gating(plain, entries, GATING, NEXT_PASS_FUNCTION)
    return [(f"gating_{name}", gating), (f"gating_gated_{name}", ptx_text.gated(gating, [e + GATING for e in entries],
                                                                             GATED))]


def variant_groups(src: KernelSource, ptx_list: list[tuple[str, str]], entries: list[str],
                   cc: tuple[int, int]) -> list[list[tuple[str, str]]]:
    """The waiting variants of each PTX module (name, text) of `src`'s tasks, in groups linked apart:
    plain, launch_dependents, and with a flag loop gated, gated launch_dependents, and the gating
    variants with qgraph_next_pass."""
    gated_too = has_gated_variant(src)
    ends = [entries[k] for k in gating_tasks(src.body)] if gated_too else []
    groups = []
    for name, ptx in ptx_list:
        names = list(ptx_text.ptx_entries(ptx))
        plain = ptx_text.add_grid_dependency_control(ptx)
        trigger = ptx_text.renamed(ptx_text.add_grid_dependency_control(ptx, trigger=True), names, TRIGGER)
        groups += [[(name, plain)], [(f"trigger_{name}", trigger)]]
        if gated_too:
            groups += [[(f"gated_{name}", ptx_text.gated(plain, names, GATED))],
                       [(f"gated_trigger_{name}", ptx_text.gated(trigger, [e + TRIGGER for e in names], GATED))]]
            gating = gating_variants(name, plain, [e for e in ends if e in names])
            if gating:
                groups.append(gating + [("qgraph_next_pass.ptx", next_pass_ptx(tuple(cc)))])
    return groups
