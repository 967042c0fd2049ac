"""PTX text handling for CUDA programs: the entries numba-cuda's PTX defines, the parameter sizes
of each, and the `griddepcontrol` instructions and renamed twins qgraph adds (no numba here)."""

from __future__ import annotations

import re

_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+[\w$]+(?:\[(\d+)\])?")
_PTX_SIZES = {"u8": 1, "s8": 1, "b8": 1, "u16": 2, "s16": 2, "b16": 2, "f16": 2, "u32": 4, "s32": 4,
              "b32": 4, "f32": 4, "u64": 8, "s64": 8, "b64": 8, "f64": 8}


def ptx_entries(ptx: str) -> dict[str, list[int]]:
    """Every kernel entry of a PTX module, in order: its name and the byte size of each parameter."""
    found = {}
    for match in _ENTRY.finditer(ptx):
        found[match.group(1)] = [_PTX_SIZES[ptype] * (int(count) if count else 1)
                                 for ptype, count in _PARAM.findall(match.group(2))]
    return found


def ptx_entry(ptx: str) -> tuple[str, list[int]]:
    """The module's first kernel entry and the byte size of each of its parameters."""
    entries = ptx_entries(ptx)
    if not entries:
        raise RuntimeError("no .entry in the PTX numba-cuda produced")
    return next(iter(entries.items()))


def entry_text(ptx: str, entry: str) -> str | None:
    """The text of kernel `entry` in a PTX module, from its `.entry` line to the brace closing its
    body (None when the module does not define it)."""
    found = re.search(rf"^[^\n]*\.entry\s+{re.escape(entry)}\s*\(", ptx, re.M)
    if found is None:
        return None
    depth = 0
    for at in range(ptx.index(")", found.end()), len(ptx)):
        if ptx[at] == "{":
            depth += 1
        elif ptx[at] == "}":
            depth -= 1
            if depth == 0:
                return ptx[found.start():at + 1] + "\n"
    return None


_DECLARATION = re.compile(r"\s*(\.reg|\.local|\.shared|\.pragma|//|$)")


def add_grid_dependency_control(ptx: str, trigger: bool = False) -> str:
    """Start every kernel of the module with `griddepcontrol.wait;` (sm_90+), after
    `launch_dependents` if `trigger`.

    Behind a programmatic graph edge a kernel is launched before its predecessor has
    finished and waits in this first instruction until that grid has completed and its
    writes are visible; without such an edge it does nothing. `launch_dependents` lets
    the successor launch as soon as every block has started, not as they exit: worth it
    for a grid that fits in one wave, but on an H200 it cost a memory-bound kernel of many
    waves a quarter of its bandwidth, so qgraph compiles both variants and picks per node.
    numba-cuda cannot emit either, so they are inserted after the register declarations.
    """
    lines = ptx.splitlines()
    control = (["\tgriddepcontrol.launch_dependents;"] if trigger else []) + ["\tgriddepcontrol.wait;"]
    out, at = [], 0
    while at < len(lines):
        if ".entry" not in lines[at]:
            out.append(lines[at])
            at += 1
            continue
        brace = next(i for i in range(at, len(lines)) if lines[i].strip() == "{")
        body = brace + 1
        while body < len(lines) and _DECLARATION.match(lines[body]):
            body += 1
        out += lines[at:body] + control
        at = body
    return "\n".join(out) + "\n"


_MODULE_SYMBOL = re.compile(r"^\.visible\s+\.(?:shared|global|const)\s+(?:\.align\s+\d+\s+)?\.\w+\s+([\w$]+)", re.M)


def renamed(ptx: str, entries: list[str], suffix: str) -> str:
    """The same kernels with `suffix` appended to their entry names, so two variants of a module can
    share one cubin.

    Module-scope symbols numba declares (shared arrays are `.visible .shared _cudapy_smem_N`)
    are renamed too, or the linker would see them defined twice.
    """
    for entry in entries:  # the mangled name, and its parameters' names (entry_param_N)
        ptx = re.sub(rf"(?<![\w$]){re.escape(entry)}(?=_param_\d|[^\w$])", entry + suffix, ptx)
    for symbol in set(_MODULE_SYMBOL.findall(ptx)):
        ptx = re.sub(rf"(?<![\w$]){re.escape(symbol)}(?![\w$])", symbol + suffix, ptx)
    return ptx


