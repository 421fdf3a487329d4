"""A Gavel scenario's cluster and jobs, as both executors (simulator and real runtime) need them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.scheduler import JobSpec
from clustertwin.scenarios.gavel_schema import BUNDLED_THROUGHPUTS, Scenario
from clustertwin.traces.gavel_generator import generate_gavel_jobs
from clustertwin.traces.gavel_throughputs import ThroughputTable
from clustertwin.traces.gavel_trace import TraceJob, load_gavel_trace, slo_deadline_s

from clustertwin.errors import InputError


@dataclass(frozen=True)
class GavelJob:
    """A job of the workload: what the scheduler knows, plus what only the executor uses."""

    spec: JobSpec
    unconsolidated: np.ndarray  # (k,) steps/s when spread over more servers than needed
    in_window: bool


def load_table(scenario: Scenario, name: str | None = None) -> ThroughputTable:
    """The scenario's throughput table, or the one named ``name`` (bundled or a path)."""
    name = scenario.throughputs if name is None else name
    if name in BUNDLED_THROUGHPUTS:
        return ThroughputTable.bundled(name)
    return ThroughputTable.load(name)


def cluster_layout(scenario: Scenario, table: ThroughputTable) -> ClusterLayout:
    """Worker types in the table's order (fastest first), restricted to those the scenario has."""
    unknown = sorted(set(scenario.cluster.gpus) - set(table.worker_types))
    if unknown:
        raise InputError(
            f"{scenario.source}: field cluster.gpus",
            f"worker type(s) {', '.join(unknown)} not in the throughput table (it has "
            f"{', '.join(table.worker_types)})",
        )
    types = tuple(t for t in table.worker_types if scenario.cluster.gpus.get(t, 0) > 0)
    return ClusterLayout(
        types,
        tuple(scenario.cluster.gpus[t] for t in types),
        tuple(scenario.cluster.server_size(t) for t in types),
    )


def trace_jobs(
    scenario: Scenario, table: ThroughputTable, num_jobs: int | None = None
) -> tuple[list[TraceJob], str]:
    """The scenario's jobs and a name for where they came from (for error messages).

    ``num_jobs`` replaces ``workload.generate.num_jobs`` (the simulator's sizing of ``auto``; the
    generator is prefix-stable, so a longer trace only adds jobs at the end).
    """
    w = scenario.workload
    if w.trace is not None:
        return load_gavel_trace(w.trace, fmt=w.trace_format, table=table), w.trace
    if w.jobs is not None:
        return own_jobs(scenario, table), f"{scenario.source}: workload.jobs"
    g = w.generate
    assert g is not None
    n = g.num_jobs if num_jobs is None else num_jobs
    if not isinstance(n, int):
        raise InputError(
            f"{scenario.source}: field workload.generate.num_jobs",
            "auto is sized by the simulator from the window; this backend needs a number of jobs",
        )
    try:
        jobs = generate_gavel_jobs(
            table,
            num_jobs=n,
            jobs_per_hour=g.jobs_per_hour,
            seed=scenario.seed,
            scale_factors=g.scale_factors,
            priorities=g.priorities,
            slos=g.slos,
            duration="philly" if g.durations_h is None else g.durations_h,
            job_types=g.job_types,
        )
    except InputError as err:
        field = {"duration": "durations_h"}.get(err.where, err.where)
        raise InputError(f"{scenario.source}: field workload.generate.{field}", err.message) from err
    return jobs, f"{scenario.source}: workload.generate"


def own_jobs(scenario: Scenario, table: ThroughputTable) -> list[TraceJob]:
    """The scenario's ``workload.jobs``, each a user's program; a job type the table lacks is an error
    naming the job (the simulator and the policy know a job by its type's throughputs)."""
    assert scenario.workload.jobs is not None
    base = Path(scenario.source).parent if Path(scenario.source).is_file() else Path.cwd()
    jobs = []
    for i, job in enumerate(scenario.workload.jobs):
        known = table.scale_factors(job.job_type)
        if job.scale_factor not in known:
            raise InputError(
                f"{scenario.source}: field workload.jobs.{i}.job_type",
                f"{job.job_type!r} at scale factor {job.scale_factor} is not in the throughput table"
                f" {table.source} (it has {', '.join(table.job_types()) or 'no job types'})",
            )
        jobs.append(TraceJob(
            job.job_type, job.scale_factor, job.total_steps, job.arrival_s, job.priority_weight,
            command=job.command, working_directory=str((base / (job.working_dir or ".")).resolve()),
            env=tuple(sorted(job.env.items())),
        ))  # fmt: skip
    return jobs


