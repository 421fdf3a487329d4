"""The ``clustertwin`` command line.

Bad input of any kind (scenario, override, output folder) ends with ``error: <where>: <what>`` on
stderr and exit status 2, before anything is written. Each subcommand imports what it needs when it
runs, so quick commands such as ``validate`` do not pay for pandas, matplotlib or the simulator.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from clustertwin.errors import InputError, RunFailure
from clustertwin.kinds import KindSpec, ProfileRequest, find_kind, get_kind, kinds
from clustertwin.progress import progress_bar
from clustertwin.scenarios.load import load_scenario, read_kind
from clustertwin.solver_banner import silence_solver_banner

EXIT_INPUT = 2
# Errors that mean a path given by the user is unusable (exit 2, as other bad input); other OSErrors
# (a full disk, say) are failures of the run (exit 1).
_LOCATION_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ENOENT}
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    silence_solver_banner()
    try:
        return args.handler(args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INPUT
    except RunFailure as err:  # a process of a real run died: its message names it, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # a location given on the command line that cannot be read or written
        where = err.filename if err.filename is not None else "clustertwin"
        print(f"error: {where}: {err.strerror or err}", file=sys.stderr)
        return EXIT_INPUT if err.errno in _LOCATION_ERRORS else 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clustertwin", description="Simulate (or run for real) distributed deep-learning clusters."
    )
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a scenario and write its result folder")
    run.add_argument("scenario", nargs="?", help="scenario YAML file (default: the bundled gavel-default)")
    run.add_argument(
        "--backend", choices=("sim", "real"), default="sim", help="simulate, or run on real workers"
    )
    run.add_argument("--out", type=Path, help="output folder (default: runs/<name>-seed<seed>)")
    _add_overrides(run)
    run.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    run.add_argument("--quiet", action="store_true", help="no progress bar or table; print only the folder")
    run.add_argument(
        "--resume",
        action="store_true",
        help="--backend real: continue a run killed part-way from the journal in <out>.partial",
    )
    run.set_defaults(handler=_run)

    agent = commands.add_parser(
        "agent",
        help="serve one server's devices to a real run's scheduler (one agent per server)",
        description="Offer this machine's devices of one worker type to the scheduler of a real run"
        " (`clustertwin run SCENARIO --backend real` with real.agents: remote) and run the jobs it places"
        " here. The run's shared secret comes from $CLUSTERTWIN_SECRET or --secret-file.",
    )
    from clustertwin.runtime.gavel.agent import add_arguments

    add_arguments(agent)
    agent.set_defaults(handler=_agent)

    validate = commands.add_parser(
        "validate",
        help="check a scenario file without running it; or, with --backend, run the fidelity suite",
        description="validate SCENARIO [--set ...]: check a scenario file without running it."
        " validate --backend cpu|gpu: run every algorithm's validation cases for real and in simulation"
        " and report the relative error per metric (docs/validation.md).",
    )
    validate.add_argument("scenario", nargs="?", help="scenario YAML file to check")
    _add_overrides(validate)
    validate.add_argument(
        "--backend",
        nargs="?",
        const="cpu",
        choices=("cpu", "gpu"),
        help="run the fidelity suite's cases of this backend instead (bare --backend: cpu)",
    )
    validate.add_argument("--out", type=Path, help="suite results folder (default: runs/validate-<backend>)")
    validate.add_argument(
        "--from",
        dest="from_dir",
        type=Path,
        metavar="DIR",
        help="--backend gpu: read an existing results folder of experiments/gavel_gpu_fidelity.py",
    )
    validate.add_argument("--suite", type=Path, help="suite file (default: scenarios/validation/suite.yaml)")
    validate.add_argument("--quiet", action="store_true", help="suite: no progress bar or per-case lines")
    validate.set_defaults(handler=_validate)

    plot = commands.add_parser("plot", help="re-create the plots of a run folder")
    plot.add_argument("run_dir", type=Path, help="a folder written by `clustertwin run`")
    plot.set_defaults(handler=_plot)

    reproduce = commands.add_parser(
        "reproduce",
        help="check our numbers against a paper's claims",
        description="reproduce NAME: run a paper's claim set (gavel, cloud, flexrr, psld, proteus,"
        " pipedream), print claim | paper | ours | accept | holds, save <out>/claims.json and end with a"
        " summary line naming each gated claim that does not hold and why.",
        epilog="exit status: 0 every gated claim holds; 1 a gated claim does not hold; 2 bad input (an"
        " unknown claim set, an invalid claims file or option).",
    )
    reproduce.add_argument("name", help="claim set name")
    reproduce.add_argument(
        "--quick",
        action="store_true",
        help="smaller runs for CI (fewer seeds or jobs; each claim set says which)",
    )
    reproduce.add_argument("--out", type=Path, help="results folder (default: runs/reproduce-<name>[-quick])")
    reproduce.add_argument("--workers", type=_positive_int, help="parallel simulations (default: CPU count)")
    reproduce.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="also write the claims as a Markdown section of FILE (e.g. docs/reproduction.md), replacing"
        " the section an earlier run of the same set wrote",
    )
    reproduce.set_defaults(handler=_reproduce)

    compare = commands.add_parser(
        "compare", help="how far a simulated run was from a real run of the same scenario"
    )
    compare.add_argument("sim_dir", type=Path, metavar="SIM_DIR", help="run folder of the simulation")
    compare.add_argument("real_dir", type=Path, metavar="REAL_DIR", help="run folder of the real run")
    compare.add_argument(
        "--out", type=Path, help="where to write (default: REAL_DIR/compare-vs-<SIM_DIR name>)"
    )
    compare.set_defaults(handler=_compare)

    bench = commands.add_parser("bench", help="time a benchmark")
    bench.add_argument("name", help="benchmark name")
    bench.add_argument("--scale", action="store_true", help="the kind's scale benchmark (large clusters)")
    bench.set_defaults(handler=_bench)

    profile = commands.add_parser(
        "profile", help="measure a scenario's jobs on its real workers; write a throughput table"
    )
    profile.add_argument("scenario", help="scenario YAML file with a real section")
    _add_overrides(profile)
    profile.add_argument(
        "--out",
        type=Path,
        help="throughput CSV (default: <scenario-stem>.throughputs.csv beside the scenario)",
    )
    length = profile.add_mutually_exclusive_group()
    length.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help="training seconds of each measured lease (default: 10; long enough to time a fast GPU job)",
    )
    length.add_argument("--steps", type=int, help="a measured lease of this many steps instead of --seconds")
    profile.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="measured leases per pair, each a process of its own; the pair gets their median (default: 1)",
    )
    profile.add_argument(
        "--under-load",
        action="store_true",
        help="measure each pair while every other CPU worker slot trains a background job, as in a real"
        " run's steady state (default: each pair alone on the machine)",
    )
    profile.add_argument(
        "--host",
        action="store_true",
        help="instead, measure how this host's busy cores slow each other down: print the scenario's"
        " cluster.host line (cores and efficiency) for the simulator",
    )
    profile.set_defaults(handler=_profile)

    sweep = commands.add_parser("sweep", help="run a grid of simulations on Ray (local, or a cluster)")
    sweep.add_argument("spec", help="sweep spec YAML file (see scenarios/sweeps/)")
    sweep.add_argument("--out", type=Path, required=True, help="sweep folder (rerun to resume)")
    sweep.add_argument("--address", help="Ray cluster address HOST:PORT (default: a local Ray)")
    sweep.add_argument("--workers", type=int, help="parallel runs (default: CPU count, or the cluster's)")
    sweep.add_argument("--retry-failed", action="store_true", help="run again the runs that failed before")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar or log lines")
    sweep.set_defaults(handler=_sweep)

    report = commands.add_parser("report", help="write a self-contained HTML report of a result folder")
    report.add_argument("dir", type=Path, metavar="DIR", help="a run, sweep or comparison folder")
    report.set_defaults(handler=_report)

    listing = commands.add_parser("list", help="the scenario kinds and the policies of every family")
    listing.add_argument("--json", action="store_true", help="print JSON instead of tables")
    listing.set_defaults(handler=_list)
    return parser


def _positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (argparse exits 2 naming the option otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"need at least 1, got {value}")
    return value


def _add_overrides(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario field, e.g. --set cluster.gpus.v100=8 (value read as YAML; repeatable;"
        " a relative path is taken from the working directory)",
    )


def _run(args: argparse.Namespace) -> int:
    from clustertwin.api import run

    scenario = load_scenario(args.scenario, args.overrides)
    suffix = "-real" if args.backend == "real" else ""
    out = args.out or Path("runs") / f"{scenario.name}-seed{scenario.seed}{suffix}"
    verb = "running" if args.backend == "real" else "simulating"
    with progress_bar(f"{verb} {scenario.name}", quiet=args.quiet) as progress:
        output = run(
            scenario=scenario, backend=args.backend, out=out, progress=progress, plots=not args.no_plots,
            resume=args.resume,
        )  # fmt: skip
    if not args.quiet:
        summary = get_kind(output.kind).summary or _metric_table
        Console().print(summary(output.metrics, output.info))
    print(output.folder)
    return 0


def _agent(args: argparse.Namespace) -> int:
    from clustertwin.runtime.gavel.agent import serve

    return serve(args)


def _validate(args: argparse.Namespace) -> int:
    if (args.scenario is None) == (args.backend is None):
        given = "both" if args.scenario is not None else "neither"
        raise InputError(
            "validate",
            f"give either SCENARIO (check a scenario file) or --backend cpu|gpu (run the fidelity suite),"
            f" not {given}",
        )
    if args.backend is not None:
        return _validate_suite(args)
    suite_only = [flag for flag, value in (("--out", args.out), ("--from", args.from_dir),
                  ("--suite", args.suite), ("--quiet", args.quiet)) if value]  # fmt: skip
    if suite_only:
        raise InputError("validate", f"{', '.join(suite_only)} only go with --backend (the fidelity suite)")
    scenario = load_scenario(args.scenario, args.overrides)
    spec = get_kind(scenario.kind)
    if spec.check is not None:
        spec.check(scenario, "sim")
    if spec.prepare is not None:
        spec.prepare(scenario)
    print("ok")
    return 0


def _validate_suite(args: argparse.Namespace) -> int:
    from clustertwin import fidelity

    if args.overrides:
        raise InputError(
            "validate --backend", "--set applies to SCENARIO; a suite case's overrides are in its file"
        )
    out = args.out or Path("runs") / f"validate-{args.backend}"
    command = f"clustertwin validate --backend {args.backend}"
    for flag, value in (("--suite", args.suite), ("--from", args.from_dir), ("--out", out)):
        if value is not None:
            command += f" {flag} {value}"
    console = Console()
    if not console.is_terminal:  # a log or a pipe: wide enough that the table's cells are not cut
        console = Console(width=160)
    run = fidelity.run_suite(
        args.backend, out, suite=args.suite or fidelity.SUITE, from_dir=args.from_dir, quiet=args.quiet,
        command=command, console=console,
    )  # fmt: skip
    console.print(fidelity.render(run.results, f"fidelity suite, backend {args.backend}: sim vs real"))
    for name, error in run.failures.items():
        print(f"error: case {name}: {error}", file=sys.stderr)
    print(out / fidelity.TABLE_JSON)
    print(out / fidelity.TABLE_MD)
    return 1 if run.failures else 0


def _plot(args: argparse.Namespace) -> int:
    spec = _kind_of_run(args.run_dir)
    if spec.plot is None:
        raise InputError(str(args.run_dir), f"no plots for scenario kind {spec.name} yet")
    for path in spec.plot(args.run_dir):
        print(path)
    return 0


def _kind_of_run(run_dir: Path) -> KindSpec:
    """The kind of the run in a run folder (from its summary.json)."""
    if not run_dir.is_dir():
        raise InputError(str(run_dir), "no such folder")
    summary = run_dir / "summary.json"
    if not summary.is_file():
        raise InputError(str(run_dir), "not a run folder (no summary.json)")
    try:
        kind = json.loads(summary.read_text(encoding="utf-8"))["scenario"]["kind"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(str(summary), f"cannot read the run's kind: {err}") from None
    return get_kind(kind)


def _backend_of_run(run_dir: Path) -> str:
    """``sim`` or ``real``, as the run folder's summary.json says."""
    try:
        return str(json.loads((run_dir / "summary.json").read_text(encoding="utf-8")).get("backend", "?"))
    except (OSError, ValueError, AttributeError):
        return "?"


