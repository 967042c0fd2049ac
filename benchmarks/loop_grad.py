"""Gradients through device loops: the ballistic workload as one `qgraph.repeat` kernel
(forward + backward in one graph), and a nonlinear loop's checkpointing cost at several spacings.

    python benchmarks/loop_grad.py [--n 65536] [--steps 200] [--repeats 20] [--json PATH] [--plot PATH.png]

The workload and rows are described in qgraph/bench/loop_gradients.py.
"""

from qgraph.bench.loop_gradients import main

if __name__ == "__main__":
    main()
