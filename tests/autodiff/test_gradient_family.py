"""Control flow meets autodiff, as a generated family: every control-flow construct of a task
(`continue`, `break`, a counting `while` with `break`, `while True` with `break`, an early return
in a helper, nested loops with `break`) placed in every context a gradient is taken in (a
parallel loop, a serial loop, a repeat body, a flag loop, a graph_while kernel, a @qgraph.graph
step under a tape, a step with the tape inside called three times, a graph_while step under a
tape, two tapes, a second backward, kernel.grad), on the CPU, the CUDA device loops and the host
fallback (loop_arch). Each gradient is checked against float64 central differences of the same
forward program, or must raise the documented error where one is listed; replays (the second
and third calls of a captured step) are checked too."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.generated import generated_module
from helpers.gradient_family import CONSTRUCTS, HEADER, W0, X0

SHAPES = {  # kernel source with {name}, {body} (indented for the loop over i) and what it does with v
    "par": ("def {name}(x, w, y):\n    for i in range(x.shape[0]):\n{body}        y[i] = v\n", 8),
    "ser": ("def {name}(x, w, y):\n    for i in qgraph.serial(range(x.shape[0])):\n{body}        y[i] = v\n", 8),
    "rep": ("def {name}(x, w, steps: int):\n    for _ in qgraph.repeat(steps):\n        for i in range(x.shape[0]):\n"
            "{body}            x[i] = x[i] + 0.05 * v\n", 12),
    "flag": ("def {name}(x, w, count, flag, steps: int):\n    count[0] = 0\n    flag[0] = 1\n"
             "    while qgraph.loop(flag):\n        for i in range(x.shape[0]):\n{body}"
             "            x[i] = x[i] + 0.05 * v\n        count[0] += 1\n"
             "        flag[0] = 1 if count[0] < steps else 0\n", 12),
    "gw": ("def {name}(x, w, count, flag, steps: int):\n    for i in range(x.shape[0]):\n{body}"
           "        x[i] = x[i] + 0.05 * v\n    count[0] += 1\n    flag[0] = 1 if count[0] < steps else 0\n", 8),
    "inplace": ("def {name}(x, w):\n    for i in range(x.shape[0]):\n{body}        x[i] = x[i] + 0.05 * v\n", 8),
}


STEPS = '''

@qgraph.graph
def {c}_par_step(x, w, y, s, loss):
    {c}_par(x, w, y)
    fam_loss(y, s, loss)


@qgraph.graph
def {c}_rep_step(x, w, s, loss, steps: int):
    {c}_rep(x, w, steps)
    fam_loss(x, s, loss)


@qgraph.graph
def {c}_par_train(x, w, y, s, loss):
    with qgraph.Tape() as tape:
        {c}_par(x, w, y)
        fam_loss(y, s, loss)
    tape.backward(loss)


@qgraph.graph
def {c}_rep_train(x, w, s, loss, steps: int):
    with qgraph.Tape() as tape:
        {c}_rep(x, w, steps)
        fam_loss(x, s, loss)
    tape.backward(loss)


@qgraph.graph(graph_while="flag")
def {c}_gw_step(x, w, count, flag, steps: int):
    {c}_inplace(x, w)
    fam_count(count, flag, steps)
'''


def _source() -> str:
    parts = [HEADER]
    for c, lines in CONSTRUCTS.items():
        for shape, (template, indent) in SHAPES.items():
            body = "".join(" " * indent + line + "\n" for line in lines)
            decorator = '@qgraph.kernel(graph_while="flag")' if shape == "gw" else "@qgraph.kernel"
            parts.append(f"\n\n{decorator}\n" + template.format(name=f"{c}_{shape}", body=body))
        parts.append(STEPS.format(c=c))
    return "".join(parts)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    return generated_module(tmp_path_factory, "qgraph_gradient_family", _source())


S = np.array([0.7, -1.3, 0.4, 1.1])
STEP_COUNT = 3


def _state(q, shape: str):
    """Fresh arrays of a call: x, w (with gradients), and the shape's others."""
    x = q.from_numpy(X0.copy(), requires_grad=True)
    w = q.from_numpy(W0.copy(), requires_grad=True)
    other = {"y": q.ndarray(q.f64, (4,)), "count": q.ndarray(q.i32, (1,)), "flag": q.from_numpy(np.ones(1, np.int32)),
             "s": q.from_numpy(S), "loss": q.ndarray(q.f64, (1,))}
    return x, w, other


def _call(family, c: str, shape: str, x, w, o) -> object:
    """The shape's kernel called once; the array the loss reads."""
    kernel = getattr(family, f"{c}_{shape}")
    if shape in ("par", "ser"):
        kernel(x, w, o["y"])
        return o["y"]
    if shape == "rep":
        kernel(x, w, STEP_COUNT)
    elif shape in ("flag", "gw"):
        kernel(x, w, o["count"], o["flag"], STEP_COUNT)
    elif shape == "gw_step":
        getattr(family, f"{c}_gw_step")(x, w, o["count"], o["flag"], STEP_COUNT)
    return x


