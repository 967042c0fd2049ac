"""Custom adjoints of helpers, `@f.adjoint` on a `@qgraph.func f` (issue 49): the adjoint generator
calls the user's adjoint instead of differentiating the helper's body, on both backends, under
kernel.grad and qgraph.Tape, inside repeat and flag loops and through nested helpers; checked
against central differences and closed forms, with a deliberately different adjoint to show it is
the one used, and the errors for adjoints that do not fit their helper."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from helpers.generated import generated_module
from helpers.gradients import check_gradients

import qgraph

V = qgraph.vec2d


def _seeds(arrays: int, n: int) -> np.ndarray:
    """check_gradients' seeds (helpers.gradients.seeds_for) of `arrays` float arrays of `n` elements:
    its loss is sum(seed * array after the call) over all of them, inputs included."""
    return np.random.default_rng(7).standard_normal((arrays, n))


@qgraph.func
def safe_norm(x, y):
    return math.sqrt(x * x + y * y)


@safe_norm.adjoint
def _(x, y, adj_ret):
    r = math.sqrt(x * x + y * y) + 1e-12
    return adj_ret * x / r, adj_ret * y / r


@qgraph.kernel
def norms(a, b, out):
    for i in range(a.shape[0]):
        out[i] = safe_norm(a[i], b[i]) * a[i]


def test_safe_norm_matches_central_differences_and_its_closed_form(arch):
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal(16), rng.standard_normal(16)
    grads = check_gradients(norms, a, b, np.zeros(16), rtol=1e-6, atol=1e-8)
    sa, sb, seed = _seeds(3, 16)
    r = np.hypot(a, b)
    np.testing.assert_allclose(grads[0], sa + seed * (a * a / r + r), rtol=1e-10)
    np.testing.assert_allclose(grads[1], sb + seed * a * b / r, rtol=1e-10)


@qgraph.func
def doubled(x):
    return 2.0 * x


@doubled.adjoint
def _(x, adj_ret):
    return 3.0 * adj_ret  # deliberately not the body's derivative: the test sees which one ran


@qgraph.func
def rounded(x):
    return math.floor(x + 0.5)


@rounded.adjoint
def _(x, adj_ret):
    return adj_ret  # a straight-through estimator: the body's gradient would be 0


@qgraph.kernel
def estimators(x, y, z):
    for i in range(x.shape[0]):
        y[i] = doubled(x[i]) * x[i]
        z[i] = rounded(4.0 * x[i])


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f8", "f4"])
def test_the_custom_adjoint_is_used_not_the_body(arch, dtype):
    values = np.random.default_rng(2).uniform(-2, 2, 32).astype(dtype)
    x = qgraph.from_numpy(values, requires_grad=True)
    y = qgraph.from_numpy(np.zeros(32, dtype), requires_grad=True)
    z = qgraph.from_numpy(np.zeros(32, dtype), requires_grad=True)
    with qgraph.Tape() as tape:
        estimators(x, y, z)
    np.testing.assert_allclose(z.to_numpy(), np.floor(4 * values + 0.5))
    tape.backward(grads={y: 1.0, z: 1.0})
    assert x.grad.to_numpy().dtype == dtype
    # d(2x * x) with 3 in place of d(2x)/dx: 3x + 2x; straight through the rounding: 4
    np.testing.assert_allclose(x.grad.to_numpy(), 5 * values + 4, rtol=1e-6, atol=1e-6)


@qgraph.func
def newton_root(v):  # a while loop: the generator refuses a gradient through its body
    s = v
    while abs(s * s - v) > 1e-13 * v:
        s = 0.5 * (s + v / s)
    return s


@newton_root.adjoint
def _(v, adj_ret):
    return adj_ret * 0.5 / newton_root(v)


@qgraph.func
def newton_root_plain(v):
    s = v
    while abs(s * s - v) > 1e-13 * v:
        s = 0.5 * (s + v / s)
    return s


@qgraph.kernel
def roots(x, y):
    for i in range(x.shape[0]):
        y[i] = newton_root(x[i]) * x[i]


@qgraph.kernel
def roots_plain(x, y):
    for i in range(x.shape[0]):
        y[i] = newton_root_plain(x[i]) * x[i]


def test_a_helper_the_generator_refuses_differentiates_with_its_adjoint(arch):
    x = np.random.default_rng(4).uniform(0.5, 3.0, 12)
    grads = check_gradients(roots, x, np.zeros(12), rtol=1e-6, atol=1e-8)
    with pytest.raises(qgraph.QgraphSyntaxError, match="a gradient through a while loop"):
        check_gradients(roots_plain, x, np.zeros(12))
    sx, seed = _seeds(2, 12)
    np.testing.assert_allclose(grads[0], sx + seed * 1.5 * np.sqrt(x), rtol=1e-10)


def test_kernel_grad_uses_the_custom_adjoint(arch):
    x = qgraph.from_numpy(np.array([1.0, 4.0, 9.0]), requires_grad=True)
    y = qgraph.from_numpy(np.zeros(3), requires_grad=True)
    roots(x, y)
    y.grad.from_numpy(np.ones(3))
    roots.grad(x, y)
    np.testing.assert_allclose(x.grad.to_numpy(), [1.5, 3.0, 4.5], rtol=1e-12)


@qgraph.func
def scaled(x, n):
    return x * n


@scaled.adjoint
def _(x, n, adj_ret):
    return adj_ret * n, None  # an integer input: no adjoint (None, or any number: it is ignored)


@qgraph.func
def pair(x, c):
    return x * c, x + c


@pair.adjoint
def _(x, c, adj_a, adj_b):  # one adjoint per result
    return adj_a * c + adj_b, adj_a * x + adj_b


@qgraph.kernel
def integers_and_pairs(x, w, y, z, n: int):
    for i in range(x.shape[0]):
        a, b = pair(x[i], w[i])
        y[i] = scaled(a, n) * b
        p, _ = pair(w[i], 2.0)  # only the first result reaches the loss: the second's seed is 0
        z[i] = p * x[i]


def test_integer_inputs_and_tuple_results(arch):
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal(8), rng.standard_normal(8)
    grads = check_gradients(integers_and_pairs, x, w, np.zeros(8), np.zeros(8), 3, rtol=1e-6, atol=1e-8)
    sx, sw, sy, sz = _seeds(4, 8)
    # y = 3 (x w)(x + w), z = 2 w x
    np.testing.assert_allclose(grads[0], sx + sy * 3 * (w * (x + w) + x * w) + sz * 2 * w, rtol=1e-10)
    np.testing.assert_allclose(grads[1], sw + sy * 3 * (x * (x + w) + x * w) + sz * 2 * x, rtol=1e-10)


@qgraph.func
def length(p):
    return qgraph.norm(p)


@length.adjoint
def _(p, adj_ret):
    return adj_ret * p / (qgraph.norm(p) + 1e-300)  # a vector input's adjoint is a vector


@qgraph.func
def turned(p, c):
    return V(c * p[0] - p[1], p[0] + c * p[1])


@turned.adjoint
def _(p, c, adj):  # a vector input and a number: a tuple holding a vector
    return V(c * adj[0] + adj[1], -adj[0] + c * adj[1]), adj[0] * p[0] + adj[1] * p[1]


@qgraph.kernel
def vector_helpers(x, y):
    for i in range(x.shape[0]):
        q = turned(V(x[i], 2.0 * x[i]), x[i])
        y[i] = length(q) + q[0]


def test_vector_inputs_and_results(arch):
    x = np.random.default_rng(6).standard_normal(10)
    grads = check_gradients(vector_helpers, x, np.zeros(10), rtol=1e-6, atol=1e-8)
    sx, seed = _seeds(2, 10)
    # q = (x^2 - 2x, x + 2x^2), y = |q| + q0
    q0, q1 = x * x - 2 * x, x + 2 * x * x
    r = np.hypot(q0, q1)
    np.testing.assert_allclose(grads[0], sx + seed * ((q0 * (2 * x - 2) + q1 * (1 + 4 * x)) / r + 2 * x - 2), rtol=1e-9)


def test_helpers_and_adjoints_still_run_from_python():
    assert safe_norm(3.0, 4.0) == 5.0
    assert safe_norm.custom_adjoint(3.0, 4.0, 2.0) == pytest.approx((1.2, 1.6))
    assert scaled.custom_adjoint(2.0, 3, 1.0) == (3.0, None)


# The family: a helper whose body the generator refuses (a while loop calling another helper), with
# its adjoint (which calls the helper itself), where users call it: a plain task, inside a plain
# helper, after an inner loop, in a nonlinear qgraph.repeat region (alone and nested in another), a
# graph_while kernel and a qgraph.loop region (states kept by the tape) x float64 and float32. Each
# kernel maps x, y (n, flag: int32 counters) and k.
FAMILY_CONTEXTS = {  # (decorator arguments, body, d(loss)/dx from x and the passes k)
    "plain": (
        "",
        "    for i in range(x.shape[0]):\n        y[i] = cbrt(x[i]) * x[i]\n",
        lambda x, k: 4 / 3 * np.cbrt(x),
    ),
    "in a helper": (
        "",
        "    for i in range(x.shape[0]):\n        y[i] = outer(x[i])\n",
        lambda x, k: 4 / 3 * np.cbrt(x) + 1,
    ),
    "after an inner loop": (
        "",
        "    for i in range(x.shape[0]):\n        s = 0.0 * x[i]\n        for j in range(3):\n"
        "            s += x[i]\n        y[i] = cbrt(s / 3.0) * x[i]\n",
        lambda x, k: 4 / 3 * np.cbrt(x),
    ),
    "nested repeat": (
        "",
        "    for _ in qgraph.repeat(k):\n        for _ in qgraph.repeat(k):\n"
        "            for i in range(x.shape[0]):\n                x[i] = cbrt(x[i]) + C\n",
        lambda x, k: _iterated(x, k * k),
    ),
    "repeat": (
        "",
        "    for _ in qgraph.repeat(k):\n        for i in range(x.shape[0]):\n            x[i] = cbrt(x[i]) + C\n",
        lambda x, k: _iterated(x, k),
    ),
    "graph_while": (
        '(graph_while="flag")',
        "    for i in range(x.shape[0]):\n        x[i] = cbrt(x[i]) + C\n"
        "    n[0] += 1\n    flag[0] = 1 if n[0] < k else 0\n",
        lambda x, k: _iterated(x, k),
    ),
    "loop": (
        "",
        "    while qgraph.loop(flag):\n        for i in range(x.shape[0]):\n            x[i] = cbrt(x[i]) + C\n"
        "        n[0] += 1\n        flag[0] = 1 if n[0] < k else 0\n",
        lambda x, k: _iterated(x, k),
    ),
}
FAMILY_SOURCE = """import numpy as np
import qgraph

