"""Task splitting and every decoration-time error the SPEC names, with its message."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph
from qgraph import QgraphSyntaxError


def lines_of(fn):
    return fn.__code__.co_firstlineno


def test_task_split_parallel_and_serial_runs():
    @qgraph.kernel
    def k(x, y, n):
        """Docstrings are not tasks."""
        y[0] = 1.0
        y[1] = 2.0
        for i in range(n):
            x[i] = i
        for i, j in qgraph.ndrange(2, (1, 3)):
            x[i + j] = 0
        y[2] = 3.0
        for i in range(2, n, 2):
            x[i] = 1

    kinds = [(t.kind, t.loop_vars) for t in k.tasks]
    assert kinds == [("serial", ()), ("parallel", ("i",)), ("parallel", ("i", "j")), ("serial", ()),
                     ("parallel", ("i",))]
    assert k.stats.num_tasks == 5
    assert k.tasks[1].lineno == lines_of(k.__wrapped__) + 5


def test_nested_loops_are_serial_inside_a_task():
    @qgraph.kernel
    def k(x):
        if x.shape[0] > 0:
            for i in range(x.shape[0]):
                x[i] = 0

    assert [t.kind for t in k.tasks] == ["serial"]


def test_decorator_with_and_without_arguments():
    def body(x):
        for i in range(x.shape[0]):
            x[i] = 1

    plain = qgraph.kernel(body)
    graphed = qgraph.kernel(cuda_graph=True)(body)
    looped = qgraph.kernel(graph_while="x")(body)
    assert not plain.cuda_graph and graphed.cuda_graph and looped.cuda_graph
    assert looped.graph_while == "x"
    assert isinstance(plain, qgraph.Kernel)


def test_return_with_a_value():
    with pytest.raises(QgraphSyntaxError, match="return with a value") as info:
        @qgraph.kernel
        def k(x):
            x[0] = 1
            return x

    assert "return x" in str(info.value) and info.value.filename == __file__


def test_bare_return_inside_a_task():
    with pytest.raises(QgraphSyntaxError, match="use if/else"):
        @qgraph.kernel
        def k(x):
            if x[0] > 0:
                return
            x[0] = 1


def test_trailing_bare_return_is_allowed():
    @qgraph.kernel
    def k(x):
        x[0] = 1
        return

    assert len(k.tasks) == 1


def test_local_assigned_in_one_task_read_in_another():
    with pytest.raises(QgraphSyntaxError, match=r"'scale' is assigned in task 0 .* read in task 1") as info:
        @qgraph.kernel
        def k(x):
            scale = 2.0
            for i in range(x.shape[0]):
                x[i] *= scale

    assert "x[i] *= scale" in str(info.value)


def test_loop_index_read_after_the_loop():
    with pytest.raises(QgraphSyntaxError, match="'i' is assigned in task 0"):
        @qgraph.kernel
        def k(x):
            for i in range(x.shape[0]):
                x[i] = 0
            x[0] = i


def test_graph_while_name_that_is_not_a_parameter():
    with pytest.raises(QgraphSyntaxError, match=r"graph_while='flag' names no parameter of k\(x, done\)"):
        @qgraph.kernel(graph_while="flag")
        def k(x, done):
            x[0] = 1


@pytest.mark.parametrize("snippet,message", [
    ("try:\n        x[0] = 1\n    except Exception:\n        pass", "try/except"),
    ("with open('f') as f:\n        pass", "with-statements"),
    ("f = lambda v: v\n    x[0] = f(1)", "lambda"),
    ("def inner():\n        pass", "nested function"),
    ("raise ValueError('no')", "raise"),
    ("assert x[0] == 0", "assert"),
    ("import math", "import"),
    ("global g\n    g = 1", "global"),
    ("del x", "del"),
])
def test_unsupported_statements(tmp_path, snippet, message):
    path = tmp_path / "kern.py"
    path.write_text(f"import qgraph\n\n@qgraph.kernel\ndef k(x):\n    {snippet}\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("kern_mod", path)
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(QgraphSyntaxError, match=message) as info:
        spec.loader.exec_module(module)
    assert info.value.filename == str(path) and info.value.lineno == 5


def test_break_out_of_a_parallel_loop():
    with pytest.raises(QgraphSyntaxError, match="break cannot leave a parallel loop"):
        @qgraph.kernel
        def k(x):
            for i in range(x.shape[0]):
                if x[i] > 0:
                    break


def test_break_in_a_nested_serial_loop_is_fine():
    @qgraph.kernel
    def k(x):
        for i in range(x.shape[0]):
            for j in range(3):
                if j == 1:
                    break
                x[i] = j

    assert k.tasks[0].parallel


def test_ndrange_outside_a_top_level_loop():
    with pytest.raises(QgraphSyntaxError, match="ndrange is only allowed"):
        @qgraph.kernel
        def k(x):
            if x.shape[0]:
                for i, j in qgraph.ndrange(2, 2):
                    x[i] = j


def test_ndrange_needs_one_variable_per_bound():
    with pytest.raises(QgraphSyntaxError, match="needs 2 loop variables"):
        @qgraph.kernel
        def k(x):
            for i in qgraph.ndrange(2, 2):
                x[i] = 0


def test_range_with_too_many_arguments():
    with pytest.raises(QgraphSyntaxError, match="1 to 3 positional arguments"):
        @qgraph.kernel
        def k(x):
            for i in range(0, 1, 1, 1):
                x[i] = 0


def test_loop_bound_from_a_local_variable():
    with pytest.raises(QgraphSyntaxError, match="bounds of the loop .* use the local variable 'm'"):
        @qgraph.kernel
        def k(x):
            m = 3
            for i in range(m):
                x[i] = 0


def test_star_args_and_reserved_parameter_names():
    with pytest.raises(QgraphSyntaxError, match=r"\*args"):
        @qgraph.kernel
        def k(*xs):
            pass
    with pytest.raises(QgraphSyntaxError, match="'stream' is reserved"):
        @qgraph.kernel
        def k2(x, stream):
            x[0] = 1


def test_graph_while_must_be_a_string():
    with pytest.raises(TypeError, match="graph_while must be a parameter name"):
        qgraph.kernel(graph_while=3)


@qgraph.kernel
def calls_unknown(x):
    x[0] = helper_that_does_not_exist(1)  # noqa: F821


@qgraph.kernel
def inner_kernel(x):
    x[0] = 1


@qgraph.kernel
def calls_a_kernel(x):
    inner_kernel(x)


def test_undefined_name_at_first_call(arch):
    with pytest.raises(QgraphSyntaxError, match="name 'helper_that_does_not_exist' is not defined"):
        calls_unknown(qgraph.ndarray(qgraph.f64, (1,)))


def test_kernel_calling_a_kernel(arch):
    with pytest.raises(QgraphSyntaxError, match="cannot call another kernel"):
        calls_a_kernel(qgraph.ndarray(qgraph.f64, (1,)))


@qgraph.kernel(graph_while="flag")
def loop_body(x, flag):
    x[0] += 1
    flag[0] = 0


@pytest.mark.parametrize("dtype,shape", [(np.float32, (1,)), (np.int64, ()), (np.int32, (2,)), (np.int32, (1, 1))])
def test_graph_while_flag_must_be_int32_shape_0d_or_1(arch, dtype, shape):
    x = qgraph.ndarray(qgraph.f64, (1,))
    flag = qgraph.ndarray(dtype, shape)
    with pytest.raises(TypeError, match="flag 'flag' must be an int32 array of shape"):
        loop_body(x, flag)
    loop_body(x, qgraph.ndarray(qgraph.i32, (1,)))  # the next good call works
    assert x.to_numpy()[0] == 1


def test_host_numpy_array_on_cuda_names_the_argument_and_fix(cuda):
    with pytest.raises(TypeError, match=r"argument 'x' is a host NumPy array .* qgraph.from_numpy\(x\)"):
        inner_kernel(np.zeros(3))
    x = qgraph.ndarray(qgraph.f64, (1,))
    inner_kernel(x)
    assert x.to_numpy()[0] == 1


def test_unsupported_argument_type(arch):
    with pytest.raises(TypeError, match="argument 'x': str is not a supported kernel argument"):
        inner_kernel("nope")


def test_unsupported_dtype(cpu):
    with pytest.raises(TypeError, match="argument 'x': dtype complex128 is not supported"):
        inner_kernel(np.zeros(2, np.complex128))
    with pytest.raises(TypeError, match="dtype complex128 is not supported"):
        qgraph.from_numpy(np.zeros(2, np.complex128))


def test_source_must_be_readable():
    namespace: dict = {}
    exec("def made_by_exec(x):\n    x[0] = 1\n", namespace)
    with pytest.raises(QgraphSyntaxError, match="cannot read the source"):
        qgraph.kernel(namespace["made_by_exec"])


def test_kernel_repr_and_tasks_are_inspectable():
    assert "inner_kernel" in repr(inner_kernel) and "1 tasks" in repr(inner_kernel)
    assert inner_kernel.tasks[0].kind == "serial"


def test_loop_bounds_cannot_read_array_elements():
    with pytest.raises(QgraphSyntaxError, match=r"loop bounds cannot read array elements \(count\[0\]\)"):
        @qgraph.kernel
        def k(x, count):
            for i in range(count[0]):
                x[i] = 0


@qgraph.kernel
def takes_scalars(out, a: float, n: qgraph.i32):
    out[0] = a * n


def test_annotated_scalars_reject_arrays_and_overflow(arch):
    out = qgraph.ndarray(qgraph.f64, (1,))
    with pytest.raises(TypeError, match="argument 'a': expected a float scalar, got an array"):
        takes_scalars(out, out, 1)
    with pytest.raises(TypeError, match="argument 'n': 1099511627776 does not fit in int32"):
        takes_scalars(out, 1.0, 2**40)
    takes_scalars(out, 1.5, 4)
    assert out.to_numpy()[0] == 6.0


@qgraph.kernel
def stepped(x, step):
    x[0] = 1.0
    for i in range(0, x.shape[0], step):
        x[i] = 2.0


def test_zero_step_names_the_loop_line(arch):
    with pytest.raises(QgraphSyntaxError, match="range\\(\\) arg 3 must not be zero") as info:
        stepped(qgraph.ndarray(qgraph.f64, (4,)), 0)
    assert info.value.lineno == stepped.tasks[1].lineno
