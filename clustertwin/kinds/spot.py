"""Kind ``spot``: a training job buying spot and on-demand machines from a replayed market ("Proteus:
Agile ML Elasticity through Tiered Reliability in Dynamic Resource Markets", §4-§5: BidBrain and
AgileML), simulated at instance level; with a ``real:`` section, AgileML (or checkpoint/restart) on real
processes with warned evictions, whose tables also hold the simulator's prediction of the run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from clustertwin.kinds.spec import KindSpec, Progress, Reproduce, lazy, metric_comparison
from clustertwin.scenarios.spot_schema import SPOT_PATH_FIELDS, SpotScenario

if TYPE_CHECKING:
    from clustertwin.scenarios.results import RunResult


def _real(result: RunResult) -> bool:
    """A real run with a fixed schedule (a market-driven real run has the simulation's tables)."""
    return result.info.get("backend") == "real" and not result.info.get("market")


def _check_tables(result: RunResult) -> None:
    if result.info.get("market"):
        from clustertwin.scenarios.spot_real_results import check_market_real_tables

        check_market_real_tables(result)
        return
    if _real(result):
        from clustertwin.scenarios.spot_real_results import check_spot_real_tables as check
    else:
        from clustertwin.scenarios.spot_results import check_spot_tables as check
    check(result)


def _metrics(scenario: Any, result: RunResult) -> dict[str, float]:
    if _real(result):
        from clustertwin.scenarios.spot_real_results import spot_real_metrics

        return spot_real_metrics(result)
    from clustertwin.analysis.spot_metrics import spot_metrics

    if result.info.get("market"):
        from clustertwin.scenarios.spot_real_results import market_real_metrics

        return {**spot_metrics(result), **market_real_metrics(result)}
    return spot_metrics(result)


def _run_real(scenario: SpotScenario, progress: Progress | None, snapshot_dir: Path | None) -> RunResult:
    from clustertwin.analysis.spot_prediction import run_real

    return run_real(scenario, progress)


def _prepare(scenario: SpotScenario) -> object:
    """The market the simulation would replay (a real run's market is its own ``real:`` section)."""
    if scenario.real is not None and not scenario.real.market:
        return None
    from clustertwin.sim.spot.setup import build

    return build(scenario)


def _reproduce(name: str, quick: bool, *, out: Path, workers: int | None) -> int:
    from clustertwin.reproduce_proteus import reproduce

    return reproduce(quick, out)


SPEC = KindSpec(
    name="spot",
    description="BidBrain + AgileML: spot-market acquisition, tiered-reliability elastic PS, instance level",
    schema=SpotScenario,
    path_fields=SPOT_PATH_FIELDS,
    check_tables=_check_tables,
    metrics=_metrics,
    simulate=lazy("clustertwin.sim.spot:run"),
    prepare=_prepare,
    plot=lazy("clustertwin.analysis.run_plots:plot_spot_run"),
    # Two simulated what-ifs; a real run carries its own prediction (the fidelity suite compares those).
    comparison=metric_comparison("cost_usd", "runtime_h"),
    run_real=_run_real,
    reproduce=Reproduce(lambda: ["proteus"], _reproduce),
)