def arrivals_end_early(jobs: pd.DataFrame) -> tuple[float, float] | None:
    """(last arrival, last window completion) in seconds when every job had arrived before the
    window's last job finished (the window's tail then ran on a draining cluster), else None."""
    window = jobs["in_window"].to_numpy(dtype=bool)
    done = jobs["completion_s"][window]
    if not window.any() or done.isna().all():
        return None
    last_arrival, window_end = float(jobs["arrival_s"].max()), float(done.max())
    return (last_arrival, window_end) if last_arrival < window_end else None


def gavel_jobs(
    scenario: Scenario, table: ThroughputTable, layout: ClusterLayout, jobs: list[TraceJob], origin: str
) -> list[GavelJob]:
    """Every job as the scheduler will know it, checked against the cluster (InputError names the row)."""
    keys = [(j.job_type, j.scale_factor) for j in jobs]
    consolidated = table.isolated_matrix(keys, layout.worker_types, consolidated=True)
    spread = table.isolated_matrix(keys, layout.worker_types, consolidated=False)
    window = scenario.workload.window or (0, len(jobs))
    blocks = len(scenario.workload.entities or ())
    result = []
    for job_id, (job, row, spread_row) in enumerate(zip(jobs, consolidated, spread, strict=True)):
        where = f"{origin}:{job.line}" if job.line else f"{origin} (job {job_id})"
        runnable = (row > 0) & (np.asarray(layout.gpus) >= job.scale_factor)
        if not runnable.any():
            raise InputError(
                where,
                f"job {job_id} ({job.job_type}) needs {job.scale_factor} GPUs of one type with a known "
                f"throughput; the cluster has {dict(zip(layout.worker_types, layout.gpus, strict=True))}",
            )
        deadline = slo_deadline_s(job, table)
        spec = JobSpec(
            job_id=job_id,
            job_type=job.job_type,
            scale_factor=job.scale_factor,
            total_steps=float(job.total_steps),
            arrival_s=float(job.arrival_s),
            throughputs=np.where(runnable, row, 0.0),
            weight=job.priority_weight,
            slo_deadline_s=float("inf") if deadline is None else deadline,
            entity=job_id * blocks // len(jobs) if blocks else None,
        )
        result.append(GavelJob(spec, np.where(runnable, spread_row, 0.0), window[0] <= job_id < window[1]))
    return result


def jobs_table(
    jobs: list[GavelJob],
    first_start: dict[int, float],
    completion: dict[int, float],
    steps_done: dict[int, float],
    arrival_scale: float = 1.0,
) -> pd.DataFrame:
    """The ``jobs`` event table (``scenarios.results.GAVEL_TABLES``), the same from either executor.

    ``arrival_scale`` divides trace arrival times (a real run may compress its trace).
    """
    ordered = sorted(jobs, key=lambda j: j.spec.job_id)
    specs = [j.spec for j in ordered]
    ids = [s.job_id for s in specs]
    return pd.DataFrame({
        "job_id": np.array(ids, dtype=np.int64),
        "job_type": [s.job_type for s in specs],
        "scale_factor": np.array([s.scale_factor for s in specs], dtype=np.int64),
        "weight": np.array([s.weight for s in specs], dtype=float),
        "arrival_s": np.array([s.arrival_s / arrival_scale for s in specs], dtype=float),
        "first_start_s": np.array([first_start.get(m, np.nan) for m in ids], dtype=float),
        "completion_s": np.array([completion.get(m, np.nan) for m in ids], dtype=float),
        "total_steps": np.array([s.total_steps for s in specs], dtype=float),
        "steps_done": np.array([float(steps_done[m]) for m in ids], dtype=float),
        "slo_deadline_s": np.array([s.slo_deadline_s for s in specs], dtype=float),
        "in_window": np.array([j.in_window for j in ordered], dtype=bool),
    })  # fmt: skip
