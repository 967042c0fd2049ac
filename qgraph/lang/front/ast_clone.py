"""A deep copy of Python syntax trees, about four times faster than copy.deepcopy.

Code generation copies task bodies many times (flattening, precision typing, lowering, loop
shapes); copy.deepcopy's memo and reduce protocol were a fifth of a first call's code generation.
A node's fields and attributes (and anything a pass attached) are copied; strings, numbers and
None are shared, as deepcopy shares them; any other value goes through copy.deepcopy.
"""

from __future__ import annotations

import ast
import copy

_SHARED = frozenset((str, int, float, complex, bool, bytes, type(None), type(Ellipsis)))


def clone(tree):
    """A copy of `tree` (a node, or a list of nodes and lists) sharing no node with it."""
    kind = tree.__class__
    if kind is list:
        return [clone(item) for item in tree]
    if isinstance(tree, ast.AST):
        copied = kind.__new__(kind)
        fields = copied.__dict__
        for name, value in tree.__dict__.items():
            fields[name] = value if value.__class__ in _SHARED else clone(value)
        return copied
    if kind in _SHARED:
        return tree
    return copy.deepcopy(tree)
