"""Turn a Gavel scenario into a ready simulation: throughput oracle, jobs, policy."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.scheduler import JobSpec
from clustertwin.policies.registry import make_policy
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.gavel_workload import (
    GavelJob,
    arrivals_end_early,
    cluster_layout,
    gavel_jobs,
    load_table,
    trace_jobs,
)
from clustertwin.scenarios.results import RunResult
from clustertwin.sim.gavel.engine import Colocation, GavelSimulation, MechanismConfig, Progress
from clustertwin.sim.gavel.estimation import estimated_colocation
from clustertwin.sim.gavel.market import SplitLayout, build_market, expand_columns
from clustertwin.traces.gavel_throughputs import ThroughputTable

from clustertwin.errors import InputError

# num_jobs: auto starts at this multiple of the window's end and doubles, up to AUTO_LIMIT times it. A
# generous start costs little: the simulation stops when the window is done, so jobs that would arrive
# later are never simulated, while a trace that runs out means simulating again (7,000 jobs, 1.4 times
# the paper's window end, run out at 5.6 jobs/h even under aware LAS).
AUTO_FIRST = 3
AUTO_LIMIT = 12


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


def build(
    scenario: Scenario, progress: Progress | None = None, num_jobs: int | None = None
) -> GavelSimulation:
    """The simulation of ``scenario``; ``num_jobs`` sizes a generated trace (``auto``: its first size,
    see `run`)."""
    if num_jobs is None:
        num_jobs = auto_first_size(scenario)
    table = load_table(scenario)
    layout = cluster_layout(scenario, table)
    jobs, origin = trace_jobs(scenario, table, num_jobs)
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
        policy_colocation=planned,
        prices=prices,
        entity_weights=dict(enumerate(scenario.workload.entities or ())),
        progress=progress,
        market=market,
        policy_throughputs=believed,
    )


def auto_first_size(scenario: Scenario) -> int | None:
    """The first trace size ``num_jobs: auto`` tries; None when the scenario gives a number."""
    g, window = scenario.workload.generate, scenario.workload.window
    if g is None or g.num_jobs != "auto" or window is None:
        return None
    return math.ceil(AUTO_FIRST * window[1])


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
    """Simulate ``scenario``. A generated continuous trace with a window must keep jobs arriving until
    the window's last job finishes, or the window's tail is measured on a draining cluster: a fixed
    ``num_jobs`` that ends too early is refused; ``num_jobs: auto`` starts at AUTO_FIRST × the window's
    end and doubles until arrivals outlast the window (the generator is prefix-stable, so every try is
    the same workload, and once arrivals outlast the window the result no longer depends on the size:
    the simulation stops when the window's jobs are done)."""
    started = time.perf_counter()
    g = scenario.workload.generate
    window = scenario.workload.window
    checked = g is not None and window is not None and g.jobs_per_hour is not None
    n = auto_first_size(scenario)
    while True:
        simulation = build(scenario, progress, n)
        tables = simulation.run()
        early = arrivals_end_early(tables["jobs"]) if checked else None
        if early is None:
            break
        last_arrival, window_end = early
        field = f"{scenario.source}: field workload.generate.num_jobs"
        if n is None:
            needed = math.ceil(window_end / 3600.0 * g.jobs_per_hour * 1.1)
            raise InputError(
                field,
                f"the last of {g.num_jobs} jobs arrives at {last_arrival / 3600:.1f} h, before the window's"
                f" last job finishes at {window_end / 3600:.1f} h, so the window would be measured on a"
                f" draining cluster; set num_jobs to at least about {needed}, or to auto",
            )
        if n >= AUTO_LIMIT * window[1]:
            raise InputError(
                field,
                f"auto: even {n} jobs stop arriving ({last_arrival / 3600:.1f} h) before the window's last"
                f" job finishes ({window_end / 3600:.1f} h): at jobs_per_hour={g.jobs_per_hour} the queue"
                " grows without bound under this policy; lower the load",
            )
        n *= 2
    info = {
        "wall_s": time.perf_counter() - started,
        "sim_end_s": float(simulation.env.now),
        "num_rounds": simulation.num_rounds,
        "num_resets": simulation.scheduler.num_resets,
        "workload": str(Path(scenario.workload.trace).name) if scenario.workload.trace else "generated",
        "num_jobs": len(tables["jobs"]),
    }
    return RunResult(tables=tables, info=info)
