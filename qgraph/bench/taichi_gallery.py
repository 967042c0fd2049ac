"""Taichi twins of the gallery programs qgraph ports (mpm88, the Poisson solve, stable fluids,
N-body): the same algorithms in Taichi 1.7's language, for side-by-side timings of the first call
(compile) and of a step. Each `*_program(ti, ...)` returns `step()`, one frame of the program.

Taichi's mpm88 and N-body are its gallery programs as written there (vector fields, a substep
kernel; `compute_force` and `update`); stable fluids and the Poisson solve follow qgraph's ports
(the MAC grid, two sweeps a pass, the largest change by an atomic max), with the loops Taichi
cannot run on the device (a fixed number of sweeps, sweeps until the change is small) on the host.
(No `from __future__ import annotations`: Taichi reads the kernels' annotations as types.)
"""

import numpy as np


def mpm88_program(ti, x0: np.ndarray, v0: np.ndarray):
    """Taichi's mpm88 substep for len(x0) particles; step() is one substep."""
    from ..examples import mpm88_kernels as k

    n = len(x0)
    x, v = ti.Vector.field(2, ti.f32, n), ti.Vector.field(2, ti.f32, n)
    C, J = ti.Matrix.field(2, 2, ti.f32, n), ti.field(ti.f32, n)
    grid_v, grid_m = ti.Vector.field(2, ti.f32, (k.N_GRID, k.N_GRID)), ti.field(ti.f32, (k.N_GRID, k.N_GRID))
    dx, dt, p_mass, stress_k, apic = k.DX, k.DT, k.P_MASS, k.STRESS, k.APIC
    gravity_dv, bound, n_grid = k.GRAVITY_DV, k.BOUND, k.N_GRID

    @ti.kernel
    def substep():
        for i, j in grid_m:
            grid_v[i, j] = [0, 0]
            grid_m[i, j] = 0
        for p in x:
            Xp = x[p] / dx
            base = int(Xp - 0.5)
            fx = Xp - base
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2]
            stress = stress_k * (J[p] - 1)
            affine = ti.Matrix([[stress, 0], [0, stress]]) + p_mass * C[p]
            for i, j in ti.static(ti.ndrange(3, 3)):
                offset = ti.Vector([i, j])
                dpos = (offset - fx) * dx
                weight = w[i].x * w[j].y
                grid_v[base + offset] += weight * (p_mass * v[p] + affine @ dpos)
                grid_m[base + offset] += weight * p_mass
        for i, j in grid_m:
            if grid_m[i, j] > 0:
                grid_v[i, j] /= grid_m[i, j]
            grid_v[i, j].y -= gravity_dv
            if i < bound and grid_v[i, j].x < 0:
                grid_v[i, j].x = 0
            if i > n_grid - bound and grid_v[i, j].x > 0:
                grid_v[i, j].x = 0
            if j < bound and grid_v[i, j].y < 0:
                grid_v[i, j].y = 0
            if j > n_grid - bound and grid_v[i, j].y > 0:
                grid_v[i, j].y = 0
        for p in x:
            Xp = x[p] / dx
            base = int(Xp - 0.5)
            fx = Xp - base
            w = [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1.0) ** 2, 0.5 * (fx - 0.5) ** 2]
            new_v = ti.Vector.zero(ti.f32, 2)
            new_C = ti.Matrix.zero(ti.f32, 2, 2)
            for i, j in ti.static(ti.ndrange(3, 3)):
                offset = ti.Vector([i, j])
                dpos = (offset - fx) * dx
                weight = w[i].x * w[j].y
                g_v = grid_v[base + offset]
                new_v += weight * g_v
                new_C += apic * weight * g_v.outer_product(dpos)
            v[p] = new_v
            x[p] += dt * v[p]
            J[p] *= 1 + dt * new_C.trace()
            C[p] = new_C

    x.from_numpy(x0)
    v.from_numpy(v0)
    J.fill(1.0)
    return substep


def poisson_program(ti, f0: np.ndarray, tol: float, max_iters: int):
    """Jacobi sweeps of -laplace(u) = f until a pass of two changes u by less than tol; step() is a
    whole solve from u = 0 (each pass a kernel returning its largest change to the host)."""
    n = f0.shape[0]
    u, u_new, f = (ti.field(ti.f32, (n, n)) for _ in range(3))
    change = ti.field(ti.f32, ())
    h2 = (1.0 / (n - 1)) ** 2

    @ti.kernel
    def sweep_pair() -> ti.f32:
        change[None] = 0.0
        for i, j in ti.ndrange((1, n - 1), (1, n - 1)):
            u_new[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] + h2 * f[i, j])
        for i, j in ti.ndrange((1, n - 1), (1, n - 1)):
            new = 0.25 * (u_new[i - 1, j] + u_new[i + 1, j] + u_new[i, j - 1] + u_new[i, j + 1] + h2 * f[i, j])
            ti.atomic_max(change[None], abs(new - u_new[i, j]))
            u[i, j] = new
        return change[None]

    f.from_numpy(f0)

    def step():
        u.fill(0.0)
        u_new.fill(0.0)
        sweeps = 0
        while True:
            last = sweep_pair()
            sweeps += 2
            if not (last >= tol and sweeps < max_iters):
                return sweeps
    return step


