"""What the examples' command lines share: option types that turn a bad size into argparse's
one-line error naming the option (instead of a traceback from deep in a run), and what the
helper modules say when they are run instead of imported."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def int_at_least(low: int, why: str = "") -> Callable[[str], int]:
    """An argparse `type=`: an integer of at least `low`; `why` tells the user the reason."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}{f' ({why})' if why else ''}, got {value}")
        return value

    return parse


def even_int_at_least(low: int, why: str = "") -> Callable[[str], int]:
    """An argparse `type=`: an even integer of at least `low`."""
    at_least = int_at_least(low, why)

    def parse(text: str) -> int:
        value = at_least(text)
        if value % 2:
            raise argparse.ArgumentTypeError(f"must be even{f' ({why})' if why else ''}, got {value}")
        return value

    return parse


def helper_module(name: str, doc: str, users: tuple[str, ...], argv: list[str] | None = None) -> int:
    """`python -m qgraph.examples.<name>` of a module the examples import: say what it is and
    which example to run instead. Exit status 0 for --help, else 2 (nothing was run)."""
    argv = sys.argv[1:] if argv is None else argv
    asked = any(a in ("-h", "--help") for a in argv)
    summary = " ".join(doc.strip().split("\n\n")[0].split())
    print(f"qgraph.examples.{name}: {summary}\n"
          f"It is imported by {', '.join(users)}, not run: run `python -m qgraph.examples.{users[0]}` "
          f"(--help lists its options).", file=sys.stdout if asked else sys.stderr)
    return 0 if asked else 2


if __name__ == "__main__":
    sys.exit(helper_module("command_line", __doc__, ("heat_diffusion", "jacobi", "particles", "mpm88", "nbody",
                                                     "stable_fluids", "heat_multi_gpu")))
