"""Turn a Gavel scenario into a ready simulation: cluster layout, throughput oracle, jobs, policy."""

from __future__ import annotations

import time
from functools import cache
from pathlib import Path

import numpy as np

from policies.gavel.cluster import ClusterLayout
from policies.gavel.scheduler import JobSpec
from policies.registry import make_policy
from scenarios.errors import InputError
from scenarios.results import RunResult
from scenarios.schema import Scenario
from sim.gavel import GavelSimulation, MechanismConfig, Progress, SimJob
from sim.gavel_estimation import estimated_colocation
from traces.gavel_generator import generate_gavel_jobs
from traces.gavel_throughputs import ThroughputTable
from traces.gavel_trace import TraceJob, load_gavel_trace, slo_deadline_s


def load_table(scenario: Scenario) -> ThroughputTable:
    if scenario.throughputs in ("simulation", "physical"):
        return ThroughputTable.bundled(scenario.throughputs)
    return ThroughputTable.load(scenario.throughputs)


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


def workload(scenario: Scenario, table: ThroughputTable) -> tuple[list[TraceJob], str]:
    """The scenario's jobs and a name for where they came from (for error messages)."""
    w = scenario.workload
    if w.trace is not None:
        return load_gavel_trace(w.trace, fmt=w.trace_format, table=table), w.trace
    g = w.generate
    assert g is not None
    jobs = generate_gavel_jobs(
        table,
        num_jobs=g.num_jobs,
        jobs_per_hour=g.jobs_per_hour,
        seed=scenario.seed,
        scale_factors=g.scale_factors,
        priorities=g.priorities,
        slos=g.slos,
    )
    return jobs, f"{scenario.source}: workload.generate"


def sim_jobs(
    scenario: Scenario, table: ThroughputTable, layout: ClusterLayout, jobs: list[TraceJob], origin: str
) -> list[SimJob]:
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
        result.append(SimJob(spec, np.where(runnable, spread_row, 0.0), window[0] <= job_id < window[1]))
    return result


def colocation_oracle(table: ThroughputTable, layout: ClusterLayout):
    @cache
    def pair(a: tuple[str, int], b: tuple[str, int]) -> np.ndarray | None:
        rows = [table.colocated(a, b, t) for t in layout.worker_types]
        if all(r is None for r in rows):
            return None
        return np.array([r if r is not None else (0.0, 0.0) for r in rows], dtype=float)

    def oracle(a: JobSpec, b: JobSpec) -> np.ndarray | None:
        return pair((a.job_type, a.scale_factor), (b.job_type, b.scale_factor))

    return oracle


def build(scenario: Scenario, progress: Progress | None = None) -> GavelSimulation:
    table = load_table(scenario)
    layout = cluster_layout(scenario, table)
    jobs, origin = workload(scenario, table)
    try:
        policy = make_policy(scenario.policy.name, **scenario.policy.params)
    except (KeyError, ValueError) as err:
        raise InputError(f"{scenario.source}: field policy", str(err).strip('"')) from err
    prices = None
    if scenario.cluster.prices is not None:
        prices = np.array([scenario.cluster.prices[t] for t in layout.worker_types])
    m = scenario.mechanism
    truth = colocation_oracle(table, layout)
    planned = truth
    if m.estimate_colocation is not None:
        rng = np.random.default_rng([scenario.seed, 0x5EED])
        planned = estimated_colocation(table, layout.worker_types, m.estimate_colocation, rng)
    return GavelSimulation(
        layout,
        sim_jobs(scenario, table, layout, jobs, origin),
        policy,
        MechanismConfig(m.round_s, m.ideal, m.preemption_overhead_s, m.min_reset_interval_s),
        seed=scenario.seed,
        colocation=truth,
        policy_colocation=planned,
        prices=prices,
        entity_weights=dict(enumerate(scenario.workload.entities or ())),
        progress=progress,
    )


def run(scenario: Scenario, progress: Progress | None = None) -> RunResult:
    started = time.perf_counter()
    simulation = build(scenario, progress)
    tables = simulation.run()
    info = {
        "wall_s": time.perf_counter() - started,
        "sim_end_s": float(simulation.env.now),
        "num_rounds": simulation.num_rounds,
        "num_resets": simulation.scheduler.num_resets,
        "workload": str(Path(scenario.workload.trace).name) if scenario.workload.trace else "generated",
    }
    return RunResult(tables=tables, info=info)
