"""KernelOptions: resolved once (decorator argument, else environment), one value through the
layers, and in the code-cache key wherever it changes generated code."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import qgraph
from qgraph.args.kinds import array_sig
from qgraph.compiler import cuda_program
from qgraph.lang import generated
from qgraph.lang.options import DEFAULT_OPTIONS, USE_ENVIRONMENT, KernelOptions
from qgraph.runtime.settings import Settings


@qgraph.kernel(fast_math=True)
def doubled(x, y):
    for i in range(x.shape[0]):
        y[i] = 2.0 * x[i] + 0.5


@qgraph.kernel
def halved(x, y):
    for i in range(x.shape[0]):
        y[i] = x[i] / 2


def test_a_decorator_argument_wins_over_the_environment_and_the_rest_come_from_it():
    settings = Settings(fast_math=False, deterministic=True, debug="nan", max_iterations=7, graph_cache_size=3)
    options = doubled.options.resolved(settings)
    assert options.fast_math is True  # given to the decorator
    taken = (options.deterministic, options.debug, options.max_iterations, options.graph_cache_size)
    assert taken == (True, "nan", 7, 3)
    explicit_off = KernelOptions(debug=None, fast_math=False).resolved(Settings(debug="bounds", fast_math=True))
    assert (explicit_off.debug, explicit_off.fast_math) == (None, False)  # an explicit "off" is not "unset"


def test_resolved_options_leave_nothing_to_the_environment():
    options = halved.options.resolved(Settings())
    assert all(getattr(options, f.name) is not USE_ENVIRONMENT for f in dataclasses.fields(options))
    assert options == dataclasses.replace(DEFAULT_OPTIONS, cuda_graph=halved.cuda_graph)


def test_the_environments_defaults_are_the_options_defaults():
    settings = Settings()
    for f in dataclasses.fields(KernelOptions):
        if hasattr(settings, f.name):
            assert getattr(settings, f.name) == getattr(DEFAULT_OPTIONS, f.name), f.name


def test_options_are_resolved_once_per_runtime_generation(cpu, monkeypatch):
    x, y = np.arange(4.0), np.zeros(4)
    halved(x, y)
    state = qgraph.runtime.STATE
    first = halved.options_now(state)
    assert halved.options_now(state) is first  # the same value while the generation lasts
    assert halved.launchers["cpu"].options is first  # the launcher runs with it, not its own reading
    monkeypatch.setenv("QGRAPH_DEFAULT_FLOAT", "float32")
    qgraph.init("cpu")  # a new generation reads the environment again
    halved(x, y)
    assert halved.options_now(qgraph.runtime.STATE).default_float == "f32" and first.default_float == "f64"
    np.testing.assert_allclose(y, x / 2)
    monkeypatch.delenv("QGRAPH_DEFAULT_FLOAT")
    qgraph.init("cpu")


def test_a_variant_replaces_options_and_keeps_the_rest():
    variant = doubled.variant(cuda_graph=True, max_iterations=None)
    assert variant.options == dataclasses.replace(doubled.options, cuda_graph=True, max_iterations=None)
    assert variant.cuda_graph and variant.source is doubled.source
    with pytest.raises(TypeError, match="no_such_option"):
        doubled.variant(no_such_option=True)


def test_every_option_that_changes_code_changes_the_code_key():
    changed = {"deterministic": True, "fast_math": True, "default_float": "f32", "debug": "nan", "lanes": False}
    code_fields = {f.name for f in dataclasses.fields(KernelOptions) if f.metadata.get("code")}
    assert code_fields == set(changed)
    keys = {DEFAULT_OPTIONS.code_key()} | {dataclasses.replace(DEFAULT_OPTIONS, **{k: v}).code_key()
                                           for k, v in changed.items()}
    assert len(keys) == len(changed) + 1
    # options that only change how calls run share the generated code
    running = dataclasses.replace(DEFAULT_OPTIONS, cuda_graph=True, max_iterations=5)
    assert running.code_key() == DEFAULT_OPTIONS.code_key()


class _RecordingCache:
    """A code cache that answers every lookup with a hit and remembers the keys asked for."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def load(self, key: str):
        self.keys.append(key)
        return {"entries": ["_task0"], "param_sizes": [8]}, b"cubin"


def test_the_cuda_code_cache_key_holds_the_options(monkeypatch):
    """build_program's key (no device, no compile: the recording cache answers with a hit)."""
    monkeypatch.setattr(generated, "_dump_dir", None)  # QGRAPH_DUMP compiles even on a hit
    key = (array_sig(np.dtype("f8"), 1, True),) * 2
    cache = _RecordingCache()
    variants = [DEFAULT_OPTIONS] + [dataclasses.replace(DEFAULT_OPTIONS, **{k: v}) for k, v in
                                    {"deterministic": True, "fast_math": True, "debug": "bounds"}.items()]
    for options in variants + [KernelOptions(cuda_graph=True, max_iterations=3)]:
        program = cuda_program.build_program(halved.source, key, (9, 0), None, cache, options)
        assert program.cached
    assert len(set(cache.keys)) == len(variants)  # a key per code option; options that run calls share one
    assert cache.keys[-1] == cache.keys[0]


@pytest.mark.parametrize("changes,error,message", [
    ({"fast_math": "yes"}, TypeError, "fast_math must be True, False or None, got 'yes'"),
    ({"graph_while_host": 1}, TypeError, "graph_while_host must be True, False or None, got 1"),
    ({"max_iterations": 0}, ValueError, r"max_iterations must be a positive int or None \(no guard\), got 0"),
    ({"graph_cache_size": True}, ValueError, "graph_cache_size must be a positive int, got True"),
    ({"default_float": "f16"}, ValueError, "default_float must be 'f32' or 'f64', got 'f16'"),
    ({"debug": True}, ValueError, "debug must be None, 'bounds' or 'nan', got True"),
])
def test_a_value_no_option_takes_is_refused_however_the_options_are_made(changes, error, message):
    with pytest.raises(error, match=message):
        KernelOptions(**changes)
    with pytest.raises(error, match=message):
        halved.variant(**changes)
