"""`python -m qgraph <command>`: demo, bench, info, precompile."""

from __future__ import annotations

import argparse
import math
import os
import sys
import traceback


def _demo(args: argparse.Namespace) -> int:
    """A 2D heat diffusion run to convergence with graph_while, then a launch-overhead report."""
    import warnings

    import qgraph
    from qgraph.bench.kernels import kernels_for
    from qgraph.bench.progress import StepBar, bars_wanted
    from qgraph.examples import heat_diffusion

    qgraph.init(args.arch)
    info = qgraph.device_info()
    where = f"cuda: {info.name}" if info is not None else "cpu (no usable CUDA GPU; pass --arch to choose)"
    print(f"qgraph {qgraph.__version__} on {where}\n", flush=True)  # before the bar, which is erased after
    with StepBar("demo", 5, bars_wanted(args.quiet)) as bar:

        def watch(passes: int, values: dict) -> None:  # the solve's max change, live (qgraph.report)
            if "max change" in values:
                bar.note(f"solving: step {passes:,}, max change {values['max change']:.2e}")

        result = heat_diffusion.run(n=args.n, tol=args.tol, max_steps=args.max_steps, check=True, on_step=bar.step,
                                    progress=watch)
        bar.step("compiling the 8-task kernel")
        module = kernels_for(8)
        arrays = [qgraph.ndarray(qgraph.f32, (256,)) for _ in range(8)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", qgraph.FallbackWarning)
            module.graph(*arrays, 256, 1.0)
            bar.step("timing launch overhead")
            report = qgraph.benchmark(module.graph, *arrays, 256, 1.0, repeat=7)
    print(f"2D heat diffusion, {result.n}x{result.n} grid, run to convergence with graph_while:")
    print(f"  {result.steps} steps in {result.seconds:.3f} s = {result.steps_per_second:,.0f} steps/s "
          f"(compile {result.compile_seconds:.2f} s, excluded)")
    print(f"  last max change {result.max_change:.2e} (tol {args.tol:g}): "
          f"{'converged' if result.converged else 'NOT converged'}")
    print(f"  vs NumPy running the same {result.steps} steps: max abs difference {result.reference_error:.2e}")
    if qgraph.current_arch() == "cpu" and "busy:" in _cpu_line():
        print("  the CPU is busy with other processes: this figure is lower than on a free machine\n  " +
              _cpu_line().split("\n")[0])
    ok = result.converged and result.reference_error is not None and result.reference_error < 1e-9
    if args.plot:
        heat_diffusion.diffuse_watched.history.plot(args.plot)
        print(f"  its max change per step, plotted: {args.plot}")

    print("\nlaunch overhead: one call of a kernel with 8 small tasks (256 elements each)")
    print(report)
    if qgraph.current_arch() == "cuda":
        print(f"  CUDA graphs make a call {report.speedup():.1f}x faster than launching its 8 tasks one by one")
    else:
        print("  (on cpu a call runs the compiled loops directly; CUDA graphs need a GPU)")
    print("\nresult check:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


def _bench(args: argparse.Namespace) -> int:
    from qgraph.bench import suite
    from qgraph.bench.progress import bars_wanted

    if args.plot:  # the plot is of GPU rows: say so before the suite's minutes, not after them
        import qgraph

        qgraph.init(args.arch)  # the backend the suite will run on (nothing is compiled yet: its own init is cheap)
        if qgraph.current_arch() != "cuda":
            why = ("--arch cpu" if args.arch == "cpu" else "QGRAPH_ARCH=cpu" if qgraph.runtime.STATE.settings.arch
                   == "cpu" else "no usable CUDA GPU; `python -m qgraph info` says why")
            raise qgraph.QgraphError(f"--plot draws per-call time vs task count on a GPU, and this run would be on "
                                     f"the cpu ({why}): drop --plot, or run on a CUDA GPU")

    return suite.main(quick=args.quick, json_path=args.json, plot_path=args.plot, arch=args.arch,
                      show_progress=bars_wanted(args.quiet))


# what to do about the usual reasons CUDA is not usable (matched in the reason's text)
_CUDA_FIXES = (("libcuda", "install the NVIDIA driver (the GPU's driver package provides libcuda.so)"),
               ("cuda-bindings cannot be imported", "pip install cuda-bindings (a dependency of qgraph)"),
               ("no CUDA device", "this machine has no NVIDIA GPU the driver can see (check nvidia-smi)"),
               ("does not exist", "pick an existing device ordinal"),
               ("CUDA_ERROR_INSUFFICIENT_DRIVER", "update the NVIDIA driver to one that supports CUDA 12.4+"))


def _info(args: argparse.Namespace) -> int:
    import qgraph
    from qgraph.bench.suite import environment
    from qgraph.runtime import state

    reason = state.cuda_status()
    if reason is None:
        info = state.open_device(0).info
        print(f"cuda: usable: {info.name} (compute capability {'.'.join(map(str, info.compute_capability))}, "
              f"driver for CUDA {info.driver_version // 1000}.{info.driver_version % 1000 // 10})")
    else:
        fix = next((f for text, f in _CUDA_FIXES if text in reason), "see the troubleshooting page of the docs")
        reason = reason.removeprefix("CUDA is not usable: ")
        print(f"cuda: not usable: {reason}\n  to fix: {fix}; the cpu backend works meanwhile")
    qgraph.init(args.arch)
    print(f"arch: {qgraph.current_arch()}")
    for key, value in environment().items():
        print(f"{key}: {value}")
    print(f"cache: {qgraph.runtime.STATE.settings.cache_dir or 'off'}")
    print(_cpu_line())
    return 0


def _cpu_line() -> str:
    """The CPU's cores, numba's threads and what else runs now (docs/environment.md, CPU threads)."""
    from qgraph.backends.cpu_forms import cpu_load
    from qgraph.compiler.numba_adapter import thread_count

    cores, others = cpu_load()
    line = f"cpu threads: {thread_count()} numba threads on {cores} cores"
    if others is None:
        return line
    line += f"; {others} other runnable thread{'s' if others != 1 else ''} now"
    if others >= cores:
        line += ("\n  busy: other processes hold every core now; parallel loops run on one thread while they do "
                 "(NUMBA_NUM_THREADS sets the most; see the environment page of the docs)")
    return line


def _precompile(args: argparse.Namespace) -> int:
    import qgraph
    from qgraph.cli.precompile import precompile

    qgraph.init(args.arch)
    print(precompile(args.target, args.types))
    cache = qgraph.runtime.STATE.settings.cache_dir
    print(f"compile cache: {cache}" if cache else "compile cache: off (QGRAPH_CACHE=0): nothing was kept")
    return 0


_QUIET_HELP = "no progress bars (they are drawn only when stderr is a terminal and CI is unset)"


def _global_options(defaults: bool) -> argparse.ArgumentParser:
    """--arch, --quiet, --verbose, accepted before the command and after it (the parent of the main
    parser and of every command's). Only the main parser's copy has defaults: a command's copy
    (fresh actions, default suppressed) sets one only when it is given, so `--arch cpu bench` keeps cpu."""
    def default(value):
        return value if defaults else argparse.SUPPRESS

    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--arch", choices=("cuda", "cpu"), default=default(None),
                         help="backend (default: QGRAPH_ARCH, else cuda when usable, else cpu)")
    options.add_argument("--quiet", "-q", action="store_true", default=default(False), help=_QUIET_HELP)
    options.add_argument("--verbose", action="store_true", default=default(False),
                         help="show the full traceback of an error (the exit status stays 2)")
    return options


def _output_file(text: str) -> str:
    """An output path, checked before a long run: its directory exists and can be written."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a directory: give a file name")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"the directory {folder} does not exist: create it or pick another path")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"the directory {folder} is not writable: pick another path")
    return text


def _plot_file(text: str) -> str:
    """--plot's path, checked like --json's, and matplotlib, which drawing it needs."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise argparse.ArgumentTypeError("drawing the plot needs matplotlib: pip install matplotlib")
    return _output_file(text)


# An option's type raises ArgumentTypeError, never ValueError: argparse prints the former's words after
# the option's name, but for the latter only "invalid <function name> value".

def _whole_number(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _grid_size(text: str) -> int:
    """demo --n: the heat example needs an interior."""
    n = _whole_number(text, "a whole number of cells per side, 3 or more")
    if n < 3:
        raise argparse.ArgumentTypeError(f"the grid needs an interior: give 3 or more, not {n}")
    return n


def _step_count(text: str) -> int:
    n = _whole_number(text, "a whole number of steps, 1 or more")
    if n < 1:
        raise argparse.ArgumentTypeError(f"give 1 or more, not {n}")
    return n


def _tolerance(text: str) -> float:
    """demo --tol: the max change to stop below."""
    try:
        tol = float(text)
    except ValueError:
        tol = math.nan
    if not tol > 0:  # NaN included
        raise argparse.ArgumentTypeError(f"expected a positive number (a max change such as 1e-4), got {text!r}")
    return tol


class _DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """--help shows every option's default, but for the flags and the options that are off unless given."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def _parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The main parser and each command's."""
    parser = argparse.ArgumentParser(prog="python -m qgraph", description=__doc__, parents=[_global_options(True)],
                                     formatter_class=_DefaultsShown)
    common = [_global_options(False)]
    sub = parser.add_subparsers(dest="command", metavar="{demo,bench,info,precompile}",
                                help="what to run (`python -m qgraph <command> --help` describes its options)")
    demo = sub.add_parser("demo", parents=common, formatter_class=_DefaultsShown,
                          help="heat diffusion to convergence and a launch-overhead report")
    demo.add_argument("--n", type=_grid_size, default=128, help="grid size (cells per side), 3 or more")
    demo.add_argument("--tol", type=_tolerance, default=1e-4,
                      help="stop when the max change is below this")
    demo.add_argument("--max-steps", type=_step_count, default=50_000,
                      help="stop after this many steps, converged or not")
    demo.add_argument("--plot", metavar="PATH", type=_plot_file,
                      help="save the solve's max change per step as a plot (matplotlib)")
    demo.set_defaults(run=_demo)
    bench = sub.add_parser("bench", parents=common, formatter_class=_DefaultsShown,
                           help="the benchmark suite (launch overhead, compile time, ...)")
    bench.add_argument("--quick", action="store_true", help="a reduced suite (under a minute)")
    bench.add_argument("--json", metavar="PATH", type=_output_file,
                       help="write every figure, with device and versions, to PATH")
    bench.add_argument("--plot", metavar="PATH", type=_plot_file,
                       help="write a PNG plot (per-call time vs task count; GPU rows only: refused on the cpu)")
    bench.set_defaults(run=_bench)
    info = sub.add_parser("info", parents=common, formatter_class=_DefaultsShown,
                          help="whether CUDA is usable (and why not), device, versions and cache directory")
    info.set_defaults(run=_info)
    pre = sub.add_parser("precompile", parents=common, formatter_class=_DefaultsShown,
                         help="compile and cache a kernel (or run a warm-up function) for deployment",
                         description="Compile a kernel for the signature its type texts spell, or run a warm-up "
                                     "function, filling the compile cache for later processes.")
    pre.add_argument("target", help="module:name or path/to/file.py:name (a kernel, or a warm-up function)")
    pre.add_argument("types", nargs="*", default=[],
                     help="a kernel's argument types as signature texts: float32[2d] float int32 (none for a "
                          "warm-up function)")
    pre.set_defaults(run=_precompile)
    return parser, sub.choices


def main(argv: list[str] | None = None) -> int:
    parser, commands = _parser()
    args, unknown = parser.parse_known_args(argv)  # exits with status 2, naming what is wrong
    if unknown:  # named by the command's parser, whose usage lists what it accepts
        commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error("choose a command: demo, bench, info or precompile (--help describes them)")
    import qgraph

    try:
        return args.run(args)
    except BrokenPipeError:  # the reader went away (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (qgraph.QgraphError, ValueError, TypeError, OSError) as e:
        if args.verbose:
            traceback.print_exc()
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"qgraph: error: {first}" + ("" if args.verbose else " (--verbose shows the traceback)"),
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.verbose:
            traceback.print_exc()
        print("qgraph: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