C = {c}


@qgraph.func
def newton_step(s, v):
    return (2.0 * s + v / (s * s)) / 3.0


@qgraph.func
def cbrt(v):
    s = v
    m = 0
    while m < 40:
        s = newton_step(s, v)
        m += 1
    return s


@cbrt.adjoint
def cbrt_adjoint(v, adj_ret):
    r = cbrt(v)
    return adj_ret / (3.0 * r * r)


@qgraph.func
def outer(v):
    return cbrt(v) * v + v


@qgraph.kernel{decorator}
def family(x, y, n, flag, k: int):
{body}"""


def _iterated(x: np.ndarray, k: int) -> np.ndarray:
    """d x_k / d x_0 of x_(j+1) = cbrt(x_j) + 0.25: the product of the passes' derivatives."""
    slope = np.ones_like(x)
    for _ in range(k):
        slope /= 3 * np.cbrt(x) ** 2
        x = np.cbrt(x) + 0.25
    return slope


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f8", "f4"])
@pytest.mark.parametrize("context", list(FAMILY_CONTEXTS))
def test_custom_adjoint_in_every_context(arch, tmp_path_factory, context, dtype):
    decorator, body, gradient = FAMILY_CONTEXTS[context]
    f4 = dtype == np.float32
    source = FAMILY_SOURCE.format(c="np.float32(0.25)" if f4 else "0.25", decorator=decorator, body=body)
    name = "custom_adjoint_" + "".join(ch for ch in context if ch.isalnum()) + ("_f4" if f4 else "_f8")
    kernel = generated_module(tmp_path_factory, name, source).family
    values = np.random.default_rng(len(context)).uniform(0.5, 2.0, 24).astype(dtype)
    x = qgraph.from_numpy(values, requires_grad=True)
    y = qgraph.from_numpy(np.zeros(24, dtype), requires_grad=True)
    n, flag = qgraph.from_numpy(np.zeros(1, np.int32)), qgraph.from_numpy(np.ones(1, np.int32))
    with qgraph.Tape() as tape:
        kernel(x, y, n, flag, 3)
    tape.backward(x if context in ("repeat", "nested repeat", "graph_while", "loop") else y)
    assert x.grad.to_numpy().dtype == dtype
    if context in ("graph_while", "loop"):
        assert kernel.stats.iterations == (3,)
    np.testing.assert_allclose(
        x.grad.to_numpy(),
        gradient(values.astype(np.float64), 3),
        rtol=1e-5 if f4 else 1e-12,
        atol=1e-6 if f4 else 1e-13,
    )


