"""python -m qgraph demo / bench / info (CPU in CI; the GPU rows run on the GPU host)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import pytest

import qgraph
from qgraph.cli import main as cli


def test_demo_runs_and_checks_its_result(cpu, capsys, tmp_path):
    plot = tmp_path / "residual.png"
    assert cli.main(["--arch", "cpu", "demo", "--n", "24", "--tol", "1e-3", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "2D heat diffusion" in out and "steps/s" in out and "converged" in out
    assert "result check: PASSED" in out
    assert "us/call" in out
    assert f"plotted: {plot}" in out and plot.stat().st_size > 0  # the solve's reported max change


def _timed_figures(data, where=""):
    """(label, figure, its min, its max) of every timed figure (a key naming a unit of time) in a
    report's JSON; min and max are None where they are missing."""
    found = []
    if isinstance(data, list):
        for k, item in enumerate(data):
            found += _timed_figures(item, f"{where}[{k}]")
    elif isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, (dict, list)):
                found += _timed_figures(value, f"{where}.{key}")
            elif (isinstance(value, float) and re.search(r"(^|_)(us|ms|s)(_|$)", key)
                  and not re.search(r"_(min|max|median)$", key)):
                found.append((f"{where}.{key}", value, data.get(f"{key}_min"), data.get(f"{key}_max")))
    return found


def test_bench_on_cpu_writes_json_and_says_gpu_rows_need_a_gpu(cpu, tmp_path, capsys, monkeypatch):
    from qgraph.bench import compile_time, examples_bench, suite

    # the vector-examples section on nbody alone: mpm88's and stable_fluids' rows are checked in
    # test_simulation_examples, where their kernels are compiled anyway (here they were 70% of the bench's time)
    monkeypatch.setattr(examples_bench, "EXAMPLES", {"nbody": examples_bench.EXAMPLES["nbody"]})
    real_run = suite.run
    monkeypatch.setattr(suite, "run", lambda quick, arch, show_progress: real_run(
        quick=True, arch="cpu", cpu_sizes=(20_000,), show_progress=show_progress))
    monkeypatch.setattr(compile_time, "QUICK_MANY_LOOPS", 3)  # the many-loop kernel, small: the rows are tested
    path = tmp_path / "bench.json"
    assert cli.main(["--arch", "cpu", "bench", "--quick", "--json", str(path)]) == 0
    out = capsys.readouterr()
    assert "GPU rows need a CUDA GPU" in out.out
    assert "\r" not in out.out + out.err  # not a terminal: no progress bar, no redraws
    data = json.loads(path.read_text())
    assert data["arch"] == "cpu" and data["cpu"] and data["environment"]["versions"]["numba"]
    assert {"workload", "size", "qgraph_us", "numba_us", "ratio"} <= set(data["cpu"][0])
    # every timed figure carries the spread of its rounds
    figures = _timed_figures({k: v for k, v in data.items() if k not in ("environment", "seconds")})
    assert len(figures) > 30 and {label.split("[")[0] for label, *_ in figures} >= {
        ".cpu", ".cpu_sums", ".cpu_compute", ".structs", ".examples", ".first_calls", ".compile_time"}
    for label, value, low, high in figures:
        assert low is not None and high is not None and low <= value <= high, label
    assert isinstance(data["busy"], list)
    # first calls: cold and warm, for qgraph and numba alike, labelled in the table
    first = data["first_calls"][0]
    assert {"qgraph_cold_s", "qgraph_warm_s", "numba_cold_s", "numba_warm_s"} <= set(first)
    assert "qgraph cold" in out.out and "qgraph warm" in out.out and "numba cold" in out.out and "numba warm" in out.out
    rows = {(r["arch"], r["tasks"]): r for r in data["compile_time"]}
    assert set(rows) == {("cpu", 8), ("cpu", 3)}
    assert all(r["cold_peak_mb"] > 0 and r["warm_loaded_from_cache"] for r in rows.values())
    assert "compile time: first call in a fresh process" in out.out and "peak MB cold" in out.out


def test_info(cpu, capsys):
    assert cli.main(["--arch", "cpu", "info"]) == 0
    out = capsys.readouterr().out
    assert "arch: cpu" in out and "cache:" in out


