"""BidBrain: β/TTE tables, Eqs. 1-4, decisions, and the Standard baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest
from clustertwin.policies.bidbrain import (
    HOUR_S,
    Allocation,
    BidBrain,
    BidBrainParams,
    CostParams,
    EvictionTable,
    MarketView,
    Outlook,
    PriceSeries,
    candidates_cost_per_work,
    cost_per_work,
    estimate_eviction_table,
    expected_cost,
    expected_work,
    just_above_request,
    standard_request,
)
from hypothesis import given, settings
from hypothesis import strategies as st

M1 = ("p2.xlarge", "us-east-1a")
M2 = ("p3.2xlarge", "us-east-1b")


def test_eviction_table_on_a_known_price_path() -> None:
    # Base price 1.0; every 2 h the price rises by 0.05 for 10 minutes. From a start t0 on the 1-minute
    # grid, a bid of 1.0 + δ (δ < 0.05) is exceeded within the hour iff a rise begins in (t0, t0 + 60 min]:
    # half of all starts; the time to eviction is uniform over 1..60 min, median ~30 min.
    times, prices = [], []
    for k in range(48):
        times += [k * 7200.0, k * 7200.0 + 3600.0, k * 7200.0 + 4200.0]
        prices += [1.0, 1.05, 1.0]
    series = {M1: PriceSeries(np.array(times), np.array(prices))}
    table = estimate_eviction_table(series, (0.0, 40 * 3600.0), deltas=(0.01, 0.04, 0.06))
    beta_small, tte_small = table.lookup(M1, 0.01)
    assert beta_small == pytest.approx(0.5, abs=0.03)
    assert tte_small == pytest.approx(1800.0, abs=120.0)
    assert table.lookup(M1, 0.06) == (0.0, 3600.0)  # a bid above every spike is never evicted
    assert table.lookup(M1, -0.01) == (1.0, 0.0)  # a bid below the price is evicted at once
    assert table.lookup(M1, 0.05) == table.lookup(M1, 0.04)  # snaps down to the grid (cautious)
    assert table.lookup(M2, 0.1) == (1.0, 0.0)  # unknown market: never bid blind


def _alloc(i: int, market=M1, count=4, price=0.36, start=0.0, rate=4.0, od=False, bid=0.5) -> Allocation:
    return Allocation(i, market, count, math.inf if od else bid, price, start, rate, on_demand=od)


def test_eq1_an_evicted_hour_costs_nothing() -> None:
    a = _alloc(0, price=0.6, count=2)
    assert expected_cost([a], [Outlook(0.0, HOUR_S)], 0.0) == pytest.approx(1.2)
    assert expected_cost([a], [Outlook(1.0, 0.0)], 0.0) == 0.0
    assert expected_cost([a], [Outlook(0.25, 600.0)], 1800.0) == pytest.approx(0.75 * 0.6 * 2 * 0.5)


def test_eq2_eq3_work_shrinks_with_eviction_risk_and_changes() -> None:
    p = CostParams(phi=0.9, sigma_s=60.0, lambda_s=120.0)
    a, b = _alloc(0), _alloc(1, market=M2)
    safe = expected_work([a, b], [Outlook(0, 3600), Outlook(0, 3600)], 0.0, p, changing=False)
    assert safe == pytest.approx(0.9 * 2 * 4 * 4.0 * 3600)
    risky = expected_work([a, b], [Outlook(0.5, 600), Outlook(0, 3600)], 0.0, p, changing=False)
    changing = expected_work([a, b], [Outlook(0, 3600), Outlook(0, 3600)], 0.0, p, changing=True)
    assert risky < safe and changing == pytest.approx(safe - 0.9 * 2 * 4 * 4.0 * 60)
    od = _alloc(2, od=True, price=0.9)
    idle = Allocation(**{**od.__dict__, "does_work": False})
    assert expected_work([idle], [Outlook(0, 3600)], 0.0, p, False) == 0.0
    assert cost_per_work([idle], [Outlook(0, 3600)], 0.0, p, False) == math.inf


allocs = st.lists(
    st.tuples(
        st.integers(1, 16),
        st.floats(0.01, 5.0),
        st.floats(0.0, 7000.0),
        st.floats(0.0, 1.0),
        st.floats(0.0, 3600.0),
        st.booleans(),
    ),
    min_size=0,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(allocs, st.floats(0.0, 7200.0), st.lists(st.tuples(st.integers(1, 32), st.floats(0.01, 5.0),
                                                          st.floats(0.0, 1.0), st.floats(0.0, 3600.0)),
                                                min_size=1, max_size=6))  # fmt: skip
def test_vectorised_candidates_match_eq4(fp, now, cands) -> None:
    p = CostParams(0.8, 30.0, 90.0)
    footprint = [
        Allocation(i, M1, k, 9.0, price, start, 4.0, does_work=works)
        for i, (k, price, start, _, _, works) in enumerate(fp)
    ]
    outlooks = [Outlook(beta, tte) for (_, _, _, beta, tte, _) in fp]
    got = candidates_cost_per_work(
        footprint,
        outlooks,
        now,
        p,
        cand_price=np.array([c[1] for c in cands]),
        cand_count=np.array([c[0] for c in cands], dtype=float),
        cand_rate=np.full(len(cands), 8.0),
        cand_beta=np.array([c[2] for c in cands]),
        cand_tte=np.array([c[3] for c in cands]),
    )
    for j, (k, price, beta, tte) in enumerate(cands):
        cand = Allocation(99, M2, k, 9.0, price, now, 8.0)
        want = cost_per_work([*footprint, cand], [*outlooks, Outlook(beta, tte)], now, p, changing=True)
        assert (math.isinf(want) and math.isinf(got[j])) or got[j] == pytest.approx(want, rel=1e-9)
    assert all(g >= 0 for g in got)


def _table(beta: float, tte: float = 1800.0) -> EvictionTable:
    deltas = (0.0001, 0.01, 0.1)
    return EvictionTable(
        deltas, {M1: np.full(3, beta), M2: np.full(3, beta)}, {M1: np.full(3, tte), M2: np.full(3, tte)}
    )


def test_acquire_amortises_on_demand_and_respects_headroom() -> None:
    brain = BidBrain(_table(0.0), BidBrainParams(counts=(1, 2, 4, 8)))
    od = _alloc(0, od=True, price=0.9, count=3)
    views = [MarketView(M1, 0.36, 0.9, 4.0), MarketView(M2, 1.0, 3.06, 8.0)]
    req = brain.acquire(0.0, [od], {}, views, headroom=8)
    # Cheaper per work than the footprint's E_A, so BidBrain adds the largest allowed count of the
    # cheapest market (per unit of work), bidding at least the current price and at most on demand.
    assert req is not None and req.market == M1 and req.count == 8
    assert 0.36 <= req.bid <= 0.9
    assert brain.acquire(0.0, [od], {}, views, headroom=0) is None
    # A market dearer per work than what the job already has is not worth adding.
    cheap = _alloc(1, price=0.05, count=64)
    dear = [MarketView(M2, 2.9, 3.06, 8.0)]
    assert brain.acquire(0.0, [cheap], {M1: 0.05}, dear, headroom=64) is None


def test_acquire_prefers_free_hours_when_evictions_are_likely() -> None:
    # With β = 0.9 a new spot hour is expected to be refunded: its expected cost per work is far below
    # the same market's at β = 0, so BidBrain should want it even next to a cheap, safe footprint.
    od = _alloc(0, od=True, price=0.9, count=3)
    views = [MarketView(M1, 0.36, 0.9, 4.0)]
    risky = BidBrain(_table(0.9, tte=3000.0)).acquire(0.0, [od], {}, views, headroom=16)
    safe = BidBrain(_table(0.0)).acquire(0.0, [od], {}, views, headroom=16)
    assert risky is not None and safe is not None
    assert risky.expected_cost_per_work < safe.expected_cost_per_work


def test_renewal_drops_an_allocation_whose_market_became_dear() -> None:
    brain = BidBrain(_table(0.0))
    od = _alloc(0, od=True, price=0.9, count=3)
    cheap = _alloc(1, market=M1, count=16, price=0.3, bid=0.9)
    dear = _alloc(2, market=M2, count=4, price=1.0, bid=3.0)
    now = HOUR_S - 300.0
    assert brain.keep(now, cheap, [od, cheap, dear], {M1: 0.3, M2: 2.9})
    assert not brain.keep(now, dear, [od, cheap, dear], {M1: 0.3, M2: 2.9})
    assert not brain.keep(now, cheap, [od, cheap], {M1: 0.95})  # the price is already above the bid
    assert brain.renewal_check_at(cheap) == HOUR_S - 300.0
    assert brain.next_periodic(121.0) == 240.0


def test_standard_takes_cheapest_per_work_and_bids_on_demand() -> None:
    views = [
        MarketView(M1, 0.40, 0.9, 4.0),  # 0.100 per vCPU
        MarketView(M2, 0.72, 3.06, 8.0),  # 0.090 per vCPU
        MarketView(("p2.xlarge", "us-east-1f"), 0.95, 0.9, 4.0),  # above on demand: unwinnable
    ]
    req = standard_request(views, 5)
    assert req is not None and req.market == M2 and req.bid == 3.06 and req.count == 5
    assert standard_request(views[2:], 5) is None
    assert standard_request(views, 0) is None
    naive = just_above_request(views, 5)
    assert naive is not None and naive.market == M2 and naive.bid == pytest.approx(0.72 + 1e-4)