def _reproduce(args: argparse.Namespace) -> int:
    out = args.out or Path("runs") / f"reproduce-{args.name}{'-quick' if args.quick else ''}"
    known: list[str] = []
    for spec in kinds():
        if spec.reproduce is None:
            continue
        names = list(spec.reproduce.names())
        if args.name in names:
            code = spec.reproduce.run(args.name, args.quick, out=out, workers=args.workers)
            if args.markdown is not None:
                from clustertwin.claim_results import CLAIMS_FILE, update_markdown

                data = json.loads((out / CLAIMS_FILE).read_text(encoding="utf-8"))
                print(update_markdown(args.markdown, data))
            return code
        known += names
    raise InputError(f"reproduce {args.name}", f"no such claim set; known: {', '.join(sorted(known))}")


def _compare(args: argparse.Namespace) -> int:
    spec = _kind_of_run(args.sim_dir)
    if spec.comparison is None:
        raise InputError(str(args.sim_dir), f"no sim-vs-real comparison for scenario kind {spec.name} yet")
    out = args.out or args.real_dir / f"compare-vs-{args.sim_dir.resolve().name}"
    sides = {"prediction": args.sim_dir, "reference": args.real_dir}
    for role, folder in sides.items():
        print(f"{role}: {folder} ({_backend_of_run(folder)})", file=sys.stderr)
    if _backend_of_run(args.real_dir) != "real":
        print(
            f"note: {args.real_dir} is not a real run; it is the reference the errors are measured against",
            file=sys.stderr,
        )
    # Written before printing, so an unusable --out fails with no half report on the screen.
    compared = spec.comparison.compare(args.sim_dir, args.real_dir, out)
    for key, value in compared.headline.items():
        print(f"{key}={value}")
    if compared.details is not None:
        Console().print(compared.details)
    print(out)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from clustertwin.bench import bench

    return bench(args.name, scale=args.scale)


