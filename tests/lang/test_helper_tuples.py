"""@qgraph.func helpers returning tuples of vectors and matrices (issue 49): `p, v = integrate(p,
v, f, dt)` as Warp users write it, mixed with numbers, nested, in a repeat loop, on both backends
against NumPy on random data; the CUDA code generated for them; the errors for what a tuple cannot be."""

from __future__ import annotations

import ast

import numpy as np
import pytest
from helpers.generated import generated_module

import qgraph

RNG = np.random.default_rng(49)
N = 29


@qgraph.func
def integrate(p, v, f, dt):
    """Semi-implicit Euler: the new velocity moves the position."""
    v = v + f * dt
    return p + v * dt, v


@qgraph.func
def integrate_with_energy(p, v, f, dt):
    p, v = integrate(p, v, f, dt)
    return p, v, 0.5 * qgraph.dot(v, v)


@qgraph.func
def kick(v, f, dt):
    return v + f * (0.5 * dt)


@qgraph.func
def leapfrog(p, v, f, dt):
    """Nested helpers: a tuple result passed on unchanged, another unpacked and returned."""
    v = kick(v, f, dt)
    if dt > 0:
        return integrate(p, v, f * 0.5, dt)
    q, w = integrate(p, v, f * 0.5, dt)
    return q, w


@qgraph.kernel
def step(pos, vel, force, dt: float):
    for i in range(pos.shape[0]):
        p, v = integrate(pos[i], vel[i], force[i], dt)
        pos[i] = p
        vel[i] = v


@qgraph.kernel
def step_with_energy(pos, vel, force, energy, dt: float):
    for i in range(pos.shape[0]):
        p, v, e = integrate_with_energy(pos[i], vel[i], force[i], dt)
        pos[i] = p
        vel[i] = v
        energy[i] = e


@qgraph.kernel
def leapfrog_steps(pos, vel, force, steps: int, dt: float):
    for _ in qgraph.repeat(steps):
        for i in range(pos.shape[0]):
            pos[i], vel[i] = leapfrog(pos[i], vel[i], force[i], dt)


def vectors(t, values):
    return qgraph.ndarray(t, values.shape[:1]).from_numpy(values)


def euler(p, v, f, dt):
    v = v + f * dt
    return p + v * dt, v


VECTOR_TYPES = [qgraph.vec2, qgraph.vec3, qgraph.vec2d, qgraph.vec3d]


@pytest.mark.parametrize("t", VECTOR_TYPES, ids=lambda t: t.name)
def test_the_particle_integrator_matches_numpy(arch, t):
    dtype, k = t.dtype, t.shape[0]
    p0, v0, f = (RNG.standard_normal((N, k)).astype(dtype) for _ in range(3))
    pos, vel, force = vectors(t, p0), vectors(t, v0), vectors(t, f)
    step(pos, vel, force, 0.1)
    p1, v1 = euler(p0.astype(np.float64), v0.astype(np.float64), f.astype(np.float64), 0.1)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    assert pos.to_numpy().dtype == dtype
    np.testing.assert_allclose(pos.to_numpy(), p1, rtol=tol, atol=tol)
    np.testing.assert_allclose(vel.to_numpy(), v1, rtol=tol, atol=tol)


@pytest.mark.parametrize("t", [qgraph.vec3, qgraph.vec2d], ids=lambda t: t.name)
def test_a_tuple_mixes_vectors_and_numbers(arch, t):
    dtype, k = t.dtype, t.shape[0]
    p0, v0, f = (RNG.standard_normal((N, k)).astype(dtype) for _ in range(3))
    pos, vel, force = vectors(t, p0), vectors(t, v0), vectors(t, f)
    energy = qgraph.from_numpy(np.zeros(N, dtype))
    step_with_energy(pos, vel, force, energy, 0.25)
    p1, v1 = euler(p0.astype(np.float64), v0.astype(np.float64), f.astype(np.float64), 0.25)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(pos.to_numpy(), p1, rtol=tol, atol=tol)
    np.testing.assert_allclose(energy.to_numpy(), 0.5 * (v1 * v1).sum(1), rtol=tol, atol=tol)


