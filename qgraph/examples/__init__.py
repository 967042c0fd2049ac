"""Runnable examples (also reachable as examples/ in the repository).

- heat_diffusion: 2D heat equation run to convergence inside one graph_while call;
- particles: a particle-system step as one multi-task cuda_graph kernel;
- jacobi: a Jacobi linear solve with a residual-based stop flag.

Run one with `python -m qgraph.examples.heat_diffusion` (or `python examples/heat_diffusion.py`).
"""
