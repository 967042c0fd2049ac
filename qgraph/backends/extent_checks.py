"""The per-call check of the extents a kernel's loop bounds make certain (lang.front.loop_extents):
`add(np.ones(10**6), np.zeros(3))` over `for i in range(x.shape[0]): y[i] = ...` is an IndexError
naming the kernel, the line, both arrays and their extents, not a crash.

Both launches generate it inline after argument resolution (`lines`): one comparison of two extents
per rule, `b.shape[m] < a.shape[k] + d`, fixed when the launcher is made. Only when one fails (or an
argument has no extents, a kind the signature's own checks report) does `ExtentCheck.failed` look
closer: the rules that hold for the signature's kinds, the conditions under which the access runs
(an empty loop, a repeat count of 0 reach nothing), and then the error. Debug mode leaves every
index to its own checks, which report the exact index.
"""

from __future__ import annotations

import linecache

from ..args.kinds import arg_type
from ..lang.front.loop_extents import CertainExtent, certain_extents
from ..lang.front.parse import KernelSource
from ..lang.generated import Lines
from ..tracebacks import at_source


def extent_check(source: KernelSource, launched: KernelSource, debug: bool) -> ExtentCheck | None:
    """The check of a launcher running `launched` (made from the kernel's `source`), or None where
    there is nothing to check (no rule, debug mode, parameters that differ)."""
    if debug or source.param_names != launched.param_names:
        return None
    rules = certain_extents(source)
    return ExtentCheck(source, rules) if rules else None


class ExtentCheck:
    """A launcher's extent rules: `pairs` (array, axis, extent array, axis, offset) by parameter
    position, the largest offset of each, for the inline comparisons; the rules themselves for a
    comparison that fails."""

    def __init__(self, src: KernelSource, rules: tuple[CertainExtent, ...]) -> None:
        self.src = src
        self.rules = rules
        position = {name: k for k, name in enumerate(src.param_names)}
        self.position = position
        largest: dict[tuple, int] = {}
        for r in rules:
            at = (position[r.array], r.axis, position[r.extent], r.extent_axis)
            largest[at] = max(largest.get(at, r.offset), r.offset)
        self.pairs = tuple((*at, offset) for at, offset in largest.items())
        self._by_key: dict[tuple, tuple[CertainExtent, ...]] = {}
        self._bounds = None
        self._parallel = [t.index for t in src.tasks if t.parallel]

    def lines(self, ns: dict, extents: str, raw: str, forgiven: str = "") -> Lines:
        """The launch's check: `extents` the prefix of the locals whose `.shape` (or len) is read (v
        on the CPU, the NumPy arrays; a on CUDA, the arguments), `raw` the arguments' tuple display,
        `forgiven` a statement run for a call whose loops reach nothing where an array is short."""
        ns["_extents_failed"] = self.failed
        tests = []
        for b, m, a, k, d in self.pairs:
            shift = f" + {d}" if d > 0 else f" - {-d}" if d < 0 else ""
            tests.append(f"{_extent(extents, b, m)} < {_extent(extents, a, k)}{shift}")
        out = Lines()
        with out.block("try:"):
            out.line(f"short = {' or '.join(tests)}")
        with out.block("except Exception:"):  # an argument of another kind: its signature's checks say
            out.line("short = True")
        with out.block("if short:"):
            if forgiven:
                with out.block(f"if _extents_failed(key, {raw}):"):
                    out.line(forgiven)
            else:
                out.line(f"_extents_failed(key, {raw})")
        return out

    def check(self, key: tuple, args: tuple) -> None:
        """The plain dispatch's check (launcher.dispatch): what `lines` generates, as a loop."""
        try:
            short = any(args[b].shape[m] < args[a].shape[k] + d for b, m, a, k, d in self.pairs)
        except Exception:
            short = True
        if short:
            self.failed(key, args)

    def failed(self, key: tuple, args: tuple) -> bool:
        """IndexError for the first rule of this signature that the call breaks where its access
        certainly runs. Else whether a rule was broken where the loops around its access reach
        nothing this call (an empty loop, a repeat count of 0: the call is not one to remember)."""
        rules = self._by_key.get(key)
        if rules is None:
            rules = self._by_key[key] = self._rules_for(key)
        totals: list = []
        broken = False
        for rule in rules:
            try:
                have = _shape(args[self.position[rule.array]])[rule.axis]
                extent = _shape(args[self.position[rule.extent]])[rule.extent_axis]
            except Exception:
                continue
            if have < extent + rule.offset:
                if self._runs(rule, args, totals):
                    raise self._error(rule, args, extent)
                broken = True
        return broken

    def _rules_for(self, key: tuple) -> tuple[CertainExtent, ...]:
        """The rules whose arrays are plain arrays of enough dimensions in the signature `key`."""

        def array(name: str, axis: int) -> bool:
            try:
                kind = arg_type(key[self.position[name]])
            except (KeyError, IndexError, TypeError):
                return False
            return kind.is_array and not getattr(kind, "is_struct", False) and axis < kind.ndim

        return tuple(r for r in self.rules if array(r.array, r.axis) and array(r.extent, r.extent_axis))

    def _runs(self, rule: CertainExtent, args: tuple, totals: list) -> bool:
        """Whether the access of `rule` runs in this call: its loops are not empty, its repeat counts
        above 0 (`totals` caches the host bounds function's iteration counts, evaluated once)."""
        for condition in rule.conditions:
            try:
                if condition[0] == "extent":
                    _, name, axis, offset, start = condition
                    runs = _shape(args[self.position[name]])[axis] + offset > start
                elif condition[0] == "count":
                    runs = int(args[self.position[condition[1]]]) > condition[2]
                else:
                    if not totals:
                        totals.append(self._iteration_counts(args))
                    runs = totals[0][self._parallel.index(condition[1])] > 0
            except Exception:  # bounds that cannot be evaluated: the signature's checks report them
                return False
            if not runs:
                return False
        return True

    def _iteration_counts(self, args: tuple) -> tuple:
        if self._bounds is None:
            from .checks import host_bounds

            self._bounds = host_bounds(self.src)
        return self._bounds(*args)[1]

    def _error(self, rule: CertainExtent, args: tuple, extent: int) -> IndexError:
        src = self.src
        shape = tuple(_shape(args[self.position[rule.array]]))
        loop = rule.loop
        stop = extent + loop.offset
        line = linecache.getline(src.filename, rule.lineno).strip()
        fix = "pass arrays of matching length" if len(shape) == 1 else "pass arrays of matching shapes"
        return at_source(IndexError(
            f"kernel {src.name}, line {rule.lineno} ({src.filename}:{rule.lineno}): {rule.text} {rule.access} "
            f"index up to {extent + rule.offset - 1:,} on axis {rule.axis} but {rule.array} has shape {shape}; the "
            f"loop at line {loop.lineno} runs over {loop.bound} = {stop:,} — {fix}" + (f"\n    {line}" if line else "")
        ), src.filename, rule.lineno)


def _extent(prefix: str, k: int, axis: int) -> str:
    """The generated read of an extent: `len(v0)` for the first axis (the cheapest), else `.shape`."""
    return f"len({prefix}{k})" if axis == 0 and prefix == "v" else f"{prefix}{k}.shape[{axis}]"


def _shape(value) -> tuple:
    return tuple(int(n) for n in value.shape)