@pytest.mark.parametrize("dt", [0.05, -0.05], ids=["returned-on", "unpacked-returned"])
def test_nested_helpers_in_a_repeat_loop(arch, dt):
    p0, v0, f = (RNG.standard_normal((N, 3)).astype(np.float64) for _ in range(3))
    pos, vel, force = vectors(qgraph.vec3d, p0), vectors(qgraph.vec3d, v0), vectors(qgraph.vec3d, f)
    leapfrog_steps(pos, vel, force, 7, dt)
    p, v = p0, v0
    for _ in range(7):
        p, v = euler(p, v + f * (0.5 * dt), f * 0.5, dt)
    np.testing.assert_allclose(pos.to_numpy(), p, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vel.to_numpy(), v, rtol=1e-12, atol=1e-12)


@qgraph.func
def polar_step(m, v):
    """A matrix, a vector and a number in one tuple."""
    return m @ m, m @ v, qgraph.determinant(m)


@qgraph.func
def swapped(a, b):
    return b, a


@qgraph.func
def scaled(v, s):
    return v * s  # one vector, no tuple: as before


@qgraph.kernel
def matrices(m: qgraph.mat22[:], x: qgraph.vec2[:], mm: qgraph.mat22[:], mx: qgraph.vec2[:], det, picked):
    for i in range(m.shape[0]):
        a, b, d = polar_step(m[i], x[i])
        u, w = swapped(b, scaled(x[i], 2.0))
        u, w = w, u  # a swap of vectors, read before written
        mm[i] = a
        mx[i] = u - w + polar_step(a, b)[1] * 0.0
        det[i] = d
        picked[i] = polar_step(m[i], x[i])[2] + swapped(x[i], d)[0] * 0.0


