"""One construction of a Gavel scheduler from a scenario, for the simulator and the real runtime alike.

Everything a policy may read reaches it here, from the same fields in both executors: prices
(``cluster.prices``, or the market's prices when the scenario has a ``market:``), a budget
(``policy.budget_usd``), entity weights (``workload.entities``) and the pair throughputs space sharing
plans with (``mechanism.estimate_colocation``). A policy names the optional inputs it reads (its
``needs``); a scenario that lacks one, or gives one that the policy would never read, is refused here
with the field named, never at the first allocation or silently.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.scheduler import Colocation, GavelScheduler, JobSpec, SchedulerConfig
from clustertwin.policies.registry import AllocationPolicy, make_policy
from clustertwin.scenarios.gavel_colocation import colocation_oracle, estimated_colocation
from clustertwin.scenarios.gavel_fleet import MarketHook, SplitLayout, build_market, expand_columns
from clustertwin.scenarios.gavel_schema import Scenario
from clustertwin.scenarios.gavel_workload import GavelJob, cluster_layout, gavel_jobs, load_table, trace_jobs
from clustertwin.traces.gavel_throughputs import ThroughputTable

from clustertwin.errors import InputError


def gavel_policy(scenario: Scenario) -> AllocationPolicy:
    """The scenario's allocation policy, checked against the inputs the scenario gives it."""
    try:
        policy = make_policy(scenario.policy.name, **scenario.policy.params)
    except (KeyError, ValueError) as err:
        raise InputError(f"{scenario.source}: field policy", str(err).strip('"')) from err
    needs = set(getattr(policy, "needs", ()))
    name = scenario.policy.name
    if "prices" in needs and scenario.cluster.prices is None and scenario.market is None:
        raise InputError(
            f"{scenario.source}: field cluster.prices",
            f"policy {name} plans with $/GPU-hour prices: give cluster.prices (one per worker type) or a"
            " market: section",
        )
    budget = scenario.policy.budget_usd
    if "budget" in needs and budget is None:
        raise InputError(
            f"{scenario.source}: field policy.budget_usd",
            f"policy {name} minimises the makespan within a budget: give policy.budget_usd (dollars)",
        )
    if budget is not None and "budget" not in needs:
        raise InputError(
            f"{scenario.source}: field policy.budget_usd", f"policy {name} does not plan with a budget"
        )
    if budget is not None and scenario.mechanism.ideal:
        raise InputError(
            f"{scenario.source}: field policy.budget_usd",
            "a budget is spent by rounds: it needs the round mechanism (mechanism.ideal: false)",
        )
    entities = scenario.workload.entities
    if "entities" in needs and not entities:
        raise InputError(
            f"{scenario.source}: field workload.entities",
            f"policy {name} shares the cluster between entities: give workload.entities (their weights)",
        )
    if entities and "entities" not in needs:
        raise InputError(
            f"{scenario.source}: field workload.entities", f"policy {name} does not weigh entities"
        )
    if scenario.mechanism.estimate_colocation is not None and not getattr(policy, "space_sharing", False):
        raise InputError(
            f"{scenario.source}: field mechanism.estimate_colocation",
            f"policy {name} does not share GPUs; estimates of pair throughputs would go unused",
        )
    return policy


def colocation(
    scenario: Scenario, table: ThroughputTable, layout: ClusterLayout
) -> tuple[Colocation, Colocation]:
    """(truth, planned): the table's pair throughputs, and what the policy believes of them (the truth,
    or estimates from profiling a fraction of each new job type's pairings, §5.3.3)."""
    truth = colocation_oracle(table, layout)
    fraction = scenario.mechanism.estimate_colocation
    if fraction is None:
        return truth, truth
    rng = np.random.default_rng([scenario.seed, 0x5EED])
    return truth, estimated_colocation(table, layout.worker_types, fraction, rng)


def cluster_prices(scenario: Scenario, layout: ClusterLayout) -> np.ndarray | None:
    """``cluster.prices`` ($/GPU-hour) in the layout's worker-type order (None: no prices)."""
    prices = scenario.cluster.prices
    return None if prices is None else np.array([prices[t] for t in layout.worker_types], dtype=float)


