"""Small vectors and matrices in kernels (lang.flat.flatten): every operation against NumPy on
random data, on both backends; arrays of vectors, component atomics and reductions,
@qgraph.func helpers written once for 2 and 3 components, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph

RNG = np.random.default_rng(7)
N = 37


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def well_conditioned(n, k):
    return (rand(n, k, k) * 0.3 + np.eye(k, dtype=np.float32) * 2).astype(np.float32)


@qgraph.kernel
def vector_ops(a: qgraph.vec3[:], b: qgraph.vec3[:], s, out: qgraph.vec3[:], scal):
    for i in range(a.shape[0]):
        u = a[i]
        v = b[i]
        w = (u + v) * 2.0 - v / 4 + s[i] * u - (-u)
        w += qgraph.cross(u, v)
        w -= 0.5
        out[i] = qgraph.normalized(w) + u.zyx + qgraph.vec3(v.x, 1.0, u[2])
        scal[i, 0] = qgraph.dot(u, v)
        scal[i, 1] = qgraph.norm(u) + u.norm_sqr()
        scal[i, 2] = u.dot(v) + len(u) + sum(v) + min(u) + max(v)
        scal[i, 3] = qgraph.cross(qgraph.vec2(u.x, u.y), qgraph.vec2(v.x, v.y))


def test_vector_arithmetic_matches_numpy(arch):
    a, b, s = rand(N, 3), rand(N, 3), rand(N)
    out = qgraph.ndarray(qgraph.vec3, (N,))
    scal = qgraph.ndarray(qgraph.f32, (N, 4))
    vector_ops(qgraph.from_numpy(a), qgraph.from_numpy(b), qgraph.from_numpy(s), out, scal)
    w = (a + b) * 2 - b / 4 + s[:, None] * a + a + np.cross(a, b) - 0.5
    ref = w / np.linalg.norm(w, axis=1, keepdims=True) + a[:, ::-1] + np.stack([b[:, 0], np.ones(N), a[:, 2]], 1)
    got = out.to_numpy()
    assert got.dtype == np.float32 and got.shape == (N, 3)
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5)
    sc = scal.to_numpy()
    np.testing.assert_allclose(sc[:, 0], (a * b).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sc[:, 1], np.linalg.norm(a, axis=1) + (a * a).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sc[:, 2], (a * b).sum(1) + 3 + b.sum(1) + a.min(1) + b.max(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sc[:, 3], a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0], rtol=1e-5, atol=1e-5)


@qgraph.kernel
def matrix_ops(m: qgraph.mat33[:], x: qgraph.vec3[:], out: qgraph.mat33[:], vec: qgraph.vec3[:], scal):
    for i in range(m.shape[0]):
        a = m[i]
        v = x[i]
        out[i] = a @ a.transpose() + qgraph.outer(v, v) - 2.0 * qgraph.mat33.identity() + a.T * 0.5
        vec[i] = a @ v + v @ a + qgraph.inverse(a) @ v
        scal[i, 0] = qgraph.determinant(a)
        scal[i, 1] = qgraph.trace(a) + a[1, 2] + a[2][0]
        scal[i, 2] = v @ v


def test_matrix_operations_match_numpy(arch):
    m, x = well_conditioned(N, 3), rand(N, 3)
    out = qgraph.ndarray(qgraph.mat33, (N,))
    vec = qgraph.ndarray(qgraph.vec3, (N,))
    scal = qgraph.ndarray(qgraph.f32, (N, 3))
    matrix_ops(qgraph.from_numpy(m), qgraph.from_numpy(x), out, vec, scal)
    mt = m.transpose(0, 2, 1)
    ref = m @ mt + np.einsum("ni,nj->nij", x, x) - 2 * np.eye(3) + 0.5 * mt
    assert out.to_numpy().shape == (N, 3, 3)
    np.testing.assert_allclose(out.to_numpy(), ref, rtol=1e-4, atol=1e-4)
    ref_v = np.einsum("nij,nj->ni", m, x) + np.einsum("ni,nij->nj", x, m) + np.einsum("nij,nj->ni", np.linalg.inv(m), x)
    np.testing.assert_allclose(vec.to_numpy(), ref_v, rtol=1e-4, atol=1e-4)
    sc = scal.to_numpy()
    np.testing.assert_allclose(sc[:, 0], np.linalg.det(m), rtol=1e-4)
    np.testing.assert_allclose(sc[:, 1], np.trace(m, axis1=1, axis2=2) + m[:, 1, 2] + m[:, 2, 0], rtol=1e-5)
    np.testing.assert_allclose(sc[:, 2], (x * x).sum(1), rtol=1e-5)


@qgraph.kernel
def two_by_two(m: qgraph.mat22[:], out: qgraph.mat22[:], det):
    for i in range(m.shape[0]):
        a = m[i]
        out[i] = qgraph.inverse(a) @ qgraph.mat22(1.0, 2.0, 3.0, 4.0) + qgraph.mat22(a[0], a[1])
        det[i] = a.determinant()


def test_2x2_inverse_determinant_and_constructors(arch):
    m = well_conditioned(N, 2)
    out = qgraph.ndarray(qgraph.mat22, (N,))
    det = qgraph.ndarray(qgraph.f32, (N,))
    two_by_two(qgraph.from_numpy(m), out, det)
    ref = np.linalg.inv(m) @ np.array([[1, 2], [3, 4]], np.float32) + m
    np.testing.assert_allclose(out.to_numpy(), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(det.to_numpy(), np.linalg.det(m), rtol=1e-4)


@qgraph.func
def spring(d, k):
    """Written once: works for vec2 and vec3 (specialised per argument types)."""
    r = qgraph.norm(d)
    return -k * (r - 1.0) * d / r


@qgraph.kernel
def springs(p2: qgraph.vec2[:], p3: qgraph.vec3[:], f2: qgraph.vec2[:], f3: qgraph.vec3[:], k: float):
    for i in range(p2.shape[0]):
        f2[i] = spring(p2[i], k)
        f3[i] = spring(d=p3[i], k=k)


def test_a_func_is_generic_over_vector_lengths(arch):
    p2, p3 = rand(N, 2) + 2, rand(N, 3) + 2
    f2, f3 = qgraph.ndarray(qgraph.vec2, (N,)), qgraph.ndarray(qgraph.vec3, (N,))
    springs(qgraph.from_numpy(p2), qgraph.from_numpy(p3), f2, f3, 3.0)
    for p, f in ((p2, f2), (p3, f3)):
        r = np.linalg.norm(p, axis=1, keepdims=True)
        np.testing.assert_allclose(f.to_numpy(), -3 * (r - 1) * p / r, rtol=1e-5, atol=1e-5)


@qgraph.kernel
def scatter(cell, value: qgraph.vec2[:], grid: qgraph.vec2[:], total):
    for i in range(cell.shape[0]):
        grid[cell[i]] += value[i]  # shared elements: one atomic per component
        total[()] += value[i]  # loop-invariant: a reduction per component


def test_vector_scatter_and_reduction(arch):
    cell = RNG.integers(0, 5, 1000).astype(np.int32)
    value = rand(1000, 2)
    grid, total = qgraph.ndarray(qgraph.vec2, (5,)), qgraph.ndarray(qgraph.vec2, ())
    scatter(qgraph.from_numpy(cell), qgraph.from_numpy(value), grid, total)
    ref = np.zeros((5, 2), np.float64)
    np.add.at(ref, cell, value)
    np.testing.assert_allclose(grid.to_numpy(), ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(total.to_numpy(), value.astype(np.float64).sum(0), rtol=1e-4, atol=1e-3)


@qgraph.kernel
def rows_of_plain_arrays(pos, vel, dt: float):
    for i in range(pos.shape[0]):
        p = qgraph.vec2(pos[i])  # a row of a plain (n, 2) array read as a vector
        v = qgraph.vec2(vel[i])
        if p.x < 0.0:
            v = qgraph.vec2(-v.x, v.y)
        else:
            v *= 0.5
        pos[i] = p + dt * v


def test_rows_of_plain_arrays_and_branches(arch):
    pos, vel = rand(N, 2), rand(N, 2)
    dp, dv = qgraph.from_numpy(pos), qgraph.from_numpy(vel)
    rows_of_plain_arrays(dp, dv, 0.1)
    v = np.where(pos[:, :1] < 0, vel * [-1, 1], vel * 0.5)
    np.testing.assert_allclose(dp.to_numpy(), pos + np.float32(0.1) * v, rtol=1e-6, atol=1e-6)


@qgraph.kernel
def loop_carried(x: qgraph.vec3[:], out: qgraph.vec3[:], n: int):
    for i in range(x.shape[0]):
        acc = qgraph.vec3(0.0)
        for k in range(n):
            acc = acc * 0.5 + x[i] * float(k)
            acc[k % 3] += 1.0
        out[i] = acc if n > 2 else -acc


def test_loops_dynamic_components_and_conditional_vectors(arch):
    x = rand(N, 3)
    out = qgraph.ndarray(qgraph.vec3, (N,))
    loop_carried(qgraph.from_numpy(x), out, 5)
    acc = np.zeros((N, 3), np.float32)
    for k in range(5):
        acc = acc * 0.5 + x * k
        acc[:, k % 3] += 1
    np.testing.assert_allclose(out.to_numpy(), acc, rtol=1e-5, atol=1e-5)


@qgraph.kernel
def component_stores(a: qgraph.vec2[:], m: qgraph.mat22[:], out: qgraph.vec2[:], mout: qgraph.mat22[:]):
    for i in range(a.shape[0]):
        v = a[i]
        v.x = 5.0
        v.y -= 1.0
        v[0] += a[i].y
        out[i] = v
        out[i].y *= 2.0
        out[i][0] -= 0.5
        b = m[i]
        b[0, 1] = 7.0
        b[1][0] *= 3.0
        mout[i] = b
        mout[i][1, 1] += 1.0


def test_component_stores_and_updates(arch):
    """`v.x = e`, `v.y -= e`, `v[0] += e`, `m[0, 1] = e` on locals and on array elements."""
    a, m = rand(N, 2), rand(N, 2, 2)
    out, mout = qgraph.ndarray(qgraph.vec2, (N,)), qgraph.ndarray(qgraph.mat22, (N,))
    component_stores(qgraph.from_numpy(a), qgraph.from_numpy(m), out, mout)
    ref = np.stack([5 + a[:, 1] - 0.5, (a[:, 1] - 1) * 2], 1)
    np.testing.assert_allclose(out.to_numpy(), ref, rtol=1e-6, atol=1e-6)
    mref = m.copy()
    mref[:, 0, 1] = 7
    mref[:, 1, 0] *= 3
    mref[:, 1, 1] += 1
    np.testing.assert_allclose(mout.to_numpy(), mref, rtol=1e-6, atol=1e-6)


def test_numpy_arrays_pass_for_vector_parameters(arch):
    a, b, s = rand(4, 3), rand(4, 3), rand(4)
    out = qgraph.from_numpy(np.zeros((4, 3), np.float32))  # plain (4, 3): read as vec3 through the annotation
    scal = qgraph.ndarray(qgraph.f32, (4, 4))
    vector_ops(qgraph.from_numpy(a), qgraph.from_numpy(b), qgraph.from_numpy(s), out, scal)
    assert np.isfinite(out.to_numpy()).all()
    with pytest.raises(TypeError, match=r"argument 'out': its last dimension\(s\) must be \(3,\)"):
        vector_ops(qgraph.from_numpy(a), qgraph.from_numpy(b), qgraph.from_numpy(s),
                   qgraph.from_numpy(np.zeros((4, 2), np.float32)), scal)
    with pytest.raises(TypeError, match="argument 'out': expected an array of 3-component float32"):
        vector_ops(qgraph.from_numpy(a), qgraph.from_numpy(b), qgraph.from_numpy(s),
                   qgraph.from_numpy(np.zeros((4, 3), np.float64)), scal)


def test_host_versions_of_the_types_and_functions():
    v = qgraph.vec3(1, 2, 3)
    assert v.dtype == np.float32 and v.shape == (3,)
    np.testing.assert_array_equal(qgraph.mat22(1, 2, 3, 4), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(qgraph.mat22(qgraph.vec2(1, 2), qgraph.vec2(3, 4)), [[1, 2], [3, 4]])
    assert qgraph.vector(2, qgraph.i32)(7).dtype == np.int32
    assert qgraph.dot(v, v) == 14 and qgraph.cross(qgraph.vec2(1, 0), qgraph.vec2(0, 1)) == 1
    np.testing.assert_allclose(qgraph.inverse(qgraph.mat22(2, 0, 0, 4)), [[0.5, 0], [0, 0.25]])
    assert repr(qgraph.vec3[:]) == "qgraph.vec3[:]"
    with pytest.raises(ValueError, match="vector length must be an int from 1 to 4"):
        qgraph.vector(5)
    with pytest.raises(TypeError, match="vec3 takes 1 or 3 values"):
        qgraph.vec3(1, 2)


@qgraph.kernel
def bad_matmul(a, b, out):
    for i in range(a.shape[0]):
        out[i] = a[i] @ b[i]


@qgraph.kernel
def bad_shapes(x: qgraph.vec3[:], y: qgraph.vec2[:]):
    for i in range(x.shape[0]):
        x[i] = x[i] + y[i]


@qgraph.kernel
def bad_condition(x: qgraph.vec3[:]):
    for i in range(x.shape[0]):
        if x[i]:
            x[i] = qgraph.vec3(0.0)


@qgraph.kernel
def bad_retype(x: qgraph.vec3[:], out):
    for i in range(x.shape[0]):
        v = x[i]
        v = 1.0
        out[i] = v


@qgraph.kernel
def bad_atomic_index(x: qgraph.vec3[:], out):
    for i in range(out.shape[0]):
        qgraph.atomic_add(x, (0, 1, 2), out[i])


@qgraph.kernel
def bad_component_value(x: qgraph.vec3[:], out):
    for i in range(out.shape[0]):
        qgraph.atomic_add(x, (0, 1), x[i])


@pytest.mark.parametrize("kernel, args, message", [
    (bad_atomic_index, lambda: (np.zeros((2, 3), np.float32), np.zeros(2, np.float32)),
     r"3 indices for x, an array of 1 index dimension\(s\) of vec3.*atomic_add\(x, \(i, 1\), v\)"),
    (bad_component_value, lambda: (np.zeros((2, 3), np.float32), np.zeros(2, np.float32)),
     r"a vec3 value for the single component x\[0, 1\]; pass a number"),
    (bad_matmul, lambda: (np.zeros((2, 3, 3), np.float32), np.zeros((2, 3), np.float32),
                          np.zeros((2, 3), np.float32)),
     r"the @ operator works on qgraph vector and matrix values.*qgraph.mat33\[:\]"),
    (bad_shapes, lambda: (np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32)),
     "vec3 Add vec2: the shapes differ"),
    (bad_condition, lambda: (np.zeros((2, 3), np.float32),), "a vec3 is not a condition"),
    (bad_retype, lambda: (np.zeros((2, 3), np.float32), np.zeros(2, np.float32)), "'v' holds a vec3 elsewhere"),
])
def test_errors_name_the_line_and_the_fix(arch, kernel, args, message):
    with pytest.raises(qgraph.QgraphSyntaxError, match=message) as info:
        kernel(*[qgraph.from_numpy(a) for a in args()])
    assert info.value.lineno is not None and "test_vectors.py" in str(info.value)
    # nothing half-built: a good kernel still runs afterwards
    out = qgraph.ndarray(qgraph.vec3, (2,))
    loop_carried(qgraph.from_numpy(np.ones((2, 3), np.float32)), out, 1)
    np.testing.assert_array_equal(out.to_numpy(), [[-1, 0, 0], [-1, 0, 0]])


@qgraph.kernel
def spring_energy(p: qgraph.vec3d[:], anchor: qgraph.vec3d, k: qgraph.mat33d, e):
    for i in range(p.shape[0]):
        d = p[i] - anchor
        e[i] = 0.5 * qgraph.dot(d, k @ d)


def test_float64_vector_types_compute_in_float64_and_differentiate(arch):
    """qgraph.vec3d / mat33d (Warp's vec3d): the same objects as vector(3, f64), float64 arrays and
    arithmetic, and the gradient of a quadratic form against its closed form at float64 tolerance."""
    assert qgraph.vec3d is qgraph.vector(3, qgraph.f64) and qgraph.mat22d is qgraph.matrix(2, 2, qgraph.f64)
    rng = np.random.default_rng(9)
    points, anchor = rng.standard_normal((16, 3)), rng.standard_normal(3)
    stiffness = np.diag([1.0, 2.0, 3.0]) + 0.1
    p = qgraph.from_numpy(points, requires_grad=True)
    e = qgraph.from_numpy(np.zeros(16), requires_grad=True)
    with qgraph.Tape() as tape:
        spring_energy(p, qgraph.vec3d(*anchor), qgraph.mat33d(*stiffness.ravel()), e)
    d = points - anchor
    np.testing.assert_allclose(e.to_numpy(), 0.5 * np.einsum("ij,jk,ik->i", d, stiffness, d), rtol=1e-13)
    tape.backward(e)
    np.testing.assert_allclose(p.grad.to_numpy(), 0.5 * d @ (stiffness + stiffness.T), rtol=1e-12)
    assert qgraph.ndarray(qgraph.vec2d, (5,)).to_numpy().dtype == np.float64