def _sweep(args: argparse.Namespace) -> int:
    from clustertwin.sweep import run_sweep

    return run_sweep(
        args.spec, args.out, address=args.address, workers=args.workers,
        retry_failed=args.retry_failed, quiet=args.quiet,
    )  # fmt: skip


def _report(args: argparse.Namespace) -> int:
    from clustertwin.analysis.report import write_report

    def plots_of(kind: str) -> Callable[[Path], list[Path]] | None:
        spec = find_kind(kind)
        return spec.plot if spec is not None else None

    print(write_report(args.dir, plots_of))
    return 0


def _profile(args: argparse.Namespace) -> int:
    if args.steps is not None and args.steps < 1:
        raise InputError(f"--steps {args.steps}", "a measured lease needs at least 1 step")
    if args.steps is None and not args.seconds > 0:
        raise InputError(f"--seconds {args.seconds}", "a measured lease needs a positive length")
    # Only the kind is read here: profiling may be what writes a file the scenario names.
    spec = get_kind(read_kind(args.scenario, args.overrides))
    if spec.profile is None:
        raise InputError(args.scenario, f"no profiling for scenario kind {spec.name} yet")
    request = ProfileRequest(
        args.scenario, tuple(args.overrides), args.out, None if args.steps is not None else args.seconds,
        args.steps, args.repeats, args.under_load, args.host,
    )  # fmt: skip
    return spec.profile(request)


