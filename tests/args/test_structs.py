"""Struct arguments (@qgraph.struct): one object for the caller, one parameter per leaf field
for the kernel; fields that point elsewhere on a later call update nodes, never rebuild."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

import qgraph

RNG = np.random.default_rng(3)


@qgraph.struct
class Material:
    stiffness: object
    damping: float


@qgraph.struct
class Particles:
    pos: object  # an array of vec2 (its kind says so)
    vel: object  # a plain (n, 2) array
    mass: object
    material: Material


@qgraph.func
def force(p: Particles, i):
    """A func taking the whole struct (its leaves are passed)."""
    return -p.material.stiffness[i] * qgraph.vec2(p.pos[i]) - p.material.damping * qgraph.vec2(p.vel[i])


@qgraph.kernel(cuda_graph=True)
def step(p: Particles, dt: float, energy):
    for i in range(p.pos.shape[0]):
        v = qgraph.vec2(p.vel[i]) + dt * force(p, i) / p.mass[i]
        p.vel[i] = v
        p.pos[i] += dt * v
        energy[()] += 0.5 * p.mass[i] * qgraph.dot(v, v)


def make(n, dtype=np.float32):
    pos = qgraph.ndarray(qgraph.vector(2, dtype), (n,)).from_numpy(RNG.standard_normal((n, 2)).astype(dtype))
    return Particles(pos, qgraph.from_numpy(RNG.standard_normal((n, 2)).astype(dtype)),
                     qgraph.from_numpy((RNG.random(n) + 0.5).astype(dtype)),
                     Material(qgraph.from_numpy((RNG.random(n) + 1).astype(dtype)), 0.25))


def reference(p: Particles, dt: float):
    pos, vel, mass = p.pos.to_numpy(), p.vel.to_numpy(), p.mass.to_numpy()
    k = p.material.stiffness.to_numpy()
    f = -k[:, None] * pos - p.material.damping * vel
    v = vel + dt * f / mass[:, None]
    return pos + dt * v, v, (0.5 * mass * (v * v).sum(1)).sum()


def test_struct_fields_match_numpy(arch):
    p = make(50)
    pos, vel, e = reference(p, 0.01)
    energy = qgraph.ndarray(qgraph.f32, ())
    step(p, 0.01, energy)
    np.testing.assert_allclose(p.pos.to_numpy(), pos, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p.vel.to_numpy(), vel, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(energy.to_numpy(), e, rtol=1e-4)


def test_swapped_fields_update_parameters_without_a_rebuild(arch):
    a, b = make(40), make(40)
    energy = qgraph.ndarray(qgraph.f32, ())
    step(a, 0.01, energy)
    specs, builds = step.stats.specialisations, step.stats.builds
    expected = reference(b, 0.02)
    a.pos, a.vel, a.mass, a.material = b.pos, b.vel, b.mass, b.material  # every leaf points elsewhere
    step(a, 0.02, energy)
    np.testing.assert_allclose(b.pos.to_numpy(), expected[0], rtol=1e-5, atol=1e-6)
    assert step.stats.specialisations == specs and step.stats.builds == builds
    if arch == "cuda":
        assert step.stats.used_graph and step.stats.node_updates > 0


def test_cached_resolution_follows_every_assignment(arch):
    """A struct's leaves are resolved once and cached on it; an assignment anywhere (here a nested
    struct's field, after the outer struct was cached) is seen by the next call."""
    p, other = make(30), make(30)
    energy = qgraph.ndarray(qgraph.f32, ())
    step(p, 0.01, energy)
    step(p, 0.01, energy)  # from the cache
    p.material.stiffness = other.material.stiffness
    p.material.damping = 0.75
    expected = reference(p, 0.01)
    step(p, 0.01, energy)
    np.testing.assert_allclose(p.pos.to_numpy(), expected[0], rtol=1e-5, atol=1e-6)