@pytest.mark.parametrize(
    "kernel,dtype",
    [(norms, "f8"), (estimators, "f4"), (vector_helpers, "f8"), (integers_and_pairs, "f8")],
    ids=["norms", "estimators", "vector_helpers", "integers_and_pairs"],
)
def test_custom_adjoints_compile_for_cuda(cuda_compiler, monkeypatch, kernel, dtype):
    """The adjoint kernels call the helper and its adjoint as device functions: PTX for sm_90."""
    from types import SimpleNamespace

    import numba.cuda.dispatcher as dispatcher
    from helpers.cuda_offline import A, S, compile_offline

    from qgraph.lang.adjoint import adjoint_source

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=(9, 0)))
    src = kernel.source
    key = tuple(S("i8") if p.annotation is not None else A(dtype, 1) for p in src.params)
    grads = tuple(p.name for p in src.params if p.annotation is None)
    full = key + tuple(A(dtype, 1) for _ in grads)
    ptx, entries, sizes = compile_offline(SimpleNamespace(source=adjoint_source(src, grads)), full)
    assert len(entries) == len(src.tasks) and all(size > 0 for size in sizes)


# -- errors ------------------------------------------------------------------------------------


@qgraph.func
def product(x, y):
    return x * y


def test_an_adjoint_takes_the_inputs_then_the_results_adjoint():
    with pytest.raises(
        qgraph.QgraphSyntaxError,
        match=r"@product\.adjoint: the adjoint takes product's inputs and "
        r"then the adjoint of its result, 3 parameters: def _\(x, y, adj_ret\); got def _\(x, adj\)",
    ):

        @product.adjoint
        def _(x, adj):
            return adj

    @qgraph.func
    def two_results(x, c):
        return x * c, x

    with pytest.raises(
        qgraph.QgraphSyntaxError,
        match=r"each of its 2 results, 4 parameters: "
        r"def _\(x, c, adj_ret0, adj_ret1\)",
    ):

        @two_results.adjoint
        def _(x, c, adj):
            return adj, adj


