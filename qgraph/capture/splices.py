"""The generated function a traced step's replay runs to put its new numbers in the step graph.

Straight-line code, one block per traced value: pack it, compare with what the graph holds, and where
it differs write the bytes into each node's parameter buffer and update the node
(cuGraphExecKernelNodeSetParams), or into the parameter block's loader (capture/number_block.py),
updated once at the end. No loop, no lookup: a replay's host time is the updates themselves.
"""

from __future__ import annotations

from collections.abc import Callable

from ..args.kinds import arg_type


def splicer(groups: dict, built, label: str, memory: dict) -> Callable:
    """splice(values, reset) -> nodes updated: one generated straight-line function writing each group's
    packed value into its nodes' parameter bytes and updating those nodes, where the packed value differs
    from what they hold (`reset`: only note what they hold now, after a full update); then the values
    read from the parameter block (`memory`) into its loaders' bytes, each loader updated once."""
    from ..driver.device import driver, fail
    from ..lang import generated

    ns: dict = {"_set": driver().cuGraphExecKernelNodeSetParams, "_fail": fail, "_bh": built.held, "_stats":
                built.stats}
    out = generated.Lines()
    out.line("n = 0")
    for g, ((i, sig), calls) in enumerate(groups.items()):
        ns[f"_pack{g}"], ns[f"_h{g}"] = arg_type(sig).pack, [None]
        out.line(f"p = _pack{g}(values[{i}])")
        with out.block(f"if p != _h{g}[0]:"):
            out.line(f"_h{g}[0] = p")
            with out.block("if not reset:"):
                for j, places in calls:
                    out.line(f"_bh[{j}] = None")  # the call's packs are no longer those the graph holds
                    for x, place in enumerate(places):
                        name = f"_{g}_{j}_{x}"
                        ns.update({f"_d{name}": place.data, f"_b{name}": place.blocks, f"_e{name}": place.exec,
                                   f"_n{name}": place.handle, f"_p{name}": place.params})
                        out.line(f"_d{name}[{place.offset}:{place.offset} + len(p)] = p",
                                 f"_b{name}[{place.index}] = None",
                                 f"r = _set(_e{name}, _n{name}, _p{name})[0]")
                        with out.block("if r:"):
                            out.line(f"raise _fail(r, 'updating a traced number of step {label}')")
                    out.line(f"n += {len(places)}")
    loaders = sorted({loader for _, loader, _ in memory.values()})
    for loader in loaders:
        buffer, params, _ = built.block.buffers[loader]
        ns.update({f"_ld{loader}": buffer.data, f"_lp{loader}": params, f"_ln{loader}": built.block.nodes[loader],
                   "_lx": built.exec})
        out.line(f"d{loader} = False")
    for g, ((i, _), (pack, loader, offset)) in enumerate(memory.items()):
        ns[f"_mpack{g}"], ns[f"_mh{g}"] = pack, [bytes(built.block.buffers[loader][0].data[offset:offset + 8])]
        out.line(f"p = _mpack{g}(values[{i}])")
        with out.block(f"if p != _mh{g}[0][:len(p)]:"):
            out.line(f"_mh{g}[0] = p", f"_ld{loader}[{offset}:{offset} + len(p)] = p", f"d{loader} = True")
    for loader in loaders:
        with out.block(f"if d{loader}:"):
            out.line(f"r = _set(_lx, _ln{loader}, _lp{loader})[0]")
            with out.block("if r:"):
                out.line(f"raise _fail(r, 'updating the number loader of step {label}')")
            out.line("n += 1")
    out.line("_stats.node_updates += n", "return n")
    source = out.function(f"splice(values, reset, {', '.join(f'{c}={c}' for c in ns)})")
    return generated.function(source, "splice", f"number splices of {label}", dict(ns))