def test_info_says_when_other_processes_hold_every_core(cpu, capsys, monkeypatch):
    """`qgraph info` gives numba's threads, the cores and the other runnable threads, and says when they
    hold every core (then parallel loops run on one thread: backends.cpu_forms.ThreadGovernor)."""
    from qgraph.backends import cpu_forms

    assert cli.main(["--arch", "cpu", "info"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("cpu threads: "))
    assert f"on {cpu_forms.cpu_load()[0]} cores" in line
    monkeypatch.setattr(cpu_forms, "cpu_load", lambda: (2, 2))
    assert cli.main(["--arch", "cpu", "info"]) == 0
    out = capsys.readouterr().out
    assert "2 other runnable threads now" in out and "busy: other processes hold every core now" in out
    monkeypatch.setattr(cpu_forms, "cpu_load", lambda: (4, 1))
    assert cli.main(["--arch", "cpu", "info"]) == 0
    assert "busy:" not in capsys.readouterr().out


def test_errors_are_one_line_with_exit_code_2(capsys):
    """Without a usable GPU, `--arch cuda` is one line on stderr (exit 2); --verbose re-raises."""
    from helpers.arch import cuda_unavailable_reason

    from qgraph.cli.main import main

    if cuda_unavailable_reason() is None:
        pytest.skip("CUDA is usable here: no error to report")
    assert main(["--arch", "cuda", "demo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("qgraph: error: CUDA is not usable:") and "--verbose" in err[0]
    assert main(["--arch", "cuda", "--verbose", "info"]) == 2  # the traceback, and the same exit status
    err = capsys.readouterr().err
    assert "Traceback" in err and "qgraph: error: CUDA is not usable:" in err
    qgraph.init("cpu")


def test_info_says_whether_cuda_is_usable_and_why_not(capsys):
    from helpers.arch import cuda_unavailable_reason

    from qgraph.cli.main import main

    assert main(["--arch", "cpu", "info"]) == 0
    out = capsys.readouterr().out
    if cuda_unavailable_reason() is None:
        assert out.startswith("cuda: usable: ") and "compute capability" in out
    else:
        assert out.startswith("cuda: not usable: ") and "to fix: " in out
    assert "arch: cpu" in out


def _demo_in_a_process(stderr, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qgraph", "--arch", "cpu", "demo", "--n", "24", "--tol", "1e-3"],
                          stdout=subprocess.PIPE, stderr=stderr, env=env, timeout=300)


def _demo_lines_parse(stdout: bytes) -> None:
    text = stdout.decode()
    assert "\r" not in text and "\x1b" not in text  # no bar, no cursor movement
    assert re.search(r"^  \d+ steps in [\d.]+ s = [\d,]+ steps/s", text, re.M)
    assert re.search(r"^  cpu +[\d.]+ us/call", text, re.M) and "result check: PASSED" in text


def test_demo_output_stays_plain_when_piped():
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = _demo_in_a_process(subprocess.PIPE, env)
    assert done.returncode == 0, done.stderr.decode()
    _demo_lines_parse(done.stdout)
    assert b"\r" not in done.stderr and b"compiling" not in done.stderr  # stderr is a pipe too: no bar


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.parametrize("ci", [None, "true"])
def test_demo_draws_its_bar_on_a_terminal_only_outside_ci(ci):
    import fcntl
    import struct
    import termios
    import threading

    master, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # tqdm needs a width
    drawn = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the terminal closed
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    try:
        done = _demo_in_a_process(terminal, env)
    finally:
        os.close(terminal)
        reader.join(10)
        os.close(master)
    assert done.returncode == 0
    _demo_lines_parse(done.stdout)  # standard output, a pipe, stays plain either way
    bar = b"".join(drawn)
    if ci is None:
        assert b"\r" in bar and b"compiling the heat kernel" in bar and b"timing launch overhead" in bar
    else:
        assert b"compiling" not in bar


def test_quiet_is_accepted_before_and_after_the_command(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "_demo", lambda args: seen.append(args.quiet) or 0)
    for argv in (["--quiet", "demo"], ["demo", "--quiet"], ["demo", "-q"], ["demo"]):
        assert cli.main(argv) == 0
    assert seen == [True, True, True, False]


@pytest.mark.parametrize("command", ["demo", "bench", "info", "precompile"])
def test_global_options_are_accepted_before_and_after_every_command(monkeypatch, command):
    seen = []
    monkeypatch.setattr(cli, f"_{command}", lambda args: seen.append((args.arch, args.quiet, args.verbose)) or 0)
    rest = ["mod:k"] if command == "precompile" else []
    for argv in ([command, *rest, "--arch", "cpu", "-q", "--verbose"], ["--arch", "cpu", "-q", "--verbose", command,
                 *rest], [command, *rest], ["--arch", "cpu", command, *rest], ["--arch", "cuda", command, *rest,
                                                                               "--arch", "cpu"]):
        assert cli.main(argv) == 0, argv
    assert seen == [("cpu", True, True), ("cpu", True, True), (None, False, False), ("cpu", False, False),
                    ("cpu", False, False)]


def _usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_a_bad_option_or_a_missing_command_is_named(capsys):
    assert _usage_error(["--bogus"], capsys) == "python -m qgraph: error: unrecognized arguments: --bogus"
    assert _usage_error(["demo", "--bogus"], capsys) == "python -m qgraph demo: error: unrecognized arguments: --bogus"
    assert "argument --arch: invalid choice: 'gpu'" in _usage_error(["bench", "--quick", "--arch", "gpu"], capsys)
    assert "choose a command: demo, bench, info or precompile" in _usage_error([], capsys)
    assert _usage_error(["demo", "--n", "2"], capsys).endswith("argument --n: the grid needs an interior: give 3 or "
                                                              "more, not 2")


@pytest.mark.parametrize("argv, error", [
    (["demo", "--n", "abc"], "argument --n: expected a whole number of cells per side, 3 or more, got 'abc'"),
    (["demo", "--n", "12.5"], "argument --n: expected a whole number of cells per side, 3 or more, got '12.5'"),
    (["demo", "--max-steps", "many"], "argument --max-steps: expected a whole number of steps, 1 or more, got 'many'"),
    (["demo", "--max-steps", "0"], "argument --max-steps: give 1 or more, not 0"),
    (["demo", "--tol", "tight"], "argument --tol: expected a positive number (a max change such as 1e-4), got 'tight'"),
    (["demo", "--tol=-1e-4"], "argument --tol: expected a positive number (a max change such as 1e-4), got '-1e-4'"),
    (["demo", "--tol", "nan"], "argument --tol: expected a positive number (a max change such as 1e-4), got 'nan'"),
])
def test_a_bad_value_names_the_option_and_what_it_expects(argv, error, capsys):
    """Not argparse's `invalid _grid_size value: 'abc'`, which names a function of ours."""
    line = _usage_error(argv, capsys)
    assert line.endswith(error) and "invalid" not in line


def test_help_shows_every_default():
    parser, commands = cli._parser()
    for name, command in [("", parser), *commands.items()]:
        text = " ".join(command.format_help().split())
        for action in command._actions:
            if action.default not in (None, False, [], argparse.SUPPRESS) and action.dest != "help":
                assert f"(default: {action.default})" in text, f"{name} {action.option_strings}: {text}"
    assert "--tol TOL stop when the max change is below this (default: 0.0001)" in " ".join(
        commands["demo"].format_help().split())


def test_bench_plot_on_the_cpu_is_refused_before_the_suite_runs(monkeypatch, tmp_path, capsys):
    from qgraph.bench import suite

    ran = []
    monkeypatch.setattr(suite, "main", lambda **kw: ran.append(kw) or 0)
    assert cli.main(["--arch", "cpu", "bench", "--quick", "--plot", str(tmp_path / "p.png")]) == 2
    assert capsys.readouterr().err.strip() == (
        "qgraph: error: --plot draws per-call time vs task count on a GPU, and this run would be on the cpu "
        "(--arch cpu): drop --plot, or run on a CUDA GPU (--verbose shows the traceback)")
    monkeypatch.setenv("QGRAPH_ARCH", "cpu")
    assert cli.main(["bench", "--plot", str(tmp_path / "p.png")]) == 2
    assert "on the cpu (QGRAPH_ARCH=cpu): drop --plot" in capsys.readouterr().err
    assert not ran and not (tmp_path / "p.png").exists()
    assert cli.main(["bench", "--quick"]) == 0 and len(ran) == 1  # without --plot, the suite runs


def test_bench_checks_its_output_paths_before_running(monkeypatch, tmp_path, capsys):
    from qgraph.bench import suite

    ran = []
    monkeypatch.setattr(suite, "main", lambda **kw: ran.append(kw) or 0)
    missing = tmp_path / "missing" / "x.json"
    assert _usage_error(["bench", "--quick", "--json", str(missing)], capsys).endswith(
        f"argument --json: the directory {missing.parent} does not exist: create it or pick another path")
    assert _usage_error(["bench", "--plot", str(tmp_path)], capsys).endswith(
        f"argument --plot: {tmp_path} is a directory: give a file name")
    assert not ran
    assert cli.main(["bench", "--quick", "--arch", "cpu", "--json", str(tmp_path / "b.json")]) == 0
    assert ran[0]["json_path"] == str(tmp_path / "b.json") and ran[0]["arch"] == "cpu" and ran[0]["quick"]
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "matplotlib" else
                        find_spec(name, *rest))
    for command in ("bench", "demo"):  # refused before a run, not after it
        assert _usage_error([command, "--plot", str(tmp_path / "p.png")], capsys).endswith(
            "argument --plot: drawing the plot needs matplotlib: pip install matplotlib")
    assert len(ran) == 1


def test_verbose_shows_the_traceback_and_keeps_the_exit_status(monkeypatch, capsys):
    def fail(args):
        raise qgraph.QgraphError("it went wrong\nsecond line")

    monkeypatch.setattr(cli, "_info", fail)
    assert cli.main(["info"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["qgraph: error: it went wrong (--verbose shows the traceback)"]
    assert cli.main(["info", "--verbose"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "QgraphError: it went wrong" in err
    assert err.strip().splitlines()[-1] == "qgraph: error: it went wrong"


def test_precompile_usage_agrees_with_its_help(monkeypatch, capsys):
    assert _usage_error(["precompile"], capsys).endswith("the following arguments are required: target")
    seen = []
    monkeypatch.setattr(cli, "_precompile", lambda args: seen.append((args.target, args.types)) or 0)
    assert cli.main(["precompile", "mod:warm_up"]) == 0  # a warm-up function takes no types
    assert cli.main(["precompile", "mod:k", "float32[2d]", "float"]) == 0
    assert seen == [("mod:warm_up", []), ("mod:k", ["float32[2d]", "float"])]


def test_every_option_of_every_command_is_described():
    parser, commands = cli._parser()
    for name, command in [("", parser), *commands.items()]:
        for action in command._actions:
            assert action.help and action.help != argparse.SUPPRESS, f"{name} {action.option_strings or action.dest}"


def test_module_entry_point():
    env = dict(os.environ, QGRAPH_ARCH="cpu")
    out = subprocess.run([sys.executable, "-m", "qgraph", "--help"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0 and "demo" in out.stdout and "bench" in out.stdout


def test_bench_on_gpu_quick_rows(cuda):
    from qgraph.bench import suite

    rows = suite.gpu_launch_rows(2, 256, budget=0.005, repeat=2)
    modes = {r.mode for r in rows}
    assert {"floor", "graph", "graph, 2 sets swapped", "eager", "numba dispatcher"} <= modes
    assert all(r.us > 0 and r.ratio > 0 for r in rows)
    loop = suite.gpu_loop_rows(1, 50, budget=0.005, repeat=2)
    assert {r.mode for r in loop} == {"raw WHILE node", "device loop", "device loop, no guard", "raw host loop",
                                      "host fallback", "device loop, unroll 2", "device loop, unroll 4",
                                      "repeat loop", "repeat loop, unroll 1"}
    from qgraph.bench import nested_loops

    nested = nested_loops.rows(budget=0.005, repeat=2)
    assert [r["mode"] for r in nested] == ["raw nested WHILE", "qgraph nested loops"]
    assert all(r["us"] > 0 for r in nested) and nested_loops.two_level.stats.iterations == (20, 50)
    qgraph.init("cuda")
