"""The CPU code generator (numba): units of tasks and the runner that walks the region tree."""
