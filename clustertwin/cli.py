"""The ``clustertwin`` command line.

Bad input of any kind (scenario, override, output folder) ends with ``error: <where>: <what>`` on
stderr and exit status 2, before anything is written. Each subcommand imports what it needs when it
runs, so quick commands such as ``validate`` do not pay for pandas, matplotlib or the simulator.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from clustertwin.errors import InputError, RunFailure
from clustertwin.progress import progress_bar
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.kinds import AnyScenario
from clustertwin.scenarios.load import load_scenario, scenario_to_dict
from clustertwin.solver_banner import silence_solver_banner

if TYPE_CHECKING:
    from clustertwin.runtime.gavel.profile import ProfileRow

EXIT_INPUT = 2
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
    run.set_defaults(handler=_run)

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

    reproduce = commands.add_parser("reproduce", help="check our numbers against a paper's claims")
    reproduce.add_argument("name", help="claim set name")
    reproduce.add_argument(
        "--quick",
        action="store_true",
        help="smaller runs for CI (fewer seeds or jobs; each claim set says which)",
    )
    reproduce.add_argument("--out", type=Path, help="results folder (default: runs/reproduce-<name>[-quick])")
    reproduce.add_argument("--workers", type=int, help="parallel simulations (default: CPU count)")
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
    return parser


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
    from clustertwin.analysis.output import ensure_replaceable, write_run
    from clustertwin.kinds import ops_for

    scenario = load_scenario(args.scenario, args.overrides)
    ops = ops_for(scenario.kind)
    if args.backend == "real":
        if not ops.has_real:
            raise InputError(scenario.source, f"--backend real is not available for kind {scenario.kind} yet")
        if scenario.kind == "gavel" and scenario.real is None:
            raise InputError(
                f"{scenario.source}: field real", "--backend real needs the scenario's `real:` section"
            )
    _check_policy(scenario)
    suffix = "-real" if args.backend == "real" else ""
    out = args.out or Path("runs") / f"{scenario.name}-seed{scenario.seed}{suffix}"
    ensure_replaceable(out)

    if args.backend == "real":
        from clustertwin.runtime import run_scenario
    else:
        from clustertwin.sim import run_scenario

    started = time.perf_counter()
    verb = "running" if args.backend == "real" else "simulating"
    partial = out.with_name(out.name + ".partial")
    extra = {"snapshot_dir": partial} if args.backend == "real" and scenario.kind == "gavel" else {}
    with progress_bar(f"{verb} {scenario.name}", quiet=args.quiet) as progress:
        result = run_scenario(scenario, progress=progress, **extra)
    result.info.setdefault("wall_s", time.perf_counter() - started)
    ops.check_tables(result)
    metrics = ops.metrics(scenario, result)
    folder = write_run(
        out,
        scenario=scenario_to_dict(scenario),
        seed=scenario.seed,
        backend=args.backend,
        result=result,
        metrics=metrics,
        plots=False,
    )
    if ops.plot is not None and not args.no_plots:
        ops.plot(folder)
    if partial.exists():  # the complete folder now holds everything the snapshots did
        shutil.rmtree(partial)
    if not args.quiet:
        gavel = scenario.kind == "gavel"
        Console().print(_headline(metrics, result.info) if gavel else _metric_table(metrics))
    print(folder)
    return 0


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
    _check_policy(scenario)
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
    import json

    from clustertwin.kinds import ops_for

    summary = args.run_dir / "summary.json"
    if not summary.is_file():
        raise InputError(str(args.run_dir), "not a run folder (no summary.json)")
    kind = json.loads(summary.read_text())["scenario"]["kind"]
    plot = ops_for(kind).plot
    if plot is None:
        raise InputError(str(args.run_dir), f"no plots for scenario kind {kind} yet")
    for path in plot(args.run_dir):
        print(path)
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    out = args.out or Path("runs") / f"reproduce-{args.name}{'-quick' if args.quick else ''}"
    if args.name == "flexrr":
        from clustertwin import reproduce_flexrr

        return reproduce_flexrr.reproduce(args.quick, out, args.workers)
    if args.name == "proteus":
        from clustertwin import reproduce_proteus

        return reproduce_proteus.reproduce(args.quick, out)
    if args.name == "psld":
        from clustertwin import reproduce_psld

        return reproduce_psld.reproduce(args.quick, out, args.workers)
    if args.name == "pipedream":
        from clustertwin import reproduce_pipedream

        return reproduce_pipedream.reproduce(args.quick, out)
    from clustertwin.reproduce import reproduce

    return reproduce(args.name, args.quick, out=out, workers=args.workers)


def _compare(args: argparse.Namespace) -> int:
    from clustertwin.analysis.compare import compare_runs, ratio_table, write_comparison

    comparison = compare_runs(args.sim_dir, args.real_dir)
    out = args.out or args.real_dir / f"compare-vs-{args.sim_dir.resolve().name}"
    # Written before printing, so an unusable --out fails with no half report on the screen.
    write_comparison(comparison, out)
    for key, value in comparison.headline().items():
        print(f"{key}={value}")
    Console().print(ratio_table(comparison))
    print(out)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from clustertwin.bench import bench

    return bench(args.name)


def _sweep(args: argparse.Namespace) -> int:
    from clustertwin.sweep import run_sweep

    return run_sweep(
        args.spec, args.out, address=args.address, workers=args.workers,
        retry_failed=args.retry_failed, quiet=args.quiet,
    )  # fmt: skip


def _report(args: argparse.Namespace) -> int:
    from clustertwin.analysis.report import write_report

    print(write_report(args.dir))
    return 0


def _profile(args: argparse.Namespace) -> int:
    from clustertwin.runtime.gavel import profile

    if args.steps is not None and args.steps < 1:
        raise InputError(f"--steps {args.steps}", "a measured lease needs at least 1 step")
    if args.steps is None and not args.seconds > 0:
        raise InputError(f"--seconds {args.seconds}", "a measured lease needs a positive length")
    length = {"steps": args.steps} if args.steps is not None else {"seconds": args.seconds}
    scenario = profile.load_for_profiling(args.scenario, args.overrides)
    out = args.out or profile.default_output(args.scenario)
    profile.check_output(out)
    todo, skipped = profile.plan(scenario)  # every input check, before the first job process starts
    try:
        with progress_bar(f"profiling {scenario.name}") as progress:
            rows = profile.profile_scenario(
                scenario,
                **length,
                progress=progress,
                under_load=args.under_load,
                measured_row=_measured,
                repeats=args.repeats,
            )
    except profile.ProfileError as err:  # a job failed: not bad input, but no traceback either
        print(f"error: {err}", file=sys.stderr)
        return 1
    written = profile.write_profile(rows, out)
    per_lease = f"{args.steps} steps" if args.steps is not None else f"{args.seconds:g} s"
    table = Table(title=f"profile of {scenario.name} ({per_lease} per measured lease)")
    for column in ("job type", "scale", "worker", "steps/s", "load s", "save s", "start-up s"):
        table.add_column(column, justify="left" if column in ("job type", "worker") else "right")
    for r in rows:
        table.add_row(
            r.job_type, str(r.scale_factor), r.worker_type, f"{r.throughput:.3g}",
            f"{r.load_s:.3f}", f"{r.save_s:.3f}", f"{r.startup_s:.2f}",
        )  # fmt: skip
    for job_type, sf, worker_type in skipped:
        table.add_row(job_type, str(sf), worker_type, "too few GPUs", "-", "-", "-")
    Console().print(table)
    for path in written:
        print(path)
    return 0


def _measured(row: ProfileRow) -> None:
    # One line per pair as it is measured: a long profile's log keeps every finished pair if it is cut short.
    print(
        f"measured {row.job_type} x{row.scale_factor} on {row.worker_type}: {row.throughput:.4g} steps/s"
        f" (two leases' difference: {1 / row.two_lease_step_s:.4g}), start-up {row.startup_s:.2f} s,"
        f" load {row.load_s:.3f} s, save {row.save_s:.3f} s",
        file=sys.stderr,
        flush=True,
    )


def _check_policy(scenario: AnyScenario) -> None:
    """Build a Gavel policy once so an unknown name or parameter fails before any work starts."""
    from clustertwin.policies.registry import make_policy

    if not isinstance(scenario, Scenario):
        return
    try:
        make_policy(scenario.policy.name, **scenario.policy.params)
    except (KeyError, ValueError) as err:
        raise InputError(scenario.source, f"field policy: {err.args[0] if err.args else err}") from None


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


# Metric -> label and formatter for the table printed after a run; absent metrics are skipped.
_HEADLINE: dict[str, tuple[str, Callable[[float], str]]] = {
    "avg_jct_s": ("average JCT (window)", _hours),
    "p90_jct_s": ("p90 JCT (window)", _hours),
    "jobs_completed": ("jobs completed", lambda v: f"{v:.0f}"),
    "jobs_window_unfinished": ("window jobs unfinished", lambda v: f"{v:.0f}"),
    "makespan_s": ("makespan", _hours),
    "utilisation": ("GPU utilisation", lambda v: f"{v:.1%}"),
    "cost_usd": ("cost", lambda v: f"${v:,.2f}"),
    "slo_violations": ("SLO violations", lambda v: f"{v:.0f}"),
    "num_rounds": ("rounds", lambda v: f"{v:.0f}"),
}


def _headline(metrics: dict[str, float], info: dict[str, float | int | str]) -> Table:
    table = Table(title="result", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, (label, show) in _HEADLINE.items():
        if key in metrics:
            value = metrics[key]
            table.add_row(label, "-" if math.isnan(value) else show(value))
    wall = info.get("wall_s")
    if isinstance(wall, int | float):
        table.add_row("wall time", f"{wall:.1f} s")
    return table


def _metric_table(metrics: dict[str, float]) -> Table:
    table = Table(title="metrics")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.6g}")
    return table
