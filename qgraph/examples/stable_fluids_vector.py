"""stable_fluids' step written as a Taichi user writes it: one struct holding the fields, vec2
positions for the back-traced departure points and a sampling helper taking a vec2. The float
operations are the scalar kernels' in the same order, so both variants give the same bits on
the CPU (tests/examples/test_simulation_examples.py)."""

from __future__ import annotations

import math

import qgraph
from qgraph.examples.stable_fluids_kernels import sample


@qgraph.struct
class Fluid:
    u: object  # velocity along i on the vertical faces (n + 1, n)
    v: object  # velocity along j on the horizontal faces (n, n + 1)
    dye: object  # dye at the cell centres (n, n)
    u_new: object
    v_new: object
    dye_new: object
    div: object  # divergence of the advected velocity (n, n)
    p: object  # pressure (n, n)
    p_new: object
    iters: object  # int32 (1,): Jacobi sweeps done in this step
    flag: object  # int32 (1,): the pressure loop's flag


@qgraph.func
def sample_at(q, pos):
    """q bilinearly at the index coordinates `pos` (a vec2), clamped at the edges."""
    ix = math.floor(pos.x)
    iy = math.floor(pos.y)
    return sample(q, ix, iy, pos.x - ix, pos.y - iy)


@qgraph.kernel(cuda_graph=True)
def advect_vector(f: Fluid, dt: float, inflow: float):
    for i, j in qgraph.ndrange(f.u.shape[0], f.u.shape[1]):
        il = max(i - 1, 0)
        ir = min(i, f.v.shape[0] - 1)
        vel = qgraph.vec2(f.u[i, j], 0.25 * (f.v[il, j] + f.v[ir, j] + f.v[il, j + 1] + f.v[ir, j + 1]))
        f.u_new[i, j] = sample_at(f.u, qgraph.vec2(i, j) - dt * vel)
        if i == 0 or i == f.u.shape[0] - 1:
            f.u_new[i, j] = 0.0
    for i, j in qgraph.ndrange(f.v.shape[0], f.v.shape[1]):
        jb = max(j - 1, 0)
        jt = min(j, f.u.shape[1] - 1)
        vel = qgraph.vec2(0.25 * (f.u[i, jb] + f.u[i + 1, jb] + f.u[i, jt] + f.u[i + 1, jt]), f.v[i, j])
        f.v_new[i, j] = sample_at(f.v, qgraph.vec2(i, j) - dt * vel)
        r = f.v.shape[0] // 16 + 1
        if j == 0 or j == f.v.shape[1] - 1:
            f.v_new[i, j] = 0.0
        elif j <= r and i >= f.v.shape[0] // 2 - r and i < f.v.shape[0] // 2 + r:
            f.v_new[i, j] = inflow
    for i, j in qgraph.ndrange(f.dye.shape[0], f.dye.shape[1]):
        vel = 0.5 * qgraph.vec2(f.u[i, j] + f.u[i + 1, j], f.v[i, j] + f.v[i, j + 1])
        f.dye_new[i, j] = sample_at(f.dye, qgraph.vec2(i, j) - dt * vel)
        r = f.dye.shape[0] // 16 + 1
        if j < r and i >= f.dye.shape[0] // 2 - r and i < f.dye.shape[0] // 2 + r:
            f.dye_new[i, j] = 1.0
        f.div[i, j] = f.u_new[i + 1, j] - f.u_new[i, j] + f.v_new[i, j + 1] - f.v_new[i, j]
    f.iters[0] = 0


@qgraph.func
def jacobi(p, div, i, j):
    """One Jacobi update of laplace(p) = div at (i, j); a clamped neighbour is the cell itself."""
    pl = p[max(i - 1, 0), j]
    pr = p[min(i + 1, p.shape[0] - 1), j]
    pb = p[i, max(j - 1, 0)]
    pt = p[i, min(j + 1, p.shape[1] - 1)]
    return 0.25 * (pl + pr + pb + pt - div[i, j])


@qgraph.kernel(graph_while="f.flag")
def pressure_vector(f: Fluid, n_iters: int):
    for i, j in qgraph.ndrange(f.p.shape[0], f.p.shape[1]):
        f.p_new[i, j] = jacobi(f.p, f.div, i, j)
    for i, j in qgraph.ndrange(f.p.shape[0], f.p.shape[1]):
        f.p[i, j] = jacobi(f.p_new, f.div, i, j)
    f.iters[0] += 2
    f.flag[0] = 1 if f.iters[0] < n_iters else 0


@qgraph.kernel(cuda_graph=True)
def project_vector(f: Fluid):
    for i, j in qgraph.ndrange(f.u.shape[0], f.u.shape[1]):
        f.u[i, j] = f.u_new[i, j]
        if i > 0 and i < f.u.shape[0] - 1:
            f.u[i, j] -= f.p[i, j] - f.p[i - 1, j]
    for i, j in qgraph.ndrange(f.v.shape[0], f.v.shape[1]):
        f.v[i, j] = f.v_new[i, j]
        if j > 0 and j < f.v.shape[1] - 1:
            f.v[i, j] -= f.p[i, j] - f.p[i, j - 1]
    for i, j in qgraph.ndrange(f.dye.shape[0], f.dye.shape[1]):
        f.dye[i, j] = f.dye_new[i, j]


def calls(f: Fluid, dt: float, inflow: float, jacobi_iters: int) -> list:
    """One step: (kernel, arguments) per call."""
    return [(advect_vector, (f, dt, inflow)), (pressure_vector, (f, jacobi_iters)), (project_vector, (f,))]


if __name__ == "__main__":  # a module the examples import
    import sys

    from qgraph.examples.command_line import helper_module

    sys.exit(helper_module("stable_fluids_vector", __doc__, ("stable_fluids",)))