def _numeric(family, c: str, shape: str, eps: float = 1e-6) -> np.ndarray:
    """Central differences of L = S . out with respect to x0 and w (concatenated), forward calls only."""
    import qgraph

    def loss(x0, w0) -> float:
        x, w, o = _state(qgraph, shape)
        x.from_numpy(x0)
        w.from_numpy(w0)
        return float(S @ _call(family, c, shape, x, w, o).to_numpy())

    out = []
    for which in (0, 1):
        base = (X0, W0)[which]
        for j in range(base.size):
            step = np.zeros(base.size)
            step[j] = eps
            args = [[X0, W0], [X0, W0]]
            args[0][which], args[1][which] = base + step, base - step
            out.append((loss(*args[0]) - loss(*args[1])) / (2 * eps))
    return np.array(out)


def _grads(x, w) -> np.ndarray:
    return np.concatenate([x.grad.to_numpy(), w.grad.to_numpy()])


def _taped(family, c, shape, q, wrap_step: bool = False) -> np.ndarray:
    x, w, o = _state(q, shape)
    with q.Tape() as tape:
        if wrap_step and shape == "par":
            getattr(family, f"{c}_par_step")(x, w, o["y"], o["s"], o["loss"])
        elif wrap_step:
            getattr(family, f"{c}_rep_step")(x, w, o["s"], o["loss"], STEP_COUNT)
        else:
            family.fam_loss(_call(family, c, shape, x, w, o), o["s"], o["loss"])
    tape.backward(o["loss"])
    return _grads(x, w)


def _run_context(family, c: str, context: str, shape: str) -> list[np.ndarray]:
    """The gradients (x0 then w) the context computes; several for contexts that repeat."""
    import qgraph as q

    if context == "grad":
        x, w, o = _state(q, shape)
        out = _call(family, c, shape, x, w, o)
        out.requires_grad = True
        out.grad.from_numpy(S)  # the gradient of what the call left (x itself, for the loops in place)
        getattr(family, f"{c}_{shape}").grad(x, w, *([o["y"]] if shape in ("par", "ser") else [STEP_COUNT]))
        return [_grads(x, w)]
    if context == "tape":
        return [_taped(family, c, shape, q)]
    if context == "step":
        return [_taped(family, c, shape, q, wrap_step=True)]
    if context == "train3":  # the tape inside the step: captured with it on CUDA; calls 2 and 3 replay
        x, w, o = _state(q, shape)
        found = []
        for _ in range(3):
            x.from_numpy(X0)
            w.from_numpy(W0)
            o["loss"].fill(0.0)
            x.grad.fill(0.0)
            w.grad.fill(0.0)
            if shape == "par":
                getattr(family, f"{c}_par_train")(x, w, o["y"], o["s"], o["loss"])
            else:
                getattr(family, f"{c}_rep_train")(x, w, o["s"], o["loss"], STEP_COUNT)
            found.append(_grads(x, w))
        return found
    if context == "two_tapes":  # tape B records the same kernel on other arrays, the same weights
        x, w, o = _state(q, shape)
        x2, _, o2 = _state(q, shape)
        with q.Tape() as a:
            family.fam_loss(_call(family, c, shape, x, w, o), o["s"], o["loss"])
        with q.Tape() as b:
            family.fam_loss(_call(family, c, shape, x2, w, o2), o2["s"], o2["loss"])
        a.backward(o["loss"])
        first = _grads(x, w)
        w.grad.fill(0.0)
        b.backward(o2["loss"])
        return [first, np.concatenate([x2.grad.to_numpy(), w.grad.to_numpy()])]
    if context == "second_backward":
        x, w, o = _state(q, shape)
        with q.Tape() as tape:
            family.fam_loss(_call(family, c, shape, x, w, o), o["s"], o["loss"])
        tape.backward(o["loss"])
        first = _grads(x, w)
        tape.backward(o["loss"])
        return [first, _grads(x, w) - first]
    raise AssertionError(context)


CONTEXTS = [("grad", "par"), ("grad", "ser"), ("grad", "rep"), ("tape", "par"), ("tape", "ser"), ("tape", "rep"),
            ("tape", "flag"), ("tape", "gw"), ("step", "par"), ("step", "rep"), ("train3", "par"), ("train3", "rep"),
            ("tape", "gw_step"), ("two_tapes", "par"), ("two_tapes", "rep"), ("second_backward", "par"),
            ("second_backward", "flag")]

# where the documented answer is an error: a loop whose gradient needs each pass's state needs a tape; with
# QGRAPH_GRAPH_WHILE=host a kernel whose device loops run on the host cannot be part of a @qgraph.graph step
ERRORS = {("grad", "rep"): "record the call under qgraph.Tape"}
HOST_ERRORS = {("step", "rep"): "cannot be part of a @qgraph.graph step",
               ("train3", "rep"): "cannot be part of a @qgraph.graph step"}


@pytest.mark.parametrize("context,shape", CONTEXTS, ids=[f"{c}-{s}" for c, s in CONTEXTS])
@pytest.mark.parametrize("construct", list(CONSTRUCTS))
def test_control_flow_gradient_in_every_context(loop_arch, family, construct, context, shape):
    import qgraph

    expected = _numeric(family, construct, shape)
    message = ERRORS.get((context, shape)) or (HOST_ERRORS.get((context, shape)) if loop_arch == "cuda-host" else None)
    if message is not None:
        with pytest.raises((qgraph.QgraphError, qgraph.QgraphSyntaxError), match=message):
            _run_context(family, construct, context, shape)
        return
    for k, found in enumerate(_run_context(family, construct, context, shape)):
        np.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-8,
                                   err_msg=f"{construct} in {context} ({shape}), result {k + 1} (x0 then w)")
