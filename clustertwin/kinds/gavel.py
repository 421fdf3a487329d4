"""Kind ``gavel``: heterogeneity-aware cluster scheduling at job level (Gavel, "Heterogeneity-Aware
Cluster Scheduling Policies for Deep Learning Workloads", §3-§5), simulated and run on real workers."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clustertwin.errors import InputError
from clustertwin.kinds.spec import Compared, Comparison, KindSpec, Progress, Reproduce, lazy
from clustertwin.scenarios.gavel_schema import PATH_FIELDS, Scenario

if TYPE_CHECKING:
    from clustertwin.scenarios.results import RunResult

# The metrics a comparison gives -> the (sim, real) fields of ``analysis/compare.py``'s headline.
COMPARED = {
    "avg_jct_s": ("avg_jct_sim_s", "avg_jct_real_s"),
    "makespan_s": ("makespan_sim_s", "makespan_real_s"),
    "utilisation": ("utilisation_sim", "utilisation_real"),
}


def _run_real(scenario: Scenario, progress: Progress | None, snapshot_dir: Path | None) -> RunResult:
    from clustertwin.runtime.gavel.run import run

    return run(scenario, progress, None, snapshot_dir)


def _resume_real(scenario: Scenario, progress: Progress | None, snapshot_dir: Path | None) -> RunResult:
    from clustertwin.runtime.gavel.run import run

    return run(scenario, progress, None, snapshot_dir, resume=True)


def _check(scenario: Scenario, backend: str) -> None:
    """Build the policy once so that an unknown name or parameter fails before any work starts."""
    from clustertwin.policies.registry import make_policy

    if backend == "real" and scenario.real is None:
        raise InputError(
            f"{scenario.source}: field real", "--backend real needs the scenario's `real:` section"
        )
    try:
        make_policy(scenario.policy.name, **scenario.policy.params)
    except (KeyError, ValueError) as err:
        raise InputError(scenario.source, f"field policy: {err.args[0] if err.args else err}") from None


def _metrics(scenario: Scenario, result: RunResult) -> dict[str, float]:
    if scenario.market is not None:  # a spot fleet: the cost is what the billing table says
        from clustertwin.analysis.gavel_market import market_metrics

        return market_metrics(result, scenario.cluster.gpus)
    from clustertwin.analysis.gavel_metrics import gavel_metrics

    return gavel_metrics(result, scenario.cluster.gpus, scenario.cluster.prices)


def _compare(sim_dir: Path, real_dir: Path, out: Path) -> Compared:
    from clustertwin.analysis.compare import compare_runs, ratio_table, write_comparison

    comparison = compare_runs(sim_dir, real_dir)
    write_comparison(comparison, out)
    figures = comparison.headline()
    pairs = {name: (float(figures[sim]), float(figures[real])) for name, (sim, real) in COMPARED.items()}
    return Compared(figures, pairs, ratio_table(comparison))


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


def _summary(metrics: dict[str, float], info: dict[str, Any]) -> Any:
    from rich.table import Table

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
    total, done = metrics.get("jobs_total"), metrics.get("jobs_completed")
    if total is not None and done is not None and done < total:
        from rich.console import Group
        from rich.text import Text

        note = (
            f"{done:.0f} of {total:.0f} jobs completed: the run stops once every job of the measured window"
            " has finished, leaving later arrivals unfinished"
        )
        return Group(table, Text(note))
    return table


def claim_set_names() -> list[str]:
    from clustertwin.scenarios.claims import claim_set_names as names

    return names()


def _reproduce(name: str, quick: bool, *, out: Path, workers: int | None = None) -> int:
    """Gavel's claim sets (ch. 5, ratios of two simulations) and ``cloud`` (ch. 6, the cloud-pricing
    what-ifs: a replay of the chapter's price logs)."""
    if name == "cloud":
        from clustertwin.reproduce_cloud import reproduce as reproduce_cloud

        return reproduce_cloud(name, quick, out=out, workers=workers)
    from clustertwin.reproduce import reproduce

    return reproduce(name, quick, out=out, workers=workers)


SPEC = KindSpec(
    name="gavel",
    description="Gavel: heterogeneity-aware GPU cluster scheduling, job level (policies as LPs, rounds)",
    schema=Scenario,
    path_fields=PATH_FIELDS,
    check_tables=lazy("clustertwin.scenarios.results:check_tables"),
    metrics=_metrics,
    simulate=lazy("clustertwin.sim.gavel.setup:run"),
    run_real=_run_real,
    resume_real=_resume_real,
    check=_check,
    prepare=lazy("clustertwin.sim.gavel.setup:build"),
    plot=lazy("clustertwin.analysis.gavel_plots:plot_run"),
    summary=_summary,
    comparison=Comparison(tuple(COMPARED), _compare),
    reproduce=Reproduce(lambda: [*claim_set_names(), "cloud"], _reproduce),
    profile=lazy("clustertwin.profile_gavel:profile_gavel"),
    bench=lazy("clustertwin.bench_gavel:bench_gavel"),
    bench_scale=lazy("clustertwin.bench_gavel:bench_gavel_scale"),
)
