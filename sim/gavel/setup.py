"""Turn a Gavel scenario into a ready simulation: throughput oracle, jobs, policy."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.scheduler import JobSpec
from clustertwin.scenarios.gavel_fleet import SplitLayout, build_market, expand_columns
from clustertwin.scenarios.gavel_scheduler import build_scheduler, colocation, gavel_policy
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.gavel_workload import GavelJob, cluster_layout, gavel_jobs, load_table, trace_jobs
from clustertwin.scenarios.results import RunResult
from clustertwin.sim.gavel.engine import Colocation, GavelSimulation, MechanismConfig, Progress

from clustertwin.errors import InputError


def build(scenario: Scenario, progress: Progress | None = None) -> GavelSimulation:
    table = load_table(scenario)
    layout = cluster_layout(scenario, table)
    jobs, origin = trace_jobs(scenario, table)
    policy = gavel_policy(scenario)
    prices = None
    m = scenario.mechanism
    truth, planned = colocation(scenario, table, layout)
    workload = gavel_jobs(scenario, table, layout, jobs, origin)
    overheads = tuple(scenario.overhead_s(t) for t in layout.worker_types)
    believed = None if m.planned_throughputs is None else planned_rows(scenario, workload, layout)
    market = None
    if scenario.market is not None:
        # A cloud fleet ([Narayanan] §6): the scheduler plans over the split layout (spot halves apart).
        market, split = build_market(scenario.source, scenario.market, layout)
        if split.layout != layout:
            workload = [_split_job(job, split) for job in workload]
            if believed is not None:
                believed = {
                    j.spec.job_id: np.where(
                        j.spec.throughputs > 0, expand_columns(believed[j.spec.job_id], split), 0.0
                    )
                    for j in workload
                }
            truth, planned = _split_pairs(truth, split), _split_pairs(planned, split)
            overheads = tuple(expand_columns(np.array(overheads), split).tolist())
            layout = split.layout
        prices = market.current_prices(0.0)
    scheduler = build_scheduler(scenario, layout, policy, planned, prices)
    return GavelSimulation(
        layout,
        workload,
        policy,
        MechanismConfig(
            m.round_s,
            m.ideal,
            overheads,
            m.overhead_model == "restart",
            m.min_reset_interval_s,
        ),
        seed=scenario.seed,
        colocation=truth,
        progress=progress,
        scheduler=scheduler,
        market=market,
        policy_throughputs=believed,
    )


def planned_rows(
    scenario: Scenario, workload: list[GavelJob], layout: ClusterLayout
) -> dict[int, np.ndarray]:
    """Each job's row of ``mechanism.planned_throughputs``, on the types where it can truly run."""
    table = load_table(scenario, scenario.mechanism.planned_throughputs)
    keys = [(j.spec.job_type, j.spec.scale_factor) for j in workload]
    rows = table.isolated_matrix(keys, layout.worker_types)
    truth = np.array([j.spec.throughputs for j in workload]).reshape(rows.shape)
    missing = np.argwhere((truth > 0) & (rows <= 0))
    if len(missing):
        i, w = missing[0]
        raise InputError(
            f"{scenario.source}: field mechanism.planned_throughputs",
            f"no throughput for {keys[i][0]} (scale factor {keys[i][1]}) on {layout.worker_types[w]}, "
            "which the scenario's throughputs table has",
        )
    return {j.spec.job_id: np.where(t > 0, r, 0.0) for j, t, r in zip(workload, truth, rows, strict=True)}


def _split_job(job: GavelJob, split: SplitLayout) -> GavelJob:
    """A job's throughput rows over the split layout; a type too small for the job gets 0, as in
    ``gavel_jobs`` (a spot half may hold fewer GPUs than the job needs)."""
    fits = np.asarray(split.layout.gpus) >= job.spec.scale_factor
    spec = replace(job.spec, throughputs=np.where(fits, expand_columns(job.spec.throughputs, split), 0.0))
    return replace(
        job, spec=spec, unconsolidated=np.where(fits, expand_columns(job.unconsolidated, split), 0.0)
    )


def _split_pairs(oracle: Colocation, split: SplitLayout) -> Colocation:
    """A colocation oracle (rows per Gavel type) answering per scheduler type."""

    def pair(a: JobSpec, b: JobSpec) -> np.ndarray | None:
        rows = oracle(a, b)
        return None if rows is None else rows[split.base_index]

    return pair


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