def test_copies_of_a_struct_use_their_own_arrays(arch):
    """copy.deepcopy copies the arrays; the copy's calls must use those, not the original's."""
    p = make(20)
    energy = qgraph.ndarray(qgraph.f32, ())
    step(p, 0.01, energy)
    q = copy.deepcopy(p)
    expected = reference(q, 0.01)
    before = p.pos.to_numpy()
    step(q, 0.01, energy)
    np.testing.assert_allclose(q.pos.to_numpy(), expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(p.pos.to_numpy(), before)


@qgraph.struct(slots=True)
class Slotted:
    x: object
    scale: float


@qgraph.kernel
def scale_slotted(s: Slotted):
    for i in range(s.x.shape[0]):
        s.x[i] *= s.scale


def test_slotted_and_numpy_field_structs_resolve_every_call(arch):
    s = Slotted(qgraph.from_numpy(np.ones(5, np.float32)), 2.0)
    assert "__slots__" in vars(Slotted) and dataclasses.is_dataclass(s)
    scale_slotted(s)
    s.scale = 3.0
    scale_slotted(s)
    np.testing.assert_allclose(s.x.to_numpy(), 6.0)
    if arch == "cpu":  # a NumPy field may be reshaped in place: never cached
        s = Slotted(np.ones(6, np.float32), 2.0)
        scale_slotted(s)
        s.x.shape = (6,)
        scale_slotted(s)
        np.testing.assert_allclose(s.x, 4.0)


def test_field_types_are_part_of_the_key(arch):
    energy32, energy64 = qgraph.ndarray(qgraph.f32, ()), qgraph.ndarray(qgraph.f64, ())
    step(make(10), 0.01, energy32)
    before = step.stats.specialisations
    p64 = make(10, np.float64)
    pos, _, _ = reference(p64, 0.01)
    step(p64, 0.01, energy64)
    assert step.stats.specialisations == before + 1
    assert p64.pos.to_numpy().dtype == np.float64
    np.testing.assert_allclose(p64.pos.to_numpy(), pos, rtol=1e-6)  # qgraph.vec2(...) in force() is float32


@qgraph.struct
class Solver:
    u: object
    count: object
    flag: object
    limit: int


@qgraph.kernel(graph_while="s.flag")
def iterate(s: Solver):
    for i in range(s.u.shape[0]):
        s.u[i] = 0.5 * s.u[i] + 1.0
    s.count[0] += 1
    s.flag[0] = 1 if s.count[0] < s.limit else 0


def test_graph_while_flag_may_be_a_struct_field(arch):
    s = Solver(qgraph.from_numpy(np.zeros(8)), qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,)), 5)
    iterate(s)
    assert s.count.to_numpy()[0] == 5
    np.testing.assert_allclose(s.u.to_numpy(), 2 - 2 * 0.5 ** 5)
    s.count.fill(0)
    s.u = qgraph.from_numpy(np.zeros(8))
    s.limit = 2
    iterate(s)
    assert s.count.to_numpy()[0] == 2
    np.testing.assert_allclose(s.u.to_numpy(), 1.5)
    bad = Solver(s.u, s.count, qgraph.ndarray(qgraph.f32, (1,)), 2)
    with pytest.raises(TypeError, match=r"flag 's.flag' must be an int32 array"):
        iterate(bad)


@qgraph.kernel
def no_such_field(p: Particles):
    for i in range(p.mass.shape[0]):
        p.mass[i] = p.weight[i]


@qgraph.kernel
def assigns_a_field(s: Solver):
    s.limit = 3


def test_errors_name_the_field_and_the_fix(arch):
    with pytest.raises(qgraph.QgraphSyntaxError, match=r"struct Particles has no field 'weight' \(fields: pos, vel"):
        no_such_field(make(4))
    s = Solver(qgraph.ndarray(qgraph.f64, (2,)), qgraph.ndarray(qgraph.i32, (1,)), qgraph.ndarray(qgraph.i32, (1,)), 1)
    with pytest.raises(qgraph.QgraphSyntaxError, match="cannot assign the struct field s.limit"):
        assigns_a_field(s)
    with pytest.raises(TypeError, match="field name '_hidden' may not start with '_'"):
        @qgraph.struct
        class Bad:
            _hidden: int
    with pytest.raises(TypeError, match="expected an integer"):
        iterate(Solver(s.u, s.count, s.flag, 2.5))
    with pytest.raises(TypeError, match=r"argument 'Annotated.x': its last dimension\(s\) must be \(3,\)"):
        takes_annotated(Annotated(qgraph.from_numpy(np.zeros((4, 2), np.float32))))
    a = Annotated(qgraph.from_numpy(np.ones((4, 3), np.float32)))  # a plain (n, 3) array read as vec3
    takes_annotated(a)
    np.testing.assert_allclose(a.x.to_numpy(), np.full((4, 3), 2.0))


@qgraph.struct
class Annotated:
    x: qgraph.vec3[:]


@qgraph.kernel
def takes_annotated(a: Annotated):
    for i in range(a.x.shape[0]):
        a.x[i] = a.x[i] * 2.0
