"""The test suite's one shared library: what more than one test module uses (kernels, numeric
checks, offline CUDA compiles, the arch helpers behind conftest's fixtures). Test modules import
from here, never from each other; tests/ is on sys.path (pyproject's pythonpath), so `helpers.x`
resolves from any test directory."""