def _list(args: argparse.Namespace) -> int:
    from clustertwin.policies.registry import families

    if importlib.util.find_spec("torch") is not None:
        for spec in kinds():
            for module in spec.real_registries:
                importlib.import_module(module)

    try:  # the real runs' models register themselves; they need torch (the optional runtime extra)
        import clustertwin.runtime.models.registry  # noqa: F401
    except ImportError:
        pass

    listed = {
        "kinds": [
            {
                "name": spec.name,
                "description": spec.description,
                "simulate": spec.simulate is not None,
                "real": spec.run_real is not None,
                "reproduce": list(spec.reproduce.names()) if spec.reproduce is not None else [],
                "bench": spec.bench is not None,
            }
            for spec in kinds()
        ],
        "families": {
            family: {
                "description": registry.description,
                "entries": {entry.name: entry.description for entry in registry.entries()},
            }
            for family, registry in families().items()
        },
    }
    if args.json:
        print(json.dumps(listed, indent=2))
        return 0
    console = Console(width=max(Console().width, 120))
    table = Table(title="scenario kinds")
    for column in ("kind", "simulate", "real", "reproduce", "bench", "description"):
        table.add_column(column)
    for kind in listed["kinds"]:
        table.add_row(
            kind["name"], _yes(kind["simulate"]), _yes(kind["real"]), ", ".join(kind["reproduce"]) or "-",
            _yes(kind["bench"]), kind["description"],
        )  # fmt: skip
    console.print(table)
    for family, registry in listed["families"].items():
        table = Table(title=f"{family}: {registry['description']}")
        table.add_column("name")
        table.add_column("description")
        for name, description in registry["entries"].items():
            table.add_row(name, description)
        console.print(table)
    return 0


def _yes(flag: bool) -> str:
    return "yes" if flag else "-"


def _metric_table(metrics: dict[str, float], info: dict[str, Any]) -> Table:
    table = Table(title="metrics")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.6g}")
    return table
