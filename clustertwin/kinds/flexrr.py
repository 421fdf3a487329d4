"""Kind ``flexrr``: straggler mitigation at iteration/message level ("Addressing the Straggler Problem
for Iterative Convergent Parallel ML", §3-§4: SSP with RapidReassignment), simulated and run for real."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from clustertwin.errors import InputError
from clustertwin.kinds.spec import (
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


def _run_real(scenario: FlexRRScenario, progress: Progress | None, snapshot_dir: Path | None) -> RunResult:
    from clustertwin.runtime.flexrr.launch import run_real

    with tempfile.TemporaryDirectory(prefix="clustertwin-flexrr-") as tmp:
        return run_real(scenario, Path(tmp))[0]


def _reproduce(name: str, quick: bool, *, out: Path, workers: int | None) -> int:
    from clustertwin.reproduce_flexrr import reproduce

    return reproduce(quick, out, workers)


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
    comparison=metric_comparison("time_per_iteration_s", "makespan_s"),
    run_real=_run_real,
    check=_check,
    reproduce=Reproduce(lambda: ["flexrr"], _reproduce),
    bench=_bench,
)
