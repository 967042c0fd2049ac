"""Running a fuzzed program and judging its gradient against float64 central differences.

L = sum over the seeded float arrays of sum(seed * the array after the calls); the adjoint
(kernel.grad, or Tape.backward with the seeds) gives dL/d(each array before the calls), which
central differences of L give from forward calls alone. Verdicts: right, documented (an error
the docs list, raised before any gradient was produced), wrong, crash (any other exception),
invalid (the forward pass itself failed: a generator bug), inconclusive (differences of two
steps disagree with each other: a kink at the input).
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

import qgraph

from .programs import Program

VERDICTS = ("right", "documented", "wrong", "crash", "invalid", "inconclusive")
FAILURES = ("wrong", "crash")
DOCUMENTED = ("cannot differentiate", "record the call under qgraph.Tape", "record the call under a tape",
              "split the kernel", "more than the tape's checkpoints held", "over the tape's checkpoint_bytes",
              "an array inside a struct", "cannot be part of a @qgraph.graph step", "no argument has a gradient",
              "passes one array as both", "no gradient flows through arrays inside structs")
EPS = (1e-6, 1e-5)


@dataclass
class Result:
    """The verdict on one program, with what a report needs to show it."""

    seed: int
    verdict: str
    mode: str
    features: list[str]
    detail: str = ""
    traceback: str = ""
    seconds: float = 0.0
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def report(self) -> str:
        """The failing case as text: seed, verdict, what differed or the exception, the source."""
        parts = [f"=== seed {self.seed}: {self.verdict} ({self.mode}; {', '.join(self.features)})"]
        parts += [self.detail] if self.detail else []
        parts += [self.traceback] if self.traceback else []
        parts += [f"note: {n}" for n in self.notes]
        return "\n".join(parts + ["--- source", self.source])


class Verdict(Exception):
    """Ends a check early with its verdict."""

    def __init__(self, verdict: str, detail: str = "", tb: str = "") -> None:
        super().__init__(detail)
        self.verdict, self.detail, self.tb = verdict, detail, tb


def documented(e: BaseException) -> bool:
    return isinstance(e, qgraph.QgraphError) and any(m in str(e) for m in DOCUMENTED)


def _exception(e: BaseException) -> tuple[str, str]:
    return f"{type(e).__name__}: {e}", "".join(traceback.format_exception(type(e), e, e.__traceback__))


def load(program: Program, workdir: Path, twin: bool = False):
    """Write the program's module into `workdir` and import it (qgraph reads kernels' source files)."""
    name = f"qgraph_fuzz_{program.seed}{program.variant}" + ("_f64" if twin else "")
    path = workdir / f"{name}.py"
    path.write_text(program.source64 if twin else program.source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def arrays(program: Program, grads: bool, values: dict[str, np.ndarray] | None = None, dtype=None) -> dict:
    out = {}
    for a in program.arrays:
        v = values[a.name] if values is not None and a.name in values else a.init
        if dtype is not None and a.is_float:
            v = v.astype(dtype)
        out[a.name] = qgraph.from_numpy(np.array(v), requires_grad=grads and a.is_float and a.grad)
    return out


def seeds_of(program: Program) -> dict[str, np.ndarray]:
    """The output gradients: one random array per seeded float array (numbers for a step's tape)."""
    rng = np.random.default_rng([program.seed, 7])
    out = {}
    for a in program.arrays:
        if not a.is_float or (program.mode == "grad" and not a.grad):
            continue
        if program.mode == "tape_in_step":
            out[a.name] = np.full(a.init.shape, program.scalar_seeds[a.name])
        else:
            out[a.name] = rng.standard_normal(a.init.shape)
    return out


def loss(program: Program, module, seeds: dict, values: dict[str, np.ndarray]) -> float:
    A = arrays(program, False, values, np.float64)
    module.run(A)
    return float(sum(np.sum(s * A[n].to_numpy().astype(np.float64)) for n, s in seeds.items()))


def numeric(program: Program, module, seeds: dict, eps: float) -> dict[str, np.ndarray]:
    """Central differences of L with respect to every element of every float array."""
    base = {a.name: a.init.astype(np.float64) for a in program.arrays if a.is_float}
    out = {}
    for name, start in base.items():
        g = np.zeros(start.shape)
        for idx in np.ndindex(start.shape):
            plus, minus = start.copy(), start.copy()
            plus[idx] += eps
            minus[idx] -= eps
            up, down = loss(program, module, seeds, {name: plus}), loss(program, module, seeds, {name: minus})
            g[idx] = (up - down) / (2 * eps)
        out[name] = g
    return out


def compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray], float32: bool) -> str:
    """'' when every gradient matches; else the arrays that differ, with both values."""
    rtol, atol = (3e-3, 3e-4) if float32 else (1e-5, 1e-6)
    bad = []
    for name, g in got.items():
        w = want[name]
        scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
        if g is None:
            bad.append(f"  {name}: no gradient (expected {np.array2string(w, precision=6)})")
            continue
        g = np.asarray(g, dtype=np.float64)
        if g.shape != w.shape or not np.all(np.abs(g - w) <= atol * scale + rtol * np.abs(w)):
            bad.append(f"  {name}: expected {np.array2string(w, precision=6)}\n  {' ' * len(name)}  "
                       f"got      {np.array2string(g, precision=6)}")
    return "\n".join(bad)


