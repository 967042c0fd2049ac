"""mpm88's constants and its substep kernel in two spellings: component by component (scalar) and
with vectors, matrices and structs (vector), as a Taichi user writes it. Both give the same bits."""

from __future__ import annotations

import qgraph

N_GRID = 128
DX = 1.0 / N_GRID
DT = 2e-4
P_RHO = 1.0
P_VOL = (DX * 0.5) ** 2
P_MASS = P_VOL * P_RHO
GRAVITY = 9.8
BOUND = 3  # grid velocities into the walls are zeroed within this many cells of the edge
E = 400.0  # bulk modulus
STRESS = -DT * 4 * E * P_VOL / DX**2  # times (J - 1): the isotropic stress term of the affine matrix
APIC = 4 / DX**2  # the APIC factor of C = sum 4 w v (x_i - x_p)^T / dx^2 (quadratic B-splines)
GRAVITY_DV = DT * GRAVITY  # velocity gravity adds per substep
TOLERANCE = 1e-4  # on max_rel_error; see main


@qgraph.kernel(cuda_graph=True)
def substep_scalar(x, v, C, J, grid_v, grid_m):
    # task 1 (parallel): clear the grid
    for i, j in qgraph.ndrange(grid_m.shape[0], grid_m.shape[1]):
        grid_v[i, j, 0] = 0.0
        grid_v[i, j, 1] = 0.0
        grid_m[i, j] = 0.0
    # task 2 (parallel): particle to grid; a particle scatters to its 3 x 3 nodes (atomic adds)
    for p in range(x.shape[0]):
        xp = x[p, 0] / DX
        yp = x[p, 1] / DX
        bx = int(xp - 0.5)
        by = int(yp - 0.5)
        fx = xp - bx
        fy = yp - by
        wx0 = 0.5 * (1.5 - fx) * (1.5 - fx)
        wx1 = 0.75 - (fx - 1.0) * (fx - 1.0)
        wx2 = 0.5 * (fx - 0.5) * (fx - 0.5)
        wy0 = 0.5 * (1.5 - fy) * (1.5 - fy)
        wy1 = 0.75 - (fy - 1.0) * (fy - 1.0)
        wy2 = 0.5 * (fy - 0.5) * (fy - 0.5)
        stress = STRESS * (J[p] - 1.0)
        a00 = stress + P_MASS * C[p, 0, 0]
        a01 = P_MASS * C[p, 0, 1]
        a10 = P_MASS * C[p, 1, 0]
        a11 = stress + P_MASS * C[p, 1, 1]
        mvx = P_MASS * v[p, 0]
        mvy = P_MASS * v[p, 1]
        for di in range(3):
            wx = wx0 if di == 0 else (wx1 if di == 1 else wx2)
            dpx = (di - fx) * DX
            for dj in range(3):
                wy = wy0 if dj == 0 else (wy1 if dj == 1 else wy2)
                dpy = (dj - fy) * DX
                weight = wx * wy
                grid_v[bx + di, by + dj, 0] += weight * (mvx + (a00 * dpx + a01 * dpy))
                grid_v[bx + di, by + dj, 1] += weight * (mvy + (a10 * dpx + a11 * dpy))
                grid_m[bx + di, by + dj] += weight * P_MASS
    # task 3 (parallel): grid update: momentum to velocity, gravity, sticky-free walls
    for i, j in qgraph.ndrange(grid_m.shape[0], grid_m.shape[1]):
        gx = grid_v[i, j, 0]
        gy = grid_v[i, j, 1]
        if grid_m[i, j] > 0.0:
            gx = gx / grid_m[i, j]
            gy = gy / grid_m[i, j]
        gy -= GRAVITY_DV
        if i < BOUND and gx < 0.0:
            gx = 0.0
        if i > grid_m.shape[0] - BOUND and gx > 0.0:
            gx = 0.0
        if j < BOUND and gy < 0.0:
            gy = 0.0
        if j > grid_m.shape[1] - BOUND and gy > 0.0:
            gy = 0.0
        grid_v[i, j, 0] = gx
        grid_v[i, j, 1] = gy
    # task 4 (parallel): grid to particle: gather velocity and C, move the particle, update J
    for p in range(x.shape[0]):
        xp = x[p, 0] / DX
        yp = x[p, 1] / DX
        bx = int(xp - 0.5)
        by = int(yp - 0.5)
        fx = xp - bx
        fy = yp - by
        wx0 = 0.5 * (1.5 - fx) * (1.5 - fx)
        wx1 = 0.75 - (fx - 1.0) * (fx - 1.0)
        wx2 = 0.5 * (fx - 0.5) * (fx - 0.5)
        wy0 = 0.5 * (1.5 - fy) * (1.5 - fy)
        wy1 = 0.75 - (fy - 1.0) * (fy - 1.0)
        wy2 = 0.5 * (fy - 0.5) * (fy - 0.5)
        nvx = 0.0
        nvy = 0.0
        c00 = 0.0
        c01 = 0.0
        c10 = 0.0
        c11 = 0.0
        for di in range(3):
            wx = wx0 if di == 0 else (wx1 if di == 1 else wx2)
            dpx = (di - fx) * DX
            for dj in range(3):
                wy = wy0 if dj == 0 else (wy1 if dj == 1 else wy2)
                dpy = (dj - fy) * DX
                weight = wx * wy
                gx = grid_v[bx + di, by + dj, 0]
                gy = grid_v[bx + di, by + dj, 1]
                nvx += weight * gx
                nvy += weight * gy
                c00 += APIC * weight * gx * dpx
                c01 += APIC * weight * gx * dpy
                c10 += APIC * weight * gy * dpx
                c11 += APIC * weight * gy * dpy
        v[p, 0] = nvx
        v[p, 1] = nvy
        x[p, 0] += DT * nvx
        x[p, 1] += DT * nvy
        J[p] *= 1.0 + DT * (c00 + c11)
        C[p, 0, 0] = c00
        C[p, 0, 1] = c01
        C[p, 1, 0] = c10
        C[p, 1, 1] = c11