def test_an_adjoint_returns_one_adjoint_per_input():
    with pytest.raises(
        qgraph.QgraphSyntaxError,
        match=r"test_custom_adjoint\.py:\d+: @product\.adjoint: the "
        r"adjoint returns 1 value here; it returns one adjoint per input of product \(2\): "
        r"return adj_x, adj_y",
    ):

        @product.adjoint
        def _(x, y, adj_ret):
            if x > 0:
                return adj_ret * y, adj_ret * x
            return adj_ret * y

    with pytest.raises(qgraph.QgraphSyntaxError, match=r"the adjoint returns nothing"):

        @product.adjoint
        def _(x, y, adj_ret):
            pass

    assert product.custom_adjoint is None  # a rejected adjoint is not kept


def test_a_helper_has_one_adjoint():
    @qgraph.func
    def once(x):
        return x

    @once.adjoint
    def first(x, adj_ret):
        return adj_ret

    with pytest.raises(
        qgraph.QgraphSyntaxError,
        match=r"@once\.adjoint is used twice: once has its adjoint "
        r"\(first, line \d+\) already; a helper has one custom adjoint",
    ):

        @once.adjoint
        def second(x, adj_ret):
            return adj_ret

    assert once.custom_adjoint.__name__ == "first"


def test_adjoint_is_for_helpers_and_takes_a_function():
    with pytest.raises(
        qgraph.QgraphError,
        match=r"kernel norms: \.adjoint gives a @qgraph\.func helper its custom "
        r"adjoint; a kernel's adjoint is generated",
    ):

        @norms.adjoint
        def _(a, b, out, adj):
            return adj

    with pytest.raises(TypeError, match=r"@doubled\.adjoint decorates a Python function \(def\), got 3"):
        doubled.adjoint(3)

    @qgraph.func
    def no_inputs():
        return 1.0

    with pytest.raises(qgraph.QgraphSyntaxError, match=r"no_inputs takes no inputs"):

        @no_inputs.adjoint
        def _(adj_ret):
            return adj_ret


@qgraph.func
def squared_length(p):
    return qgraph.dot(p, p)


@squared_length.adjoint
def _(p, adj_ret):
    return 2.0 * adj_ret  # a number for a vector input


@qgraph.kernel
def lengths(x, y):
    for i in range(x.shape[0]):
        y[i] = squared_length(V(x[i], x[i]))


