"""Kind ``psld``: parameter-server load distribution at message level (block placement by
exploitation-exploration, elastic PS scaling), simulated and run on a real gloo parameter server."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.kinds.spec import KindSpec, Progress, Reproduce, lazy, metric_comparison, result_metrics
from clustertwin.scenarios.psld_schema import PSLDScenario

if TYPE_CHECKING:
    from clustertwin.scenarios.results import RunResult


def _run_real(scenario: PSLDScenario, progress: Progress | None, snapshot_dir: Path | None) -> RunResult:
    from clustertwin.runtime.psld.run import run_real

    return run_real(scenario, None, progress)


def _simulate(scenario: PSLDScenario, progress: Progress | None) -> RunResult:
    """Simulate the scenario; with ``real.model`` set, the simulated blocks are that network's tensors
    (built with torch here, above both executors, so the simulator never imports the runtime)."""
    from clustertwin.sim.psld import run

    tensors = None
    if scenario.real.model:
        from clustertwin.runtime.psld.run import real_tensors

        units, itemsize = real_tensors(scenario)
        tensors = [replace(t, nbytes=t.nbytes * itemsize) for t in units]
    return run(scenario, progress, tensors=tensors)


def _reproduce(name: str, quick: bool, *, out: Path, workers: int | None) -> int:
    from clustertwin.reproduce_psld import reproduce

    return reproduce(quick, out, workers)


SPEC = KindSpec(
    name="psld",
    description="PSLD: parameter-server block placement and elastic PS scaling, message level",
    schema=PSLDScenario,
    check_tables=lazy("clustertwin.scenarios.psld_results:check_psld_tables"),
    metrics=result_metrics("clustertwin.analysis.psld_metrics:psld_metrics"),
    simulate=_simulate,
    plot=lazy("clustertwin.analysis.run_plots:plot_psld_run"),
    comparison=metric_comparison("iterations_per_s"),
    run_real=_run_real,
    real_registries=("clustertwin.runtime.models.registry",),
    reproduce=Reproduce(lambda: ["psld"], _reproduce),
)
