"""A gradient fuzzer: random qgraph programs (a small grammar of the kernel language, kernels
called once and differentiated with kernel.grad, or recorded on a Tape, device loops and graph
steps) whose adjoint is checked against float64 central differences.

    python -m qgraph.fuzz --seeds 0:2000 --arch cpu --jobs 4

Written against the public names (`import qgraph`) only, as bench/ is.
"""

from .check import FAILURES, VERDICTS, Result, check
from .programs import Program, generate
from .runner import fuzz

__all__ = ["FAILURES", "VERDICTS", "Program", "Result", "check", "fuzz", "generate"]
