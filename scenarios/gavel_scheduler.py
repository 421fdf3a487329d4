"""One construction of a Gavel scheduler from a scenario, for the simulator and the real runtime alike.

Everything a policy may read reaches it here, from the same fields in both executors: prices
(``cluster.prices``, or the market's prices when the scenario has a ``market:``), a budget
(``policy.budget_usd``), entity weights (``workload.entities``) and the pair throughputs space sharing
plans with (``mechanism.estimate_colocation``). A policy names the optional inputs it reads (its
``needs``); a scenario that lacks one, or gives one that the policy would never read, is refused here
with the field named, never at the first allocation or silently.
"""

from __future__ import annotations

import numpy as np
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.scheduler import Colocation, GavelScheduler, SchedulerConfig
from clustertwin.policies.registry import AllocationPolicy, make_policy
from clustertwin.scenarios.gavel_colocation import colocation_oracle, estimated_colocation
from clustertwin.scenarios.gavel_schema import Scenario
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
