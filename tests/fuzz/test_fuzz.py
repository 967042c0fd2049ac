"""The gradient fuzzer (qgraph.fuzz): its quick set of random programs gives no wrong gradient and
no crash on every backend (a failure prints each failing program's source, the gradients that
differ or the traceback); programs are a function of their seed; the mix of program forms is the
one the fuzzer promises. The full run is `python -m qgraph.fuzz --seeds 0:2000 --arch cpu`."""

from __future__ import annotations

from collections import Counter

from qgraph.fuzz import FAILURES, fuzz, generate
from qgraph.fuzz.cli import parse_seeds, table

QUICK = range(0, 24)


def test_quick_set_has_no_wrong_gradient_and_no_crash(arch, tmp_path):
    results = fuzz(QUICK, tmp_path)
    failed = [r for r in results if r.verdict in FAILURES]
    assert not failed, f"{len(failed)} of {len(results)} programs failed:\n\n" + "\n\n".join(r.report() for r in failed)
    invalid = [r for r in results if r.verdict == "invalid"]  # generator bugs: the forward pass must run
    assert not invalid, "\n\n".join(r.report() for r in invalid)
    print(table(results))


def test_a_program_is_a_function_of_its_seed():
    a, b = generate(17), generate(17)
    assert a.source == b.source and a.features == b.features
    assert all((x.init == y.init).all() for x, y in zip(a.arrays, b.arrays))
    assert generate(18).source != a.source


def test_the_mix_of_program_forms():
    """Roughly 40% kernel.grad programs, 45% tape programs, 15% device loops and steps."""
    modes = Counter(next(f for f in generate(s).features if f.startswith("mode_")) for s in range(600))
    single = modes["mode_grad"] / 600
    taped = modes["mode_tape"] / 600
    loops = 1 - single - taped
    assert 0.33 < single < 0.47 and 0.38 < taped < 0.52 and 0.10 < loops < 0.20, modes


def test_seed_lists():
    assert parse_seeds("0:3") == [0, 1, 2] and parse_seeds("17") == [17] and parse_seeds("1,5:7") == [1, 5, 6]
