"""What numba rejects arrives as one error shape (issue 16): QgraphSyntaxError whose first line
names the file:line, the kernel and its signature, and gives a one-line reason with the fix;
numba's own words follow. Each case of docs/troubleshooting.md "When numba rejects the code"."""

from __future__ import annotations

import linecache
import math
import re

import numpy as np
import pytest

import qgraph
from qgraph.backends.numba_errors import explain


def plain_helper(v):
    return v * 2


@qgraph.kernel
def calls_a_plain_function(x):
    for i in range(x.shape[0]):
        x[i] = plain_helper(x[i])


@qgraph.kernel
def stores_a_string(x):
    for i in range(x.shape[0]):
        x[i] = "a"


@qgraph.kernel
def two_types(x):
    for i in range(x.shape[0]):
        v = 1.0
        if x[i] > 0:
            v = (1, 2)
        x[i] = v[0]


@qgraph.kernel
def unknown_attribute(x):
    for i in range(x.shape[0]):
        x[i] = x.foo


@qgraph.kernel
def too_many_indices(x):
    for i in range(x.shape[0]):
        x[i] = x[i, 0]


@qgraph.kernel
def math_of_an_array(x):
    for i in range(x.shape[0]):
        x[i] = math.sqrt(x)


@qgraph.kernel
def float_index(x):
    for i in range(x.shape[0]):
        x[i] = x[i * 0.5]


@qgraph.kernel
def branches_of_two_types(x):
    for i in range(x.shape[0]):
        x[i] = (x[i] if i > 0 else x)[0]


CASES = [
    (calls_a_plain_function, "'plain_helper' is a plain Python function: decorate it with @qgraph.func"),
    (stores_a_string, "cannot store the str 'a' into an element of a float64 array; store a number"),
    # (numba-cuda keeps the first type and fails where the tuple is indexed)
    # (numba names the two types in the order its typing met them, which its parallel passes change)
    (two_types, r"'v' is given values of two types \((float64 and a tuple|a tuple and float64)\) on different "
                r"paths; give it one type|float64 is indexed, but only arrays"),
    (unknown_attribute, "a 1-d float64 array has no attribute 'foo' in a kernel"),
    (too_many_indices, r"2 indices for a 1-d array: index it with at most 1"),
    (math_of_an_array, r"sqrt\(\) was given a whole array \(a 1-d float64 array\); kernels compute on numbers"),
    (float_index, "an array index is a float: indices are integers; convert with int"),
    # numba-cuda types the expression as the number and then fails to index it
    (branches_of_two_types, "the two sides of a conditional expression have different types|"
                            "float64 is indexed, but only arrays"),
]


@pytest.mark.parametrize("kernel,reason", CASES, ids=[k.__name__ for k, _ in CASES])
def test_numba_rejections_name_the_line_and_say_the_fix(arch, kernel, reason):
    with pytest.raises(qgraph.QgraphSyntaxError) as info:
        kernel(qgraph.from_numpy(np.ones(3)))
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{__file__}:"), first
    assert "cannot compile " in first and f"kernel {kernel.__name__} for (x: float64[1d]): " in first
    assert re.search(reason, first), first
    assert "(compiler said:)" in str(info.value)  # numba's own words follow
    line = int(first.split(":")[1])
    assert linecache.getline(__file__, line).strip() == info.value.source_line.strip()


def test_unknown_messages_keep_numbas_sentence():
    assert explain("Some future numba sentence") is None


@pytest.mark.parametrize("summary,expected", [
    (">>> setitem(array(float32, 2d, C), UniTuple(int64 x 2), none)", "is None: the expression returns nothing"),
    (">>> getitem(array(int64, 1d, A), float64)", "an array index is a float"),
    (">>> atan2(array(float64, 1d, C), float64)", "atan2() was given a whole array"),
    (">>> int(Literal[str](3))", "int() does not accept (the str '3') in a kernel"),
    ("Untyped global name 'table': Cannot determine Numba type of <class 'dict'>",
     "the global 'table' is a dict, which kernels cannot use: pass it as an argument"),
])
def test_explanations_of_numba_summaries(summary, expected):
    assert expected in explain(summary)