def test_a_matrix_in_a_tuple_and_items_taken(arch):
    m, x = RNG.standard_normal((N, 2, 2)).astype(np.float32), RNG.standard_normal((N, 2)).astype(np.float32)
    mm, mx = qgraph.ndarray(qgraph.mat22, (N,)), qgraph.ndarray(qgraph.vec2, (N,))
    det, picked = qgraph.from_numpy(np.zeros(N, np.float32)), qgraph.from_numpy(np.zeros(N, np.float32))
    matrices(qgraph.from_numpy(m), qgraph.from_numpy(x), mm, mx, det, picked)
    np.testing.assert_allclose(mm.to_numpy(), m @ m, rtol=1e-5, atol=1e-5)
    mv = np.einsum("nij,nj->ni", m, x)
    np.testing.assert_allclose(mx.to_numpy(), mv - 2 * x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(det.to_numpy(), np.linalg.det(m), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(picked.to_numpy(), np.linalg.det(m), rtol=1e-4, atol=1e-5)


def test_the_cuda_code_returns_every_component_in_one_tuple():
    """The CUDA backend's code for a tuple helper, generated without a GPU: the helper returns the
    items' components in a row and the call site unpacks them into scalars."""
    from qgraph.args.kinds import array_sig, scalar_sig
    from qgraph.compiler import cuda_program
    from qgraph.lang.lower.lowering import lower_funcs
    from qgraph.lang.options import KernelOptions

    f4 = np.dtype(np.float32)
    vec3 = array_sig(f4, 2, True, element=(3,))
    key = (vec3, vec3, vec3, array_sig(f4, 1, True), scalar_sig(np.dtype(np.float64)))
    codes = cuda_program.task_codes(step_with_energy.source, key, KernelOptions())
    defs = {d.name: d for d, _, _ in lower_funcs(codes.symbols)}
    helper = next(d for name, d in defs.items() if name.endswith("integrate_with_energy"))
    returned = [n.value for n in ast.walk(helper) if isinstance(n, ast.Return)]
    assert len(returned) == 1 and isinstance(returned[0], ast.Tuple) and len(returned[0].elts) == 7


@qgraph.kernel
def step_with_energy_f32(pos: qgraph.vec3[:], vel: qgraph.vec3[:], force: qgraph.vec3[:], energy, dt: float):
    """step_with_energy with its vector arrays annotated: what the offline compile reads plain arrays as."""
    for i in range(pos.shape[0]):
        p, v, e = integrate_with_energy(pos[i], vel[i], force[i], dt)
        pos[i] = p
        vel[i] = v
        energy[i] = e


def test_the_cuda_ptx_of_a_tuple_helper_keeps_registers(cuda_compiler):
    from qgraph.backends import inspection

    pos = np.zeros((N, 3), np.float32)
    args = (pos, pos.copy(), pos.copy(), np.zeros(N, np.float32), 0.1)
    (ptx,) = inspection.offline_ptx(step_with_energy_f32, args)
    assert ".local" not in ptx


ERROR_SOURCE = """import qgraph


@qgraph.func
def integrate(p, v, f, dt):
    v = v + f * dt
    return p + v * dt, v


@qgraph.kernel
def broken(pos: qgraph.vec2[:], vel: qgraph.vec2[:], out):
    for i in range(pos.shape[0]):
{body}"""


ERRORS = {
    "kept whole": (
        "        both = integrate(pos[i], vel[i], vel[i], 0.1)\n        pos[i] = both[0]\n",
        r"integrate\(\) returns a tuple \(vec2, vec2\): unpack it where it is called \(x0, x1 = ",
    ),
    "in arithmetic": (
        "        pos[i] = integrate(pos[i], vel[i], vel[i], 0.1) * 2.0\n",
        r"integrate\(\) returns a tuple \(vec2, vec2\): unpack it",
    ),
    "too many targets": (
        "        p, v, e = integrate(pos[i], vel[i], vel[i], 0.1)\n",
        r"cannot unpack a tuple of 2 values \(vec2, vec2\) into 3 targets",
    ),
    "starred": ("        p, *rest = integrate(pos[i], vel[i], vel[i], 0.1)\n", r"into exactly 2 targets, without \*"),
    "runtime index": (
        "        out[i] = integrate(pos[i], vel[i], vel[i], 0.1)[i].x\n",
        r"index a tuple \(vec2, vec2\) with one constant from -2 to 1",
    ),
    "tuple argument": (
        "        out[i] = qgraph.norm((pos[i], vel[i]))\n",
        r"a tuple holding vectors \(vec2, vec2\) can only be unpacked",
    ),
    "nested": (
        "        (p, q), e = (pos[i], vel[i]), 1.0\n",
        r"cannot be an item of another tuple; make it one flat tuple \(return p, v, e\)",
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_what_a_tuple_cannot_be_names_the_fix(cpu, tmp_path_factory, case):
    body, message = ERRORS[case]
    name = "tuple_error_" + "".join(ch for ch in case if ch.isalnum())
    broken = generated_module(tmp_path_factory, name, ERROR_SOURCE.format(body=body)).broken
    with pytest.raises(qgraph.QgraphSyntaxError, match=message) as error:
        broken(np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32), np.zeros(2))
    assert error.value.lineno >= 12  # the kernel's line, not the helper's


@qgraph.struct
class Body:
    pos: object
    mass: float


@qgraph.func
def with_struct(b, i):
    return qgraph.vec2(b.pos[i]), b


@qgraph.func
def two_shapes(v, flag):
    if flag > 0:
        return v, v
    return v, 1.0


def test_a_struct_in_a_tuple_and_mixed_shapes_are_errors(cpu):
    @qgraph.kernel
    def struct_result(b: Body, out: qgraph.vec2[:]):
        for i in range(out.shape[0]):
            p, c = with_struct(b, i)
            out[i] = p

    @qgraph.kernel
    def shapes(out: qgraph.vec2[:], flag: int):
        for i in range(out.shape[0]):
            a, b = two_shapes(out[i], flag)
            out[i] = a

    out = qgraph.ndarray(qgraph.vec2, (2,))
    with pytest.raises(
        qgraph.QgraphSyntaxError,
        match=r"a struct is a group of parameters, not a value: it cannot "
        r"be put in a tuple or returned from a @qgraph.func; use its "
        r"fields \(return s.x, s.v\)",
    ):
        struct_result(Body(out, 1.0), out)
    with pytest.raises(qgraph.QgraphSyntaxError, match="two_shapes returns values of different shapes"):
        shapes(out, 1)


def test_helpers_still_run_from_python():
    p, v = integrate(qgraph.vec2(0.0, 1.0), qgraph.vec2(1.0, 0.0), qgraph.vec2(0.0, -10.0), 0.1)
    np.testing.assert_allclose(v, [1.0, -1.0])
    np.testing.assert_allclose(p, [0.1, 0.9])
