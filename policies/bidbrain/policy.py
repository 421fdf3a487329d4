"""BidBrain's decisions (Proteus §4, §5) and the Standard bidding baseline (§6.3; Spot Fleet default).

BidBrain decides at three kinds of decision point (§4, §5): every ``period_s`` (2 min in the paper),
``renewal_lead_s`` before the end of each spot allocation's billing hour ("a few minutes"; ours: 5 min),
and immediately after an eviction. At a periodic or post-eviction point it scores every candidate
allocation (market × bid delta × count) by the footprint's expected cost per work with the candidate
added (Eq. 4) and requests the best one if it lowers E_A (at most one request per point). At a renewal
point it keeps the allocation for another hour only if that gives a lower E_A than dropping it.

"Just above" (§6.3, the naive scheme the paper also ran): as Standard, bidding the price + $0.0001.

Standard (§6.3): take the market with the lowest current price per unit of work, bid the on-demand price,
hold until evicted; after an eviction, choose the cheapest again.

Pure: every input (time, prices, footprint, tables) is passed in; decisions are returned as values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from clustertwin.policies.bidbrain.cost_model import (
    HOUR_S,
    Allocation,
    CostParams,
    Outlook,
    candidates_cost_per_work,
    cost_per_work,
)
from clustertwin.policies.bidbrain.history import EvictionTable, Market

DEFAULT_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class SpotRequest:
    """Ask for ``count`` instances in ``market`` bidding ``bid`` $/h (≥ the current price)."""

    market: Market
    count: int
    bid: float
    expected_cost_per_work: float = math.nan


@dataclass(frozen=True)
class BidBrainParams:
    """Decision timing and search grid. The paper gives the 2-min period; the rest is ours."""

    cost: CostParams = CostParams()
    period_s: float = 120.0
    renewal_lead_s: float = 300.0
    counts: tuple[int, ...] = DEFAULT_COUNTS


@dataclass(frozen=True)
class MarketView:
    """What the executor tells the policy about one market now."""

    market: Market
    price: float  # current spot price, $/h
    on_demand_price: float  # $/h of this type on demand (Standard's bid; BidBrain's upper bound)
    work_rate: float  # ν per instance


class BidBrain:
    """Acquisition and renewal by expected cost per work."""

    def __init__(self, table: EvictionTable, params: BidBrainParams = BidBrainParams()) -> None:
        self.table = table
        self.params = params

    def outlook(self, alloc: Allocation, price_now: float) -> Outlook:
        """β and TTE of an allocation now: its bid is fixed, so its effective δ moves with the market."""
        if alloc.on_demand:
            return Outlook(0.0, HOUR_S)
        beta, tte = self.table.lookup(alloc.market, alloc.bid - price_now)
        return Outlook(beta, tte)

    def next_periodic(self, now: float) -> float:
        """The next periodic decision point after ``now``."""
        return (math.floor(now / self.params.period_s) + 1) * self.params.period_s

    def renewal_check_at(self, alloc: Allocation) -> float:
        """When to decide whether ``alloc`` lives another billing hour (its hour end − lead)."""
        return alloc.hour_start_s + HOUR_S - self.params.renewal_lead_s

    def acquire(
        self,
        now: float,
        footprint: Sequence[Allocation],
        prices: Mapping[Market, float],
        markets: Sequence[MarketView],
        headroom: int,
    ) -> SpotRequest | None:
        """The best new allocation, or None when no candidate lowers the footprint's E_A.

        ``prices`` gives the current price of each footprint allocation's market; ``headroom`` is how
        many more instances the job may use (its maximum minus what it holds and has pending).
        """
        counts = [k for k in self.params.counts if k <= headroom]
        if not counts or not markets:
            return None
        outlooks = [self.outlook(a, prices.get(a.market, math.inf)) for a in footprint]
        base = cost_per_work(footprint, outlooks, now, self.params.cost, changing=False)
        rows = []
        for view in markets:
            for delta in self.table.deltas:
                bid = view.price + delta
                if bid > view.on_demand_price:  # never bid above on demand: an on-demand node is cheaper
                    continue
                beta, tte = self.table.lookup(view.market, delta)
                for k in counts:
                    rows.append((view, bid, k, beta, tte))
        if not rows:
            return None
        scores = candidates_cost_per_work(
            footprint,
            outlooks,
            now,
            self.params.cost,
            cand_price=np.array([r[0].price for r in rows]),
            cand_count=np.array([r[2] for r in rows], dtype=float),
            cand_rate=np.array([r[0].work_rate for r in rows]),
            cand_beta=np.array([r[3] for r in rows]),
            cand_tte=np.array([r[4] for r in rows]),
        )
        best = int(np.argmin(scores))  # argmin takes the first of ties: deterministic
        if not np.isfinite(scores[best]) or scores[best] >= base:
            return None
        view, bid, k, _, _ = rows[best]
        return SpotRequest(view.market, k, bid, float(scores[best]))

    def keep(
        self, now: float, alloc: Allocation, footprint: Sequence[Allocation], prices: Mapping[Market, float]
    ) -> bool:
        """Renew ``alloc`` for another billing hour? Compare E_A with it renewed vs without it (§4)."""
        if alloc.on_demand:
            return True
        price = prices.get(alloc.market, math.inf)
        if price > alloc.bid:
            return False
        # Renewed: a fresh hour at the current price, starting when the current one ends.
        renewed = dataclasses.replace(alloc, price=price, hour_start_s=now)
        keep_fp = [renewed if a.alloc_id == alloc.alloc_id else a for a in footprint]
        drop_fp = [a for a in footprint if a.alloc_id != alloc.alloc_id]
        keep_e = cost_per_work(
            keep_fp,
            [self.outlook(a, prices.get(a.market, math.inf)) for a in keep_fp],
            now,
            self.params.cost,
            False,
        )
        drop_e = cost_per_work(
            drop_fp,
            [self.outlook(a, prices.get(a.market, math.inf)) for a in drop_fp],
            now,
            self.params.cost,
            True,
        )
        return keep_e <= drop_e


def just_above_request(markets: Sequence[MarketView], count: int, delta: float = 1e-4) -> SpotRequest | None:
    """The naive "always bid just above the market" scheme of §6.3: Standard's market choice, but a
    bid of the current price + ``delta`` (the bottom of BidBrain's δ grid), so any rise evicts it."""
    choice = standard_request(markets, count)
    if choice is None:
        return None
    price = next(v.price for v in markets if v.market == choice.market)
    return SpotRequest(choice.market, count, price + delta)


def standard_request(markets: Sequence[MarketView], count: int) -> SpotRequest | None:
    """Standard bidding: the market with the lowest price per work, bidding its on-demand price.

    Markets whose price is above on demand cannot be won with an on-demand bid and are skipped. Ties
    go to the first market in the given order (the executor passes them sorted), for determinism.
    """
    if count <= 0:
        return None
    best: MarketView | None = None
    for view in markets:
        if view.price > view.on_demand_price or view.work_rate <= 0:
            continue
        if best is None or view.price / view.work_rate < best.price / best.work_rate:
            best = view
    if best is None:
        return None
    return SpotRequest(best.market, count, best.on_demand_price)
