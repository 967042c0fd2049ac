"""Vectors and matrices as values outside arrays (args.vectors, lang.flat.flatten's constants):
module-level and closure constants, parameters that change per call without a recompile,
struct fields, and `qgraph.vec2(v)` of a vector value; on both backends, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import qgraph

GRAVITY = qgraph.vec2(0.0, -9.8)
ROTATION = qgraph.mat22(0.0, -1.0, 1.0, 0.0)


@qgraph.kernel
def fall(vel: qgraph.vec2[:], dt: float):
    for i in range(vel.shape[0]):
        vel[i] += GRAVITY * dt


@qgraph.func
def rotated(v):
    return ROTATION @ v + qgraph.vec2(GRAVITY).y * TABLE_SCALE


TABLE_SCALE = 0.0


@qgraph.kernel
def rotate_all(v: qgraph.vec2[:], out: qgraph.vec2[:]):
    for i in range(v.shape[0]):
        out[i] = rotated(v[i])


@qgraph.kernel(cuda_graph=True)
def push(vel: qgraph.vec2[:], g: qgraph.vec2, dt: float):
    for i in range(vel.shape[0]):
        vel[i] += g * dt


@qgraph.kernel
def transform(x: qgraph.vec3[:], m: qgraph.mat33, shift, out: qgraph.vec3[:]):
    for i in range(x.shape[0]):
        out[i] = m @ x[i] + qgraph.vec3(shift)


@qgraph.kernel
def copy_of(out, g: qgraph.vec2):
    for i in range(out.shape[0]):
        w = qgraph.vec2(g)
        w.x += 0.5 * (i % 2)
        out[i] = w.x + w.y


@qgraph.struct
class Body:
    pos: qgraph.vec2[:]
    gravity: qgraph.vec2
    frame: object


@qgraph.kernel
def move(b: Body, dt: float):
    for i in range(b.pos.shape[0]):
        b.pos[i] += (b.frame @ b.gravity) * dt


def _random(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_a_module_level_vector_is_a_constant(arch):
    vel = _random(np.random.default_rng(0), 16, 2)
    v = qgraph.from_numpy(vel)
    fall(v, 0.5)
    np.testing.assert_allclose(v.to_numpy(), vel + np.float32(0.5) * GRAVITY, rtol=1e-6)


def test_module_level_vectors_and_matrices_in_a_func(arch):
    x = _random(np.random.default_rng(1), 16, 2)
    out = qgraph.ndarray(qgraph.vec2, (16,))
    rotate_all(qgraph.from_numpy(x), out)
    np.testing.assert_allclose(out.to_numpy(), x @ ROTATION.T, rtol=1e-6)


def test_a_changed_module_level_vector_raises(arch):
    global GRAVITY
    saved = GRAVITY
    v = qgraph.from_numpy(np.zeros((4, 2), np.float32))
    fall(v, 1.0)
    try:
        GRAVITY = qgraph.vec2(0.0, -9.8)  # rebound to an equal value: still the compiled constant
        fall(v, 1.0)
        GRAVITY[1] = -1.62  # changed in place
        stale = r"module-level vec2 GRAVITY changed .*now \(0, -1.62\).*gravity: qgraph.vec2"
        with pytest.raises(qgraph.QgraphError, match=stale):
            fall(v, 1.0)
        GRAVITY = 9.8
        with pytest.raises(qgraph.QgraphError, match="GRAVITY changed"):
            fall(v, 1.0)
    finally:
        GRAVITY = saved
    fall(v, 1.0)
    np.testing.assert_allclose(v.to_numpy()[:, 1], np.float32(-9.8) * 3, rtol=1e-6)


def test_a_closure_vector_is_a_constant(arch):
    def make(offset):
        @qgraph.kernel
        def shifted(x: qgraph.vec3[:]):
            for i in range(x.shape[0]):
                x[i] = x[i] + offset * 2.0

        return shifted

    shifted = make(qgraph.vec3(1.0, 2.0, 3.0))
    x = _random(np.random.default_rng(2), 8, 3)
    a = qgraph.from_numpy(x)
    shifted(a)
    np.testing.assert_allclose(a.to_numpy(), x + np.float32([2, 4, 6]), rtol=1e-6)


def test_a_rebound_closure_vector_raises_as_a_closure_number_does(arch):
    offset = qgraph.vec2(1.0, 2.0)

    @qgraph.kernel
    def shifted(x: qgraph.vec2[:]):
        for i in range(x.shape[0]):
            x[i] = x[i] + offset

    a = qgraph.from_numpy(np.zeros((4, 2), np.float32))
    shifted(a)
    np.testing.assert_array_equal(a.to_numpy(), [[1, 2]] * 4)
    offset = qgraph.vec2(5.0, 6.0)  # noqa: F841 (the kernel reads it through its closure cell)
    with pytest.raises(qgraph.QgraphError, match=r"the vec2 offset read from the enclosing function changed .*"
                                                 r"now \(5, 6\)"):
        shifted(a)
    qgraph.reset()
    shifted(a)  # recompiled with the new value
    np.testing.assert_array_equal(a.to_numpy(), [[6, 8]] * 4)


def test_a_vector_parameter_changes_per_call_without_a_recompile(arch):
    rng = np.random.default_rng(3)
    vel = _random(rng, 32, 2)
    v = qgraph.from_numpy(vel)
    expected = vel.copy()
    for g in (qgraph.vec2(0.0, -9.8), (1.0, 2.0), np.array([0.25, -3.0]), [4.0, 0.0]):
        push(v, g, 0.1)
        expected += np.float32(0.1) * np.asarray(g, np.float32)
    np.testing.assert_allclose(v.to_numpy(), expected, rtol=1e-5)
    assert push.stats.specialisations == 1
    assert push.stats.builds == (1 if arch == "cuda" else 0)  # new values: node updates, never a rebuild


def test_matrix_and_unannotated_vector_parameters(arch):
    rng = np.random.default_rng(4)
    x = _random(rng, 16, 3)
    out = qgraph.ndarray(qgraph.vec3, (16,))
    for m in (qgraph.mat33(*rng.standard_normal(9)), rng.standard_normal((3, 3)).tolist()):  # a nested list too
        shift = qgraph.vec3(*rng.standard_normal(3))  # unannotated: a vec3 because it is one
        transform(qgraph.from_numpy(x), m, shift, out)
        expected = x @ np.asarray(m, np.float32).T + shift
        np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-5, atol=1e-5)
    assert transform.stats.specialisations == 1


def test_a_copy_of_a_vector_parameter(arch):
    out = qgraph.ndarray(qgraph.f32, (6,))
    copy_of(out, qgraph.vec2(1.0, 2.0))
    np.testing.assert_allclose(out.to_numpy(), [3.0, 3.5] * 3)


def test_a_struct_field_that_is_a_vector(arch):
    rng = np.random.default_rng(5)
    pos = _random(rng, 8, 2)
    frame = qgraph.mat22(0.0, 1.0, -1.0, 0.0)
    b = Body(qgraph.from_numpy(pos), qgraph.vec2(0.0, -9.8), frame)
    move(b, 0.5)
    step = np.float32(0.5) * (frame @ b.gravity)
    np.testing.assert_allclose(b.pos.to_numpy(), pos + step, rtol=1e-6)
    b.gravity = (2.0, 0.0)  # a new field value: parameter bytes, not a new specialisation
    move(b, 0.5)
    np.testing.assert_allclose(b.pos.to_numpy(), pos + step + np.float32(0.5) * (frame @ [2.0, 0.0]), rtol=1e-6)
    assert move.stats.specialisations == 1


def test_wrong_vector_arguments_name_the_parameter(arch):
    v = qgraph.ndarray(qgraph.vec2, (4,))
    with pytest.raises(TypeError, match=r"argument 'g': expected a vec2 .*got shape \(3,\)"):
        push(v, (1.0, 2.0, 3.0), 0.1)
    with pytest.raises(TypeError, match=r"argument 'g': expected a vec2 .*got float"):
        push(v, 1.0, 0.1)
    with pytest.raises(TypeError, match=r"argument 'Body.gravity': expected a vec2 .*got shape \(2, 2\)"):
        move(Body(v, qgraph.mat22(), qgraph.mat22()), 0.1)
    with pytest.raises(TypeError, match=r"argument 'g': .* does not fit in float32"):
        push(v, (1e300, 0.0), 0.1)


def test_a_whole_array_is_not_a_vector(arch):
    @qgraph.kernel
    def from_array(out, a):
        for i in range(out.shape[0]):
            out[i] = qgraph.vec2(a).x

    with pytest.raises(qgraph.QgraphSyntaxError, match=r"qgraph.vec2\(a\): 'a' is a whole array"):
        from_array(qgraph.ndarray(qgraph.f32, (2,)), qgraph.from_numpy(np.zeros(2, np.float32)))


def test_vector_values_on_the_host():
    g = qgraph.vec2(0.0, -9.8)
    assert isinstance(g, np.ndarray) and g.dtype == np.float32
    assert type(g * 2.0) is type(g)  # still a vector value: a constant where a kernel reads it
    assert type(g.sum()) is np.float32 and type(qgraph.norm(g)) is np.float32
    assert type(qgraph.outer(g, g)) is type(g) and qgraph.outer(g, g).shape == (2, 2)


def _offline_ptx(kernel, args):
    from qgraph.backends import inspection

    return inspection.offline_ptx(kernel, args, (9, 0))


def test_cuda_vector_parameters_are_scalar_parameters(cuda_compiler):
    """On CUDA a vector parameter is one by-value float per component, and a module-level
    vector is compiled in: registers only, no float64 arithmetic (offline PTX, sm_90)."""
    from qgraph.compiler import ptx_stats
    from qgraph.compiler.ptx_text import ptx_entry

    vel = np.zeros((64, 2), np.float32)
    (pushed,) = _offline_ptx(push, (vel, (0.0, -9.8), 0.1))
    (fallen,) = _offline_ptx(fall, (vel, 0.1))
    assert ptx_entry(pushed)[1].count(4) == ptx_entry(fallen)[1].count(4) + 2  # g: two float32 components
    assert ptx_stats.entry_body(pushed).count("ld.param.f32") == 2
    counts = [ptx_stats.ptx_counts(ptx_stats.entry_body(ptx)) for ptx in (pushed, fallen)]
    assert counts[0]["f64"] == counts[1]["f64"] <= 1  # dt's conversion to float32 only: the vectors are float32
    assert ".local" not in pushed and ".local" not in fallen
    assert "0fC11CCCCD" in ptx_stats.entry_body(fallen)  # -9.8f, compiled in


def test_cuda_struct_and_matrix_values_compile_offline(cuda_compiler):
    pos = np.zeros((8, 2), np.float32)
    (moved,) = _offline_ptx(move, (Body(pos, (0.0, -9.8), qgraph.mat22.identity()), 0.5))
    (transformed,) = _offline_ptx(transform, (np.zeros((8, 3), np.float32), qgraph.mat33(), qgraph.vec3(),
                                              np.zeros((8, 3), np.float32)))
    assert ".local" not in moved and ".local" not in transformed


@qgraph.struct
class Wind:
    force: qgraph.vec2
    drag: float


def test_cuda_arguments_pack_each_component_by_value():
    """What a CUDA call passes for a vector (no device needed): one float32 per component,
    for a vector value, an annotated parameter given a tuple, and a struct field."""
    import struct

    from qgraph.args.kinds import vector_kind
    from qgraph.args.resolve import cuda_slow, struct_resolver

    def f32(*xs):
        return tuple(struct.pack("<f", x) for x in xs)

    assert cuda_slow(qgraph.vec2(1.0, -9.8), "g", None)[:2] == ("float32x2", f32(1.0, -9.8))
    ivec3 = vector_kind(np.dtype(np.int32), (3,)).sig
    assert cuda_slow((1, 2, 3), "k", ivec3)[1] == tuple(struct.pack("<i", x) for x in (1, 2, 3))
    with pytest.raises(TypeError, match=r"argument 'k': expected a vec3_int32 .* of int32 values, got float64"):
        cuda_slow((1.0, 2.0, 3.0), "k", ivec3)
    with pytest.raises(TypeError, match=r"argument 'k': \[1, 1099511627776, 3\] does not fit in int32"):
        cuda_slow((1, 2**40, 3), "k", ivec3)
    with pytest.raises(TypeError, match=r"argument 'k': expected a vec3_int32 .* of numbers, got dtype <U1"):
        cuda_slow(("a", "b", "c"), "k", ivec3)
    assert cuda_slow((np.inf, 1.0), "g", "float32x2")[1] == f32(np.inf, 1.0)  # inf itself is a value
    with pytest.raises(TypeError, match=r"argument 'g': \[inf, 1e\+300\] does not fit in float32 \(it would"):
        cuda_slow((np.inf, 1e300), "g", "float32x2")
    sig, leaves = struct_resolver(Wind, "cuda")(Wind((1.0, 2.0), 0.5))
    assert "force: float32x2" in sig and leaves == f32(1.0, 2.0) + (struct.pack("<d", 0.5),)
