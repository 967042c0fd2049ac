"""Gradients through device loops: the ballistic workload as one `qgraph.repeat` kernel
(forward + backward in one graph), and a nonlinear loop's checkpointing cost at several spacings.

    python benchmarks/loop_grad.py [--n 65536] [--steps 200] [--repeats 20] [--json PATH] [--plot PATH.png]
    python benchmarks/loop_grad.py --long [--n 1048576] [--outer 100] [--inner 100] [--budget-mb 2048]

The workload and rows are described in qgraph/bench/loop_gradients.py; --long's (10,000 passes
within a 2 GB checkpoint budget) in qgraph/bench/long_loop_gradient.py.
"""

import sys

from qgraph.bench import long_loop_gradient, loop_gradients

if __name__ == "__main__":
    (long_loop_gradient if "--long" in sys.argv[1:] else loop_gradients).main()
