"""lang/front/ast_clone: the syntax-tree copy code generation uses instead of copy.deepcopy."""

from __future__ import annotations

import ast
import copy
import inspect

import numpy as np

from qgraph.lang.flat import flatten
from qgraph.lang.front.ast_clone import clone


def test_a_clone_equals_the_tree_with_its_positions_and_shares_no_node():
    tree = ast.parse(inspect.getsource(flatten))
    copied = clone(tree)
    assert ast.dump(copied, include_attributes=True) == ast.dump(tree, include_attributes=True)
    originals = {id(node) for node in ast.walk(tree)}
    assert not [node for node in ast.walk(copied) if id(node) in originals]
    compile(copied, "flatten.py", "exec")


def test_what_a_pass_attached_is_copied_and_values_other_than_atoms_are_deep_copies():
    node = ast.Constant(np.float32(1.5))
    node.facts = {"nonnegative": True}
    expr = ast.BinOp(node, ast.Add(), ast.Name("x", ast.Load()))
    copied = clone([expr, [expr.right]])
    assert copied[0].left.facts == {"nonnegative": True} and copied[0].left.facts is not node.facts
    assert copied[0].left.value == np.float32(1.5) and type(copied[0].left.value) is np.float32
    copied[0].right.id = "y"
    assert expr.right.id == "x" and copied[1][0].id == "x"


def test_a_clone_is_what_deepcopy_gives():
    tree = ast.parse("for i in range(n):\n    a[i] = b[i] * 2.0 if i % 2 else -b[i]\n")
    assert ast.dump(clone(tree), include_attributes=True) == ast.dump(copy.deepcopy(tree), include_attributes=True)