def _grad_pass(program: Program, module, seeds: dict, form: str) -> list[dict]:
    """The adjoint's gradients: one dict per backward pass (the increment of a second backward; each
    call of a step holding its tape)."""
    A = arrays(program, True)
    if form == "grad":
        module.run(A)
        for n, s in seeds.items():
            A[n].grad.from_numpy(s)
        _guarded(lambda: module.grad(A), A, seeds)
        return [{n: A[n].grad.to_numpy() for n in seeds}]
    if form == "tape_in_step":
        out = []
        for call in range(program.calls):
            if call:
                for a in program.arrays:
                    A[a.name].from_numpy(a.init)
                    if A[a.name].grad is not None:
                        A[a.name].grad.fill(0.0)
            _guarded(lambda: module.train(A), A, {}, first=call == 0)
            out.append({n: A[n].grad.to_numpy() for n in seeds})
        return out
    tape = qgraph.Tape(**program.tape_args)
    for part in ("run1", "run2") if program.reenter else ("run",):
        with tape:
            _guarded(partial(getattr(module, part), A), A, {})
    grads = {A[n]: s for n, s in seeds.items()}
    _guarded(lambda: tape.backward(grads=grads), A, {})
    first = {n: _gradient(tape, A[n]) for n in seeds}
    out = [{n: g for n, g in first.items() if g is not None or n in program.written}]
    if program.twice:
        _guarded(lambda: tape.backward(grads=grads), A, {}, first=False)
        out.append({n: None if first[n] is None else _gradient(tape, A[n]) - first[n] for n in out[0]})
    return out


def _gradient(tape, a) -> np.ndarray | None:
    g = tape.gradient(a)
    return None if g is None else g.to_numpy()


def _guarded(fn, A: dict, seeds: dict, first: bool = True) -> None:
    """Run `fn`; a documented error must come before any gradient changed (.grad still the seeds
    given, or zero), and in the first pass only."""
    try:
        fn()
    except qgraph.QgraphError as e:
        if not documented(e):
            raise
        text, tb = _exception(e)
        changed = [n for n, a in A.items() if a.grad is not None and not np.array_equal(
            a.grad.to_numpy(), np.asarray(seeds[n] if n in seeds else np.zeros(a.shape), a.grad.dtype))]
        if changed or not first:
            raise Verdict("crash", f"a documented error after gradients were produced ({changed or 'a later pass'})"
                          f": {text}", tb)
        raise Verdict("documented", text, tb)


def check(program: Program, workdir: Path) -> Result:
    """The verdict on `program`, its modules written into `workdir`."""
    start = time.perf_counter()
    result = Result(program.seed, "right", program.mode, sorted(program.features), source=program.source)
    try:
        _check(program, workdir, result)
    except Verdict as v:
        result.verdict, result.detail, result.traceback = v.verdict, v.detail, v.tb
    except Exception as e:  # noqa: BLE001 - whatever qgraph raised is the finding
        result.verdict = "crash"
        result.detail, result.traceback = _exception(e)
    result.seconds = time.perf_counter() - start
    if result.verdict == "right":
        result.source = ""
    return result


def _forward(program: Program, twin: bool, workdir: Path):
    try:
        module = load(program, workdir, twin)
        A = arrays(program, False, dtype=np.float64 if twin else None)
        module.run(A)
    except qgraph.QgraphError as e:
        raise Verdict("invalid", *_exception(e))
    for name, a in A.items():
        if not np.all(np.isfinite(a.to_numpy())):
            raise Verdict("invalid", f"the forward pass left a NaN or an infinity in {name}")
    return module


def _check(program: Program, workdir: Path, result: Result) -> None:
    module = _forward(program, False, workdir)
    twin = _forward(program, True, workdir) if program.float32 else module
    seeds = seeds_of(program)
    try:
        passes = _grad_pass(program, module, seeds, program.mode)
    except Verdict as v:
        if v.verdict != "documented" or program.mode != "grad" or "Tape" not in v.detail:
            raise
        # kernel.grad points to the tape: what a user does next is checked too
        result.notes.append(f"kernel.grad: {v.detail.splitlines()[0]}; checked under the tape instead")
        program.features.add("tape_fallback")
        result.features = sorted(program.features)
        seeds = {n: s for n, s in seeds_of(_as_tape(program)).items()}
        try:
            passes = _grad_pass(_as_tape(program), module, seeds, "tape")
        except Verdict as again:
            if again.verdict == "documented":
                raise v
            raise
        _judge(_as_tape(program), twin, seeds, passes, result)
        raise v
    _judge(program, twin, seeds, passes, result)


def _as_tape(program: Program) -> Program:
    from dataclasses import replace

    return replace(program, mode="tape", arrays=[replace(a, grad=True) for a in program.arrays])


def _judge(program: Program, twin, seeds: dict, passes: list[dict], result: Result) -> None:
    want = numeric(program, twin, seeds, EPS[0])
    want2 = None
    for k, got in enumerate(passes):
        bad = compare(got, want, program.float32)
        if not bad:
            continue
        want2 = want2 if want2 is not None else numeric(program, twin, seeds, EPS[1])
        if not compare(got, want2, program.float32):
            result.notes.append(f"pass {k + 1} matched differences of step {EPS[1]}, not {EPS[0]}")
            continue
        if compare(want, want2, program.float32):
            raise Verdict("inconclusive", f"differences of steps {EPS} disagree (a kink at the input):\n{bad}")
        what = ["the gradient", "the second backward's increment" if program.twice else "the step's second call",
                "the step's third call"][min(k, 2)]
        raise Verdict("wrong", f"{what} differs from central differences (eps {EPS[0]} and {EPS[1]}):\n{bad}")
