"""Kind ``flexrr``: straggler mitigation at iteration/message level ("Addressing the Straggler Problem
for Iterative Convergent Parallel ML", §3-§4: SSP with RapidReassignment), simulated and run for real."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.errors import InputError
from clustertwin.kinds.spec import (
    Compared,
    Comparison,
    Emit,
    KindSpec,
    Progress,
    Reproduce,
    lazy,
    metric_comparison,
    result_metrics,
)
from clustertwin.scenarios.flexrr_schema import FLEXRR_PATH_FIELDS, FlexRRScenario

if TYPE_CHECKING:
    from clustertwin.scenarios.results import RunResult


def _check(scenario: FlexRRScenario, backend: str) -> None:
    cores = os.cpu_count() or 1
    if backend == "real" and scenario.cluster.workers > 2 * cores:
        raise InputError(
            f"{scenario.source}: field cluster",
            f"a real FlexRR run starts one process per worker: {scenario.cluster.workers} workers on"
            f" {cores} cores would measure the machine, not the algorithm; lower"
            " cluster.machines or cluster.workers_per_machine",
        )
    if backend == "real":
        _check_real(scenario)


def _check_real(scenario: FlexRRScenario) -> None:
    """The model and data set a real run trains must load, and a simulated PS size must be theirs."""
    from clustertwin.runtime.flexrr.model import Problem, Trainer

    rt = scenario.real
    # one example: the model's size does not depend on how many there are
    probe = Problem(1, rt.features, rt.classes, seed=scenario.seed, pool=1, dtype=rt.dtype)
    probe = Problem(**{**probe.__dict__, "model": rt.model, "data": rt.data, "hidden": rt.hidden})
    try:
        trainer = Trainer(probe)
    except (KeyError, ValueError, TypeError, RuntimeError) as err:
        raise InputError(f"{scenario.source}: field real.model / real.data", str(err).strip("'\"")) from None
    size = trainer.size * trainer.w0.element_size()
    if scenario.ps.model_bytes not in (0, size):
        raise InputError(
            f"{scenario.source}: field ps.model_bytes",
            f"{scenario.ps.model_bytes}, but the real model ({rt.model}, {trainer.size} {rt.dtype}"
            f" parameters) is {size} bytes: set ps.model_bytes: {size} (or 0: no PS traffic simulated)",
        )


def _run_real(scenario: FlexRRScenario, progress: Progress | None, snapshot_dir: Path | None) -> RunResult:
    from clustertwin.runtime.flexrr.launch import run_real

    with tempfile.TemporaryDirectory(prefix="clustertwin-flexrr-") as tmp:
        return run_real(scenario, Path(tmp))[0]


def _reproduce(name: str, quick: bool, *, out: Path, workers: int | None) -> int:
    from clustertwin.reproduce_flexrr import reproduce

    return reproduce(quick, out, workers)


HEADLINE = ("time_per_iteration_s", "makespan_s")
TO_TARGET = ("iterations_to_target", "time_to_target_s")  # with a convergence model in the scenario


def _compare(sim_dir: Path, real_dir: Path, out: Path) -> Compared:
    """The headline metrics, and time to the target loss where both runs have it."""
    import json

    def has(folder: Path, name: str) -> bool:
        metrics = json.loads((folder / "summary.json").read_text(encoding="utf-8")).get("metrics", {})
        return metrics.get(name) is not None

    try:
        extra = tuple(m for m in TO_TARGET if has(sim_dir, m) and has(real_dir, m))
    except (OSError, ValueError):
        extra = ()  # compare_summaries names the folder that is not a run
    return metric_comparison(*HEADLINE, *extra).compare(sim_dir, real_dir, out)


def _bench(emit: Emit) -> None:
    from clustertwin.bench_flexrr import bench_flexrr

    bench_flexrr(emit=emit)


SPEC = KindSpec(
    name="flexrr",
    description="FlexRR: straggler mitigation by SSP and RapidReassignment, iteration/message level",
    schema=FlexRRScenario,
    path_fields=FLEXRR_PATH_FIELDS,
    check_tables=lazy("clustertwin.scenarios.flexrr_results:check_flexrr_tables"),
    metrics=result_metrics("clustertwin.analysis.flexrr_metrics:flexrr_metrics"),
    simulate=lazy("clustertwin.sim.flexrr:run"),
    plot=lazy("clustertwin.analysis.run_plots:plot_flexrr_run"),
    comparison=Comparison(HEADLINE, _compare),
    run_real=_run_real,
    real_registries=("clustertwin.runtime.flexrr.models",),
    check=_check,
    reproduce=Reproduce(lambda: ["flexrr"], _reproduce),
    bench=_bench,
)
