"""stable_fluids' kernels written component by component (the "scalar" variant) and the
bilinear sampling helper both variants use."""

from __future__ import annotations

import math

import qgraph


@qgraph.func
def sample(q, ix, iy, s, t):
    """q bilinearly at index coordinates (ix + s, iy + t), ix and iy integers, 0 <= s, t < 1 (q[a, b]
    sits at (a, b)); indices outside are clamped to the edge."""
    i0 = min(max(ix, 0), q.shape[0] - 1)
    i1 = min(max(ix + 1, 0), q.shape[0] - 1)
    j0 = min(max(iy, 0), q.shape[1] - 1)
    j1 = min(max(iy + 1, 0), q.shape[1] - 1)
    low = q[i0, j0] + s * (q[i1, j0] - q[i0, j0])
    high = q[i0, j1] + s * (q[i1, j1] - q[i0, j1])
    return low + t * (high - low)


@qgraph.kernel(cuda_graph=True)
def advect_scalar(u, v, dye, u_new, v_new, dye_new, div, iters, dt: float, inflow: float):
    # Each quantity is traced back from where it lives; in its own index space the departure point
    # is (i - dt * u, j - dt * v), with the velocity there averaged from the other component's faces.
    # task 1 (parallel): u on vertical faces (n + 1, n); the walls i = 0 and i = n stay closed
    for i, j in qgraph.ndrange(u.shape[0], u.shape[1]):
        il = max(i - 1, 0)
        ir = min(i, v.shape[0] - 1)
        vv = 0.25 * (v[il, j] + v[ir, j] + v[il, j + 1] + v[ir, j + 1])
        x = i - dt * u[i, j]
        y = j - dt * vv
        ix = int(math.floor(x))
        iy = int(math.floor(y))
        u_new[i, j] = sample(u, ix, iy, x - ix, y - iy)
        if i == 0 or i == u.shape[0] - 1:
            u_new[i, j] = 0.0
    # task 2 (parallel): v on horizontal faces (n, n + 1); walls at j = 0 and j = n; the jet pushes up
    for i, j in qgraph.ndrange(v.shape[0], v.shape[1]):
        jb = max(j - 1, 0)
        jt = min(j, u.shape[1] - 1)
        uu = 0.25 * (u[i, jb] + u[i + 1, jb] + u[i, jt] + u[i + 1, jt])
        x = i - dt * uu
        y = j - dt * v[i, j]
        ix = int(math.floor(x))
        iy = int(math.floor(y))
        v_new[i, j] = sample(v, ix, iy, x - ix, y - iy)
        r = v.shape[0] // 16 + 1
        if j == 0 or j == v.shape[1] - 1:
            v_new[i, j] = 0.0
        elif j <= r and i >= v.shape[0] // 2 - r and i < v.shape[0] // 2 + r:
            v_new[i, j] = inflow
    # task 3 (parallel): dye at cell centres (the jet's cells are dyed), and the divergence of the new velocity
    for i, j in qgraph.ndrange(dye.shape[0], dye.shape[1]):
        uu = 0.5 * (u[i, j] + u[i + 1, j])
        vv = 0.5 * (v[i, j] + v[i, j + 1])
        x = i - dt * uu
        y = j - dt * vv
        ix = int(math.floor(x))
        iy = int(math.floor(y))
        dye_new[i, j] = sample(dye, ix, iy, x - ix, y - iy)
        r = dye.shape[0] // 16 + 1
        if j < r and i >= dye.shape[0] // 2 - r and i < dye.shape[0] // 2 + r:
            dye_new[i, j] = 1.0
        div[i, j] = u_new[i + 1, j] - u_new[i, j] + v_new[i, j + 1] - v_new[i, j]
    # task 4 (serial): restart the pressure solver's sweep count
    iters[0] = 0


@qgraph.kernel(graph_while="flag")
def pressure_scalar(p, p_new, div, iters, flag, n_iters: int):
    # tasks 1 and 2 (parallel): two Jacobi sweeps of laplace(p) = div, p -> p_new -> p; a clamped
    # neighbour is the cell itself: no flow through the walls (dp/dn = 0)
    for i, j in qgraph.ndrange(p.shape[0], p.shape[1]):
        pl = p[max(i - 1, 0), j]
        pr = p[min(i + 1, p.shape[0] - 1), j]
        pb = p[i, max(j - 1, 0)]
        pt = p[i, min(j + 1, p.shape[1] - 1)]
        p_new[i, j] = 0.25 * (pl + pr + pb + pt - div[i, j])
    for i, j in qgraph.ndrange(p.shape[0], p.shape[1]):
        pl = p_new[max(i - 1, 0), j]
        pr = p_new[min(i + 1, p.shape[0] - 1), j]
        pb = p_new[i, max(j - 1, 0)]
        pt = p_new[i, min(j + 1, p.shape[1] - 1)]
        p[i, j] = 0.25 * (pl + pr + pb + pt - div[i, j])
    # task 3 (serial): count the sweeps and decide whether to go round again
    iters[0] += 2
    flag[0] = 1 if iters[0] < n_iters else 0


@qgraph.kernel(cuda_graph=True)
def project_scalar(u, v, dye, u_new, v_new, dye_new, p):
    # tasks 1 and 2 (parallel): subtract the pressure gradient on the inner faces; the results become the state
    for i, j in qgraph.ndrange(u.shape[0], u.shape[1]):
        u[i, j] = u_new[i, j]
        if i > 0 and i < u.shape[0] - 1:
            u[i, j] -= p[i, j] - p[i - 1, j]
    for i, j in qgraph.ndrange(v.shape[0], v.shape[1]):
        v[i, j] = v_new[i, j]
        if j > 0 and j < v.shape[1] - 1:
            v[i, j] -= p[i, j] - p[i, j - 1]
    # task 3 (parallel): the advected dye becomes the state
    for i, j in qgraph.ndrange(dye.shape[0], dye.shape[1]):
        dye[i, j] = dye_new[i, j]


if __name__ == "__main__":  # a module the examples import
    import sys

    from qgraph.examples.command_line import helper_module

    sys.exit(helper_module("stable_fluids_kernels", __doc__, ("stable_fluids",)))
