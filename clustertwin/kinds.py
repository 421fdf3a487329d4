"""What the command line does with each scenario kind: check its tables, compute its metrics, plot it.

Simulation and real runs go through ``sim.run_scenario`` and ``runtime.run_scenario``, which dispatch on
the kind themselves; this table holds the rest, imported lazily so that ``validate`` stays quick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clustertwin.scenarios.results import RunResult

Metrics = Callable[[Any, RunResult], dict[str, float]]


@dataclass(frozen=True)
class KindOps:
    check_tables: Callable[[RunResult], None]
    metrics: Metrics
    plot: Callable[[Path], list[Path]] | None  # re-creates a run folder's PNGs
    has_real: bool  # whether --backend real exists for this kind
    # The kind's real run when it is more than ``runtime.run_scenario``: spot's is the runtime's run, then
    # the simulator's prediction of it (``analysis.spot_prediction``; the runtime never imports the sim).
    run_real: Callable[..., RunResult] | None = None


def ops_for(kind: str) -> KindOps:
    if kind == "gavel":
        from clustertwin.analysis.gavel_metrics import gavel_metrics
        from clustertwin.analysis.gavel_plots import plot_run
        from clustertwin.scenarios.results import check_tables

        def metrics(scenario: Any, result: RunResult) -> dict[str, float]:
            if scenario.market is not None:  # a spot fleet: the cost is what the billing table says
                from clustertwin.analysis.gavel_market import market_metrics

                return market_metrics(result, scenario.cluster.gpus)
            return gavel_metrics(result, scenario.cluster.gpus, scenario.cluster.prices)

        return KindOps(check_tables, metrics, plot_run, has_real=True)
    if kind == "flexrr":
        from clustertwin.analysis.flexrr_metrics import flexrr_metrics
        from clustertwin.scenarios.flexrr_results import check_flexrr_tables

        return KindOps(check_flexrr_tables, lambda _, r: flexrr_metrics(r), None, has_real=True)
    if kind == "pipedream":
        from clustertwin.analysis.pipedream_metrics import pipedream_metrics
        from clustertwin.analysis.pipedream_plots import plot_pipedream_run
        from clustertwin.scenarios.pipedream_results import check_pipedream_tables

        return KindOps(
            check_pipedream_tables, lambda _, r: pipedream_metrics(r), plot_pipedream_run, has_real=False
        )
    if kind == "spot":
        from clustertwin.analysis.spot_metrics import spot_metrics
        from clustertwin.analysis.spot_prediction import run_real
        from clustertwin.scenarios.spot_real_results import check_spot_real_tables, spot_real_metrics
        from clustertwin.scenarios.spot_results import check_spot_tables

        def real(result: RunResult) -> bool:
            return result.info.get("backend") == "real"

        def check_tables(result: RunResult) -> None:
            (check_spot_real_tables if real(result) else check_spot_tables)(result)

        def metrics(_: Any, result: RunResult) -> dict[str, float]:
            return spot_real_metrics(result) if real(result) else spot_metrics(result)

        return KindOps(check_tables, metrics, None, has_real=True, run_real=run_real)
    if kind == "psld":
        from clustertwin.analysis.psld_metrics import psld_metrics
        from clustertwin.scenarios.psld_results import check_psld_tables

        return KindOps(check_psld_tables, lambda _, r: psld_metrics(r), None, has_real=True)
    raise KeyError(f"no command-line support for scenario kind {kind!r}")
