"""The spot families' registries and the decisions their entries make for an executor."""

from __future__ import annotations

import math

import pytest
from clustertwin.policies.agileml import StageThresholds
from clustertwin.policies.bidbrain import MarketView
from clustertwin.policies.registry import UnknownName, families
from clustertwin.policies.spot import (
    ACQUISITION,
    FAULT_TOLERANCE,
    NO_FAULT_TOLERANCE,
    AcquisitionInputs,
    DecisionPoint,
    FaultToleranceSettings,
)
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.spot_schema import DEFAULT_SPOT_SCENARIO

from clustertwin.errors import InputError

A = ("p2.xlarge", "us-east-1a")
B = ("p3.2xlarge", "us-east-1b")


def _point(held: float, markets: list[MarketView], now: float = 100.0) -> DecisionPoint:
    return DecisionPoint(now, "eviction", markets, {v.market: v.price for v in markets}, [], held, 32.0, 96.0)


def test_the_registries_list_the_built_in_entries_and_reject_unknown_names() -> None:
    assert ACQUISITION.names() == ["bidbrain", "just_above", "on_demand", "standard"]
    assert FAULT_TOLERANCE.names() == ["agileml", "checkpoint"]
    assert {"spot acquisition", "spot fault tolerance"} <= set(families())
    with pytest.raises(UnknownName, match="known: agileml, checkpoint"):
        FAULT_TOLERANCE.get("raid")
    with pytest.raises(InputError, match="field fault_tolerance: unknown fault tolerance 'raid'"):
        load_scenario(DEFAULT_SPOT_SCENARIO, ["fault_tolerance=raid"])


def test_standard_buys_the_deficit_in_the_cheapest_market_per_work_and_retries_when_none_fits() -> None:
    standard = ACQUISITION.get("standard")(AcquisitionInputs(retry_s=90.0))
    views = [MarketView(A, 0.5, 0.9, 4.0), MarketView(B, 0.8, 3.06, 8.0)]  # B: 0.1 $/ν·h, A: 0.125
    (request,) = standard.decide(_point(held=4.0, markets=views)).requests
    assert request.market == B and request.bid == 3.06 and request.count == math.ceil(28.0 / 8.0)
    assert standard.decide(_point(held=32.0, markets=views)).requests == ()
    above = [MarketView(A, 1.0, 0.9, 4.0)]  # above on demand: an on-demand bid cannot win it
    decision = standard.decide(_point(held=0.0, markets=above))
    assert decision.requests == () and decision.next_s == 190.0 and decision.next_why == "retry"
    just = ACQUISITION.get("just_above")(AcquisitionInputs()).decide(_point(held=4.0, markets=views))
    assert just.requests[0].market == B and just.requests[0].bid == pytest.approx(0.8001)


def test_all_on_demand_holds_the_reference_cluster_and_needs_no_fault_tolerance() -> None:
    on_demand = ACQUISITION.get("on_demand")(AcquisitionInputs())
    assert not on_demand.holds_transient and on_demand.on_demand_count(32.0, 3.0) == 11
    assert on_demand.decide(_point(held=0.0, markets=[MarketView(A, 0.1, 0.9, 4.0)])).requests == ()
    assert (
        NO_FAULT_TOLERANCE.reliable_count == 0 and NO_FAULT_TOLERANCE.eviction_cost(2, 0, 1, 1).lost == "none"
    )
    with pytest.raises(ValueError, match="eviction tables"):
        ACQUISITION.get("bidbrain")(AcquisitionInputs())


def test_agileml_stages_decide_parameter_holders_reliable_work_and_eviction_cost() -> None:
    agile = FAULT_TOLERANCE.get("agileml")(
        FaultToleranceSettings(StageThresholds(1.0, 15.0), reliable_count=2)
    )
    assert agile.reliable_count == 2 and agile.partitioned
    assert [agile.stage(4, t) for t in (4, 8, 61)] == [1, 2, 3] and agile.stage(0, 5) is None
    assert [agile.has_active_ps(s) for s in (1, 2, 3)] == [False, True, True]
    assert agile.reliable_does_work(4, 8) and not agile.reliable_does_work(1, 16)
    assert agile.eviction_cost(1, 120.0, 1e9, 1e9).recovery == "stateless"
    flush = agile.eviction_cost(2, 120.0, 64e6, 1e9)  # 0.5 s of push + 5 s poll fit in 120 s
    assert flush.recovery == "end_of_life_flush" and flush.lost_s == 0.0 and flush.stall_s == 5.0
    fail = agile.eviction_cost(3, 0.0, 64e6, 1e9)
    assert fail.recovery == "effective_failure" and fail.lost == "recent" and fail.lost_s == 10.0


def test_checkpoint_pays_its_overhead_and_loses_the_work_since_the_last_checkpoint() -> None:
    ckpt = FAULT_TOLERANCE.get("checkpoint")(FaultToleranceSettings(checkpoint_overhead=0.2, restart_s=60.0))
    assert ckpt.stage(3, 30) == 0 and ckpt.work_fraction() == pytest.approx(0.8)
    assert ckpt.reliable_count == 0 and ckpt.checkpoints and ckpt.checkpoint_every_s() == 1800.0
    cost = ckpt.eviction_cost(0, 120.0, 0.0, 1e9)
    assert (cost.recovery, cost.lost, cost.stall_s) == ("checkpoint_rollback", "since_checkpoint", 60.0)


def test_a_registered_policy_runs_in_the_simulator_without_touching_it() -> None:
    from clustertwin.policies.bidbrain import SpotRequest
    from clustertwin.policies.spot import AcquisitionPolicy, Decision
    from clustertwin.sim.spot import run
    from clustertwin.sim.spot.setup import market_table

    class FirstMarketOnDemandBid(AcquisitionPolicy):
        """Everything in the first market, bidding on demand"""

        def decide(self, point: DecisionPoint) -> Decision:
            deficit = point.target_rate - point.held_rate
            view = point.markets[0]
            if deficit <= 0:
                return Decision()
            count = math.ceil(deficit / view.work_rate)
            return Decision(requests=(SpotRequest(view.market, count, view.on_demand_price),))

    ACQUISITION.register("first_market")(FirstMarketOnDemandBid)
    try:
        scenario = load_scenario(DEFAULT_SPOT_SCENARIO, ["policy=first_market", "fault_tolerance=checkpoint"])
        result = run(scenario)
    finally:
        ACQUISITION.unregister("first_market")
    table = market_table(scenario)
    first = min(zip(table["instance_type"], table["zone"], strict=True))
    acquired = result.tables["acquisitions"]
    assert len(acquired) > 0 and not acquired["on_demand"].any()
    assert set(zip(acquired["instance_type"], acquired["zone"], strict=True)) == {first}
    assert result.info["completed"] == 1