def stable_fluids_program(ti, s0, dt: float, inflow: float, jacobi_iters: int):
    """qgraph's stable fluids step (advect, jacobi_iters sweeps in pairs, project) for state s0."""
    n = s0.dye.shape[0]
    u, u_new = ti.field(ti.f32, (n + 1, n)), ti.field(ti.f32, (n + 1, n))
    v, v_new = ti.field(ti.f32, (n, n + 1)), ti.field(ti.f32, (n, n + 1))
    dye, dye_new, div, p, p_new = (ti.field(ti.f32, (n, n)) for _ in range(5))

    @ti.func
    def sample(q: ti.template(), x, y, ni, nj):
        ix, iy = int(ti.floor(x)), int(ti.floor(y))
        s, t = x - ix, y - iy
        i0, i1 = ti.min(ti.max(ix, 0), ni - 1), ti.min(ti.max(ix + 1, 0), ni - 1)
        j0, j1 = ti.min(ti.max(iy, 0), nj - 1), ti.min(ti.max(iy + 1, 0), nj - 1)
        low = q[i0, j0] + s * (q[i1, j0] - q[i0, j0])
        high = q[i0, j1] + s * (q[i1, j1] - q[i0, j1])
        return low + t * (high - low)

    @ti.kernel
    def advect():
        r = n // 16 + 1
        for i, j in u:
            il, ir = ti.max(i - 1, 0), ti.min(i, n - 1)
            vv = 0.25 * (v[il, j] + v[ir, j] + v[il, j + 1] + v[ir, j + 1])
            u_new[i, j] = sample(u, i - dt * u[i, j], j - dt * vv, n + 1, n)
            if i == 0 or i == n:
                u_new[i, j] = 0.0
        for i, j in v:
            jb, jt = ti.max(j - 1, 0), ti.min(j, n - 1)
            uu = 0.25 * (u[i, jb] + u[i + 1, jb] + u[i, jt] + u[i + 1, jt])
            v_new[i, j] = sample(v, i - dt * uu, j - dt * v[i, j], n, n + 1)
            if j == 0 or j == n:
                v_new[i, j] = 0.0
            elif j <= r and i >= n // 2 - r and i < n // 2 + r:
                v_new[i, j] = inflow
        for i, j in dye:
            uu, vv = 0.5 * (u[i, j] + u[i + 1, j]), 0.5 * (v[i, j] + v[i, j + 1])
            dye_new[i, j] = sample(dye, i - dt * uu, j - dt * vv, n, n)
            if j < r and i >= n // 2 - r and i < n // 2 + r:
                dye_new[i, j] = 1.0
            div[i, j] = u_new[i + 1, j] - u_new[i, j] + v_new[i, j + 1] - v_new[i, j]

    @ti.kernel
    def pressure_pair():
        for i, j in p:
            p_new[i, j] = 0.25 * (p[ti.max(i - 1, 0), j] + p[ti.min(i + 1, n - 1), j] + p[i, ti.max(j - 1, 0)]
                                  + p[i, ti.min(j + 1, n - 1)] - div[i, j])
        for i, j in p:
            p[i, j] = 0.25 * (p_new[ti.max(i - 1, 0), j] + p_new[ti.min(i + 1, n - 1), j]
                              + p_new[i, ti.max(j - 1, 0)] + p_new[i, ti.min(j + 1, n - 1)] - div[i, j])

    @ti.kernel
    def project():
        for i, j in u:
            u[i, j] = u_new[i, j]
            if i > 0 and i < n:
                u[i, j] -= p[i, j] - p[i - 1, j]
        for i, j in v:
            v[i, j] = v_new[i, j]
            if j > 0 and j < n:
                v[i, j] -= p[i, j] - p[i, j - 1]
        for i, j in dye:
            dye[i, j] = dye_new[i, j]

    for field, value in ((u, s0.u), (v, s0.v), (dye, s0.dye), (p, s0.p)):
        field.from_numpy(value)

    def step():
        advect()
        for _ in range(jacobi_iters // 2):
            pressure_pair()
        project()
    return step


def nbody_program(ti, pos0: np.ndarray, vel0: np.ndarray, local: bool = False):
    """Taichi's gallery N-body kernels for len(pos0) bodies (its module fixes N = 3000), with the
    state set from pos0 and vel0 (`local`: the force summed in a local vector, stored once);
    returns (frame, positions)."""
    from ..examples import gallery_nbody as gn

    n = len(pos0)
    pos, vel, force = (ti.Vector.field(2, ti.f32, n) for _ in range(3))
    G, m, h, substepping = gn.G, gn.MASS, gn.H, gn.SUBSTEPS

    @ti.kernel
    def compute_force():
        for i in range(n):
            force[i] = [0.0, 0.0]
        for i in range(n):
            p = pos[i]
            for j in range(n):
                if i != j:
                    diff = p - pos[j]
                    r = diff.norm(1e-5)
                    f = -G * m * m * (1.0 / r) ** 3 * diff
                    force[i] += f

    @ti.kernel
    def update():
        dt = h / substepping
        for i in range(n):
            vel[i] += dt * force[i] / m
            pos[i] += dt * vel[i]

    @ti.kernel
    def compute_force_local():  # the force summed in a local, as a Taichi expert would write it
        for i in range(n):
            p = pos[i]
            acc = ti.Vector([0.0, 0.0])
            for j in range(n):
                if i != j:
                    diff = p - pos[j]
                    r = diff.norm(1e-5)
                    acc += -G * m * m * (1.0 / r) ** 3 * diff
            force[i] = acc

    pos.from_numpy(pos0)
    vel.from_numpy(vel0)
    force_kernel = compute_force_local if local else compute_force

    def frame():
        for _ in range(substepping):
            force_kernel()
            update()
    return frame, pos