def build_scheduler(
    scenario: Scenario,
    layout: ClusterLayout,
    policy: AllocationPolicy,
    colocation: Colocation | None,
    prices: np.ndarray | None = None,
) -> GavelScheduler:
    """The scheduler for ``layout`` (a market's split layout, or the cluster's). ``prices`` replaces
    ``cluster.prices`` when a market gives them."""
    m = scenario.mechanism
    return GavelScheduler(
        layout,
        policy,
        np.random.default_rng(scenario.seed),
        SchedulerConfig(m.round_s, m.min_reset_interval_s),
        colocation=colocation,
        prices=cluster_prices(scenario, layout) if prices is None else prices,
        entity_weights=dict(enumerate(scenario.workload.entities or ())),
        budget=scenario.policy.budget_usd,
    )


@dataclass
class GavelSetup:
    """What both executors start from: the scheduler's layout (a market's split one, or the cluster's),
    the jobs over it, the colocation truth, the restart overheads per scheduler type, the market and the
    scheduler itself. ``base_layout`` is the cluster's (Gavel types, before a market splits them)."""

    table: ThroughputTable
    base_layout: ClusterLayout
    layout: ClusterLayout
    jobs: list[GavelJob]
    origin: str  # where the jobs came from, for error messages
    policy: AllocationPolicy
    truth: Colocation
    overheads: tuple[float, ...]
    believed: dict[int, np.ndarray] | None  # mechanism.planned_throughputs rows (None: the truth)
    market: MarketHook | None
    split: SplitLayout | None
    scheduler: GavelScheduler


def setup(scenario: Scenario, num_jobs: int | None = None) -> GavelSetup:
    """Build a scenario's scheduler and everything around it, the same way for simulation and for real."""
    table = load_table(scenario)
    base = layout = cluster_layout(scenario, table)
    trace, origin = trace_jobs(scenario, table, num_jobs)
    policy = gavel_policy(scenario)
    truth, planned = colocation(scenario, table, layout)
    workload = gavel_jobs(scenario, table, layout, trace, origin)
    overheads = tuple(scenario.overhead_s(t) for t in layout.worker_types)
    m = scenario.mechanism
    believed = None if m.planned_throughputs is None else planned_rows(scenario, workload, layout)
    market, split, prices = None, None, None
    if scenario.market is not None:
        # A cloud fleet ([Narayanan] §6): the scheduler plans over the split layout (spot halves apart).
        market, split = build_market(scenario.source, scenario.market, layout)
        if split.layout != layout:
            workload = [split_job(job, split) for job in workload]
            if believed is not None:
                believed = {
                    j.spec.job_id: np.where(
                        j.spec.throughputs > 0, expand_columns(believed[j.spec.job_id], split), 0.0
                    )
                    for j in workload
                }
            truth, planned = split_pairs(truth, split), split_pairs(planned, split)
            overheads = tuple(expand_columns(np.array(overheads), split).tolist())
            layout = split.layout
        prices = market.current_prices(0.0)
    scheduler = build_scheduler(scenario, layout, policy, planned, prices)
    return GavelSetup(
        table, base, layout, workload, origin, policy, truth, overheads, believed, market, split, scheduler
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


def split_job(job: GavelJob, split: SplitLayout) -> GavelJob:
    """A job's throughput rows over the split layout; a type too small for the job gets 0, as in
    ``gavel_jobs`` (a spot half may hold fewer GPUs than the job needs)."""
    fits = np.asarray(split.layout.gpus) >= job.spec.scale_factor
    spec = replace(job.spec, throughputs=np.where(fits, expand_columns(job.spec.throughputs, split), 0.0))
    return replace(
        job, spec=spec, unconsolidated=np.where(fits, expand_columns(job.unconsolidated, split), 0.0)
    )


def split_pairs(oracle: Colocation, split: SplitLayout) -> Colocation:
    """A colocation oracle (rows per Gavel type) answering per scheduler type."""

    def pair(a: JobSpec, b: JobSpec) -> np.ndarray | None:
        rows = oracle(a, b)
        return None if rows is None else rows[split.base_index]

    return pair
