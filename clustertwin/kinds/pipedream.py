"""Kind ``pipedream``: pipeline-parallel training at op level ("PipeDream: Generalized Pipeline
Parallelism for DNN Training", §3: the planner and 1F1B; also 2BW, Flush, GPipe and interleaved
schedules), simulated, and run for real on gloo or NCCL processes from a profile of a real model."""

from __future__ import annotations

from pathlib import Path

from clustertwin.kinds.spec import Emit, KindSpec, Reproduce, lazy, metric_comparison, result_metrics
from clustertwin.scenarios.pipedream_schema import PIPEDREAM_PATH_FIELDS, PipeDreamScenario


def _reproduce(name: str, quick: bool, *, out: Path, workers: int | None) -> int:
    from clustertwin.reproduce_pipedream import reproduce

    return reproduce(quick, out, workers)


def _bench(emit: Emit) -> None:
    from clustertwin.bench_pipedream import bench_pipedream

    bench_pipedream(emit=emit)


SPEC = KindSpec(
    name="pipedream",
    description="PipeDream and co.: pipeline partitions and per-stage schedules, op level",
    schema=PipeDreamScenario,
    path_fields=PIPEDREAM_PATH_FIELDS,
    check_tables=lazy("clustertwin.scenarios.pipedream_results:check_pipedream_tables"),
    metrics=result_metrics("clustertwin.analysis.pipedream_metrics:pipedream_metrics"),
    simulate=lazy("clustertwin.sim.pipedream:run"),
    run_real=lazy("clustertwin.pipedream_real:run_real"),
    check=lazy("clustertwin.pipedream_real:check"),
    # Whether a plan fits its devices depends on the order of the schedule's ops, so the check is the
    # op-level simulation itself; it takes about a second, and validate runs it.
    prepare=lazy("clustertwin.sim.pipedream:run"),
    comparison=metric_comparison("throughput_samples_per_s", "peak_memory_gib_max"),
    plot=lazy("clustertwin.analysis.pipedream_plots:plot_pipedream_run"),
    reproduce=Reproduce(lambda: ["pipedream"], _reproduce),
    bench=_bench,
)
