"""Kind ``psld``: parameter-server load distribution at message level (block placement by
exploitation-exploration, elastic PS scaling), simulated and run on a real gloo parameter server."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.kinds.spec import KindSpec, Progress, Reproduce, lazy, metric_comparison, result_metrics
from clustertwin.policies.psld.blocks import Tensor
from clustertwin.scenarios.psld_schema import PSLD_PATH_FIELDS, PSLDScenario

if TYPE_CHECKING:
    from clustertwin.scenarios.results import RunResult


def _run_real(scenario: PSLDScenario, progress: Progress | None, snapshot_dir: Path | None) -> RunResult:
    from clustertwin.runtime.psld.run import run_real

    return run_real(scenario, None, progress)


def simulate_psld(scenario: PSLDScenario, progress: Progress | None = None, **options) -> RunResult:
    """Simulate the scenario as its real run would train it: with its ``calibration`` file's measured
    values (``scenarios.psld_calibration``) and, with ``real.model`` set, that network's tensors as the
    blocks (built with torch here, above both executors, so the simulator never imports the runtime).
    ``options`` go to ``sim.psld.run`` (``initial_owners``)."""
    from clustertwin.scenarios.psld_calibration import calibrated
    from clustertwin.sim.psld import run

    scenario = calibrated(scenario)
    tensors = None
    if scenario.real.model:
        tensors = _real_tensors(scenario.real.model, scenario.real.data, scenario.seed)
    result = run(scenario, progress, tensors=tensors, **options)
    result.info["calibration"] = scenario.calibration or ""
    result.info["worker_compute_s"] = scenario.costs.worker_compute_s
    return result


@lru_cache(maxsize=4)
def _real_tensors(model: str, data: str | None, seed: int) -> tuple[Tensor, ...]:
    """A real network's tensors in fp32 bytes (built once per process: a seed sweep simulates the same
    network many times)."""
    from clustertwin.runtime.models.trainer import Trainer

    net = Trainer(model, data, seed, 1, 1)
    return tuple(Tensor(name, 4 * n, i) for i, (name, n) in enumerate(net.tensors()))


def _simulate(scenario: PSLDScenario, progress: Progress | None) -> RunResult:
    return simulate_psld(scenario, progress)


def _check(scenario: PSLDScenario, backend: str) -> None:
    if backend == "sim":
        from clustertwin.scenarios.psld_calibration import calibrated

        calibrated(scenario)  # a missing, broken or foreign calibration file, before anything runs


def _reproduce(name: str, quick: bool, *, out: Path, workers: int | None) -> int:
    from clustertwin.reproduce_psld import reproduce

    return reproduce(quick, out, workers)


SPEC = KindSpec(
    name="psld",
    description="PSLD: parameter-server block placement and elastic PS scaling, message level",
    schema=PSLDScenario,
    path_fields=PSLD_PATH_FIELDS,
    check_tables=lazy("clustertwin.scenarios.psld_results:check_psld_tables"),
    metrics=result_metrics("clustertwin.analysis.psld_metrics:psld_metrics"),
    simulate=_simulate,
    plot=lazy("clustertwin.analysis.run_plots:plot_psld_run"),
    comparison=metric_comparison("iterations_per_s", "reassignments"),
    run_real=_run_real,
    check=_check,
    profile=lazy("clustertwin.profile_psld:profile_psld"),
    real_registries=("clustertwin.runtime.models.registry",),
    reproduce=Reproduce(lambda: ["psld"], _reproduce),
)
