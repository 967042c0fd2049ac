"""Kernels of the gradient tests: device loops that keep states for their gradients
(test_adjoint_checkpoints.py, test_adjoint_loops.py) and the small losses and maps the tape tests
record (test_tape.py, test_gradient_cases.py)."""

from __future__ import annotations

import math

import qgraph


@qgraph.kernel
def nested(x, v, k, outer: int, inner: int, dt: float):
    for _ in qgraph.repeat(outer):
        for i in range(x.shape[0]):
            v[i] += dt * math.sin(x[i])  # a task of the outer pass, nonlinear in x
        for _ in qgraph.repeat(inner):
            for i in range(x.shape[0]):
                v[i] -= k[0] * v[i] * abs(v[i]) * dt
                x[i] += v[i] * dt


@qgraph.kernel
def nested_until(x, v, k, left, flag, inner: int, dt: float):
    while qgraph.loop(flag):
        for _ in qgraph.repeat(inner):
            for i in range(x.shape[0]):
                v[i] -= k[0] * v[i] * abs(v[i]) * dt
                x[i] += v[i] * dt
        left[()] -= 1
        if left[()] <= 0:
            flag[()] = 0


@qgraph.kernel
def switching(x, v, phase, flag, steps: int, dt: float):
    for _ in qgraph.repeat(steps):
        phase[()] += 1
        flag[()] = 1 if phase[()] % 3 == 0 else 0  # the kernel writes the branch's flag
        if qgraph.cond(flag):
            for i in range(x.shape[0]):
                v[i] = -0.8 * v[i] * abs(v[i])
        else:
            for i in range(x.shape[0]):
                v[i] -= math.sin(x[i]) * dt
        for i in range(x.shape[0]):
            x[i] += v[i] * dt


@qgraph.kernel
def drag_pass(x, v, k, dt: float):
    for i in range(x.shape[0]):
        v[i] -= k[0] * v[i] * abs(v[i]) * dt
        x[i] += v[i] * dt


@qgraph.kernel
def sum_of_squares(x, loss):
    for i in range(x.shape[0]):
        loss[0] += x[i] * x[i]


@qgraph.kernel
def square_into(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] * x[i]