def gated(ptx: str, entries: list[str], suffix: str) -> str:
    """The module's kernels (starting with `griddepcontrol.wait;`) renamed with `suffix`, each taking
    one more parameter, last: the device address of a word they read after the wait, returning at
    once where it is 0. These are the copies of a device loop's body after the first
    (qgraph.graphs.unroll): the word is the loop's `live`, which the gate before the copy cleared
    where the loop ends. The parameter follows the others at an 8-byte boundary. The load is a plain
    one, cached like the task's other loads of what earlier kernels wrote (visible after the wait):
    `ld.volatile` sent every warp of a 2048^2 grid to the same L2 line and cost relax 20-30%."""
    ptx = renamed(ptx, entries, suffix)
    for entry in entries:
        name = entry + suffix
        param = f"{name}_param_qg_gate"
        ptx = _with_last_param(ptx, name, param)
        text = entry_text(ptx, name)
        check = ["\t{", "\t.reg .pred %qg_gate_p;", "\t.reg .b64 %qg_gate_a;", "\t.reg .b64 %qg_gate_v;",
                 f"\tld.param.u64 %qg_gate_a, [{param}];", "\tcvta.to.global.u64 %qg_gate_a, %qg_gate_a;",
                 "\tld.global.u64 %qg_gate_v, [%qg_gate_a];",
                 "\tsetp.eq.u64 %qg_gate_p, %qg_gate_v, 0;", "\t@%qg_gate_p ret;", "\t}"]
        wait = text.index("griddepcontrol.wait;") + len("griddepcontrol.wait;")
        ptx = ptx.replace(text, text[:wait] + "\n" + "\n".join(check) + text[wait:], 1)
    return ptx


_RET = re.compile(r"^(\s*)((?:@!?%[\w$]+\s+)?)ret(?:\.uni)?;", re.M)


def gating(ptx: str, entries: list[str], suffix: str, function: str) -> str:
    """Only the module's kernels `entries` (one-thread tasks that end a flag loop's body), renamed
    with `suffix`, each taking one more parameter, last: the device address of the loop's state
    block, which it passes to the device function `function` (unsigned int f(unsigned long long*),
    driver.loop_state's qgraph_next_pass, linked from its own module) where it would return: the
    kernel does the work of the gate kernel that would follow it between unrolled copies
    (qgraph.graphs.unroll). The other kernels are left out (they have no use for the variant)."""
    for entry in ptx_entries(ptx):
        if entry not in entries:
            ptx = ptx.replace(entry_text(ptx, entry), "", 1)
    ptx = renamed(ptx, entries, suffix)
    declaration = (f".extern .func (.param .b32 {function}_ret) {function}\n"
                   f"(\n\t.param .b64 {function}_param_0\n)\n;\n")
    header = re.search(r"^\.address_size\s+\d+\s*$", ptx, re.M)
    ptx = ptx[:header.end()] + "\n" + declaration + ptx[header.end():]
    for entry in entries:
        name = entry + suffix
        param = f"{name}_param_qg_state"
        ptx = _with_last_param(ptx, name, param)
        text = entry_text(ptx, name)
        call = ["$qg_next_pass:", "\t{", "\t.reg .b64 %qg_state;", f"\tld.param.u64 %qg_state, [{param}];",
                "\t.param .b64 qg_next_pass_arg;", "\tst.param.b64 [qg_next_pass_arg], %qg_state;",
                "\t.param .b32 qg_next_pass_ret;",
                f"\tcall.uni (qg_next_pass_ret), {function}, (qg_next_pass_arg);", "\t}", "\tret;", ""]
        body = _RET.sub(r"\1\2bra $qg_next_pass;", text[:text.rindex("}")])
        ptx = ptx.replace(text, body + "\n".join(call) + "}\n", 1)
    return ptx


def _with_last_param(ptx: str, entry: str, param: str) -> str:
    """`ptx` with kernel `entry` taking one more parameter, last: `.param .u64 param`."""
    found = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(([^)]*)\)", ptx, re.S)
    params = found.group(1).rstrip()
    listed = f"{params},\n\t.param .u64 {param}\n" if params.strip() else f"\n\t.param .u64 {param}\n"
    return ptx[:found.start(1)] + listed + ptx[found.end(1):]