@qgraph.func
def element_twice(a, i):
    return 2.0 * a[i]


@element_twice.adjoint
def _(a, i, adj_ret):
    return None, None


@qgraph.kernel
def elements(x, y):
    for i in range(x.shape[0]):
        y[i] = element_twice(x, i)


def test_errors_found_when_the_kernel_is_differentiated(cpu):
    x, y = (qgraph.from_numpy(np.ones(3), requires_grad=True) for _ in range(2))
    with pytest.raises(
        qgraph.QgraphSyntaxError,
        match=r"@squared_length\.adjoint: the adjoint returns 1 number "
        r"here, and squared_length's inputs at this call have 2 \(p: vec2_float64\); return one "
        r"adjoint per input, a vector of the same type for a vector input",
    ):
        with qgraph.Tape() as tape:
            lengths(x, y)
        tape.backward(y)
    with pytest.raises(
        qgraph.QgraphSyntaxError,
        match=r"kernel elements: cannot differentiate: `element_twice` has "
        r"a custom adjoint \(@element_twice\.adjoint\), and its parameter `a` is given an array",
    ):
        with qgraph.Tape() as tape:
            elements(x, y)
        tape.backward(y)


def _raised(action) -> str:
    """The message `action()` raises (a QgraphSyntaxError's without its file and line)."""
    with pytest.raises((qgraph.QgraphError, TypeError)) as raised:
        action()
    return getattr(raised.value, "message", str(raised.value)).splitlines()[0]


def _documented(message: str) -> bool:
    """Whether a troubleshooting row's message template (`<name>` any text, `...` the rest) starts `message`."""
    for row in (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text().splitlines():
        for _, template in re.findall(r"(`+)(.+?)\1", row.split(" | ")[0]) if row.startswith("| ") else ():
            if template.startswith("<"):  # `<qgraph.func ...>`: a template that starts with any text matches all
                continue
            pattern = re.sub(r"\\\.\\\.\\\.", ".*", re.sub(r"<[^<>]+>", ".+?", re.escape(template.strip())))
            if re.match(pattern, message, re.S):
                return True
    return False


def test_every_error_has_a_troubleshooting_row(cpu):
    def signature():
        @product.adjoint
        def _(x, adj):
            return adj

    def results():
        @product.adjoint
        def _(x, y, adj_ret):
            return adj_ret

    def nothing():
        @product.adjoint
        def _(x, y, adj_ret):
            pass

    def twice():
        @doubled.adjoint
        def _(x, adj_ret):
            return adj_ret

    def no_inputs():
        @qgraph.func
        def constant():
            return 1.0

        @constant.adjoint
        def _(adj_ret):
            return adj_ret

    def differentiated(kernel):
        x, y = (qgraph.from_numpy(np.ones(3), requires_grad=True) for _ in range(2))
        with qgraph.Tape() as tape:
            kernel(x, y)
        tape.backward(y)

    actions = [
        signature,
        results,
        nothing,
        twice,
        no_inputs,
        lambda: norms.adjoint(None),
        lambda: doubled.adjoint(3),
        lambda: differentiated(lengths),
        lambda: differentiated(elements),
    ]
    missing = [message for message in map(_raised, actions) if not _documented(message)]
    assert not missing, f"docs/troubleshooting.md has no row for: {missing}"


def test_an_adjoint_given_after_a_gradient_is_used_by_the_next_one(arch):
    """A notebook defines the helper, differentiates a kernel, then gives the helper its adjoint:
    the next gradient calls it (the adjoint kernels made from the body are dropped)."""

    @qgraph.func
    def cube(x):
        return x * x * x

    @qgraph.kernel
    def cubes(x, y):
        for i in range(x.shape[0]):
            y[i] = cube(x[i])

    x = qgraph.from_numpy(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    y = qgraph.from_numpy(np.zeros(3), requires_grad=True)
    cubes(x, y)
    y.grad.fill(1.0)
    cubes.grad(x, y)
    np.testing.assert_allclose(x.grad.to_numpy(), [3.0, 12.0, 27.0])  # the body's: 3x^2

    @cube.adjoint
    def _(x, adj_ret):
        return adj_ret * 7.0

    x.grad.fill(0.0)
    y.grad.fill(1.0)
    cubes.grad(x, y)
    np.testing.assert_allclose(x.grad.to_numpy(), [7.0, 7.0, 7.0])  # the adjoint's
