"""Gradient of a ballistic particle simulation, side by side: qgraph (eager and captured), CUDA C++, JAX, PyTorch.

    python benchmarks/ballistic_grad.py [--n 65536] [--steps 200] [--repeats 20]

The workload and rows are described in qgraph/bench/gradients.py; the same rows run inside
`python -m qgraph bench` on CUDA.
"""

from qgraph.bench.gradients import main

if __name__ == "__main__":
    main()
