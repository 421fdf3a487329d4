"""The built-in spot acquisition policies (Proteus §4 and §6.3): BidBrain, Standard, just above, on demand.

* ``bidbrain``: at every periodic (2 min) or post-eviction point, the allocation of lowest expected cost
  per work (Eq. 4) if it lowers the footprint's; renew an allocation before its billing hour ends only if
  that lowers the expected cost per work (§4). The job may hold up to ``max_rate`` ν.
* ``standard`` (Spot Fleet's default, §6.3): hold the reference cluster's ν in the market with the lowest
  price per work, bidding the on-demand price; after an eviction, the cheapest again.
* ``just_above`` (§6.3's naive scheme): as Standard, bidding the current price + $0.0001.
* ``on_demand``: the reference cluster, all on demand, never evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from clustertwin.policies.bidbrain import (
    Allocation,
    BidBrain,
    Market,
    MarketView,
    SpotRequest,
    just_above_request,
    standard_request,
)
from clustertwin.policies.spot.acquisition import (
    ACQUISITION,
    AcquisitionInputs,
    AcquisitionPolicy,
    Decision,
    DecisionPoint,
    instances_for,
)


@ACQUISITION.register("bidbrain")
class BidBrainAcquisition(AcquisitionPolicy):
    """BidBrain: acquire and renew by expected cost per work (Proteus §4)."""

    def __init__(self, inputs: AcquisitionInputs) -> None:
        super().__init__(inputs)
        if inputs.eviction_table is None:
            raise ValueError("BidBrain acquisition needs eviction tables (AcquisitionInputs.eviction_table)")
        self.brain = BidBrain(inputs.eviction_table(), inputs.bidbrain)

    def decide(self, point: DecisionPoint) -> Decision:
        periodic = point.why in ("start", "periodic")  # a post-eviction point keeps the periodic schedule
        headroom = point.max_rate - point.held_rate
        best: SpotRequest | None = None
        # BidBrain's count grid is in instances and the cap in ν: each market gets its own cap.
        for view in point.markets:
            cap = int(headroom // view.work_rate) if view.work_rate > 0 else 0
            if cap <= 0:
                continue
            req = self.brain.acquire(point.now, point.footprint, point.prices, [view], cap)
            if req is not None and (best is None or req.expected_cost_per_work < best.expected_cost_per_work):
                best = req
        return Decision(
            requests=() if best is None else (best,),
            next_s=self.brain.next_periodic(point.now) if periodic else None,
            next_why="periodic",
        )

    def renewal_at(self, alloc: Allocation) -> float | None:
        return self.brain.renewal_check_at(alloc)

    def renew(
        self, now: float, alloc: Allocation, footprint: Sequence[Allocation], prices: Mapping[Market, float]
    ) -> bool:
        return self.brain.keep(now, alloc, footprint, prices)


class _Cheapest(AcquisitionPolicy):
    """Hold the reference cluster's ν in total (fault tolerance's reliable machines included), all in the
    market ``choose`` picks; when no market is acceptable, look again after ``retry_s``."""

    choose: Callable[[Sequence[MarketView], int], SpotRequest | None]

    def decide(self, point: DecisionPoint) -> Decision:
        deficit = point.target_rate - point.held_rate
        if deficit <= 1e-9:
            return Decision()
        views = [v for v in point.markets if v.work_rate > 0]
        choice = self.choose(views, 1) if views else None
        if choice is None:
            return Decision(next_s=point.now + self.inputs.retry_s, next_why="retry")
        rate = next(v.work_rate for v in views if v.market == choice.market)
        return Decision(requests=(replace(choice, count=instances_for(deficit, rate)),))


@ACQUISITION.register("standard")
class Standard(_Cheapest):
    """Standard: the market with the lowest price per work, bidding the on-demand price (§6.3)"""

    choose = staticmethod(standard_request)


@ACQUISITION.register("just_above")
class JustAbove(_Cheapest):
    """Just above: Standard's market, bidding the current price + $0.0001 (§6.3)"""

    choose = staticmethod(just_above_request)


@ACQUISITION.register("on_demand")
class OnDemand(AcquisitionPolicy):
    """All on demand: the reference cluster's machines, never evicted"""

    holds_transient = False

    def on_demand_count(self, target_rate: float, rate: float) -> int:
        return instances_for(target_rate, rate)
