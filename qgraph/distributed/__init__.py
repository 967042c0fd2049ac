"""Several GPUs (or CPU processes) solving one problem: `Group` and its collectives, usable inside
@qgraph.graph steps and their graph_while device loops."""

from .group import Group

__all__ = ["Group"]
