"""The CUDA code generator (numba-cuda): one kernel per task, its thread mapping, 32-bit
addressing and reductions."""
