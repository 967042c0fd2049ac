"""Runnable examples (also reachable as examples/ in the repository).

- heat_diffusion: 2D heat equation run to convergence inside one graph_while call;
- particles: a particle-system step as one multi-task cuda_graph kernel;
- jacobi: a Jacobi linear solve with a residual-based stop flag;
- mpm88: Taichi's 88-line MLS-MPM fluid, one substep (with an atomic scatter) per call;
- nbody: all-pairs gravitational N-body, leapfrog, with energy and momentum diagnostics;
- stable_fluids: Stam's stable fluids on a MAC grid, the Jacobi pressure solve in one graph_while call.
- heat_multi_gpu: a Jacobi heat solve decomposed by rows over torch.distributed ranks (NCCL halos, one
  captured CUDA graph per step; gloo on the CPU).

mpm88, nbody and stable_fluids come in two variants with the same results: "scalar" (component by
component) and "vector" (qgraph.vec2/vec3/mat22 and @qgraph.struct, as a Taichi user writes them;
mpm88_kernels, nbody, stable_fluids_vector); pick one with --variant.

Run one with `python -m qgraph.examples.heat_diffusion` (or `python examples/heat_diffusion.py`); `--help`
lists its options, and a bad size is refused naming the option. mpm88_kernels, stable_fluids_kernels,
stable_fluids_vector, ranks and command_line (the option types the examples share) are imported by the
examples; run, they say which example to run instead.
"""