@qgraph.struct
class Particles:
    x: qgraph.vec2[:]  # positions
    v: qgraph.vec2[:]  # velocities
    C: qgraph.mat22[:]  # APIC affine velocity matrices
    J: object  # volume ratios (n,)


@qgraph.struct
class Grid:
    v: qgraph.vec2[:, :]  # momentum, then velocity
    m: object  # mass


@qgraph.kernel(cuda_graph=True)
def substep_vector(p: Particles, g: Grid):
    """The same substep as substep_scalar, written as in Taichi's mpm88: vectors, matrices, structs.
    The order of the float operations is the scalar kernel's, so both give the same bits."""
    for i, j in qgraph.ndrange(g.m.shape[0], g.m.shape[1]):
        g.v[i, j] = qgraph.vec2(0.0)
        g.m[i, j] = 0.0
    for q in range(p.x.shape[0]):
        Xp = p.x[q] / DX
        bx = int(Xp.x - 0.5)
        by = int(Xp.y - 0.5)
        fx = Xp - qgraph.vec2(bx, by)
        w0 = 0.5 * (1.5 - fx) * (1.5 - fx)
        w1 = 0.75 - (fx - 1.0) * (fx - 1.0)
        w2 = 0.5 * (fx - 0.5) * (fx - 0.5)
        stress = STRESS * (p.J[q] - 1.0)
        affine = qgraph.mat22(stress, 0.0, 0.0, stress) + P_MASS * p.C[q]
        mv = P_MASS * p.v[q]
        for di in range(3):
            wx = w0.x if di == 0 else (w1.x if di == 1 else w2.x)
            for dj in range(3):
                wy = w0.y if dj == 0 else (w1.y if dj == 1 else w2.y)
                dpos = (qgraph.vec2(di, dj) - fx) * DX
                weight = wx * wy
                g.v[bx + di, by + dj] += weight * (mv + affine @ dpos)
                g.m[bx + di, by + dj] += weight * P_MASS
    for i, j in qgraph.ndrange(g.m.shape[0], g.m.shape[1]):
        gv = g.v[i, j]
        if g.m[i, j] > 0.0:
            gv = gv / g.m[i, j]
        gv.y -= GRAVITY_DV
        if i < BOUND and gv.x < 0.0:
            gv.x = 0.0
        if i > g.m.shape[0] - BOUND and gv.x > 0.0:
            gv.x = 0.0
        if j < BOUND and gv.y < 0.0:
            gv.y = 0.0
        if j > g.m.shape[1] - BOUND and gv.y > 0.0:
            gv.y = 0.0
        g.v[i, j] = gv
    for q in range(p.x.shape[0]):
        Xp = p.x[q] / DX
        bx = int(Xp.x - 0.5)
        by = int(Xp.y - 0.5)
        fx = Xp - qgraph.vec2(bx, by)
        w0 = 0.5 * (1.5 - fx) * (1.5 - fx)
        w1 = 0.75 - (fx - 1.0) * (fx - 1.0)
        w2 = 0.5 * (fx - 0.5) * (fx - 0.5)
        new_v = qgraph.vec2(0.0)
        new_C = qgraph.mat22(0.0, 0.0, 0.0, 0.0)
        for di in range(3):
            wx = w0.x if di == 0 else (w1.x if di == 1 else w2.x)
            for dj in range(3):
                wy = w0.y if dj == 0 else (w1.y if dj == 1 else w2.y)
                dpos = (qgraph.vec2(di, dj) - fx) * DX
                weight = wx * wy
                g_v = g.v[bx + di, by + dj]
                new_v += weight * g_v
                new_C += qgraph.outer(APIC * weight * g_v, dpos)
        p.v[q] = new_v
        p.x[q] += DT * new_v
        p.J[q] *= 1.0 + DT * qgraph.trace(new_C)
        p.C[q] = new_C


# Per variant: the substep kernel and how it takes the state's arrays
# x, v (n, 2), C (n, 2, 2), J (n,), grid_v (N_GRID, N_GRID, 2), grid_m (N_GRID, N_GRID), all float32.
VARIANTS: dict[str, dict] = {
    "scalar": {"substep": substep_scalar, "args": lambda x, v, C, J, grid_v, grid_m: (x, v, C, J, grid_v, grid_m)},
    "vector": {"substep": substep_vector, "args": lambda x, v, C, J, grid_v, grid_m: (Particles(x, v, C, J),
                                                                                      Grid(grid_v, grid_m))},
}


if __name__ == "__main__":  # a module the examples import
    import sys

    from qgraph.examples.command_line import helper_module

    sys.exit(helper_module("mpm88_kernels", __doc__, ("mpm88",)))
