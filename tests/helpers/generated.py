"""Modules made of generated source (the generated families' kernels)."""

from __future__ import annotations

import importlib.util


def generated_module(tmp_path_factory, name: str, source: str):
    """The module `name` made of `source`, written to a file of its own (qgraph reads kernels' source)
    and imported: the generated families' kernels."""
    path = tmp_path_factory.mktemp(name) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
