"""The emulated cloud of a market-driven real run: requests, grants, boots, renewals, price-driven
evictions and the bill, in *market* seconds (the launcher converts wall-clock time, ``real_s_per_sim_h``
real seconds per market hour).

Every decision is the acquisition policy's (``policies.spot.ACQUISITION``, BidBrain for Proteus §4): it is
asked at the same decision points, with the same :class:`DecisionPoint`, as in the simulator — the start,
each periodic point it asks for, each eviction and failed request, and each renewal check before a
billing hour ends. What the policy decides becomes processes: the launcher spawns one training process
per instance when the allocation is granted, which joins the job once it has booted (:class:`Boot`),
and warns then SIGKILLs the processes of an evicted
allocation (:class:`Leave`, the provider's warning first) or of one the policy does not renew (its hour
end is the kill). The bill is ``policies.spot.billing.lifetime_bill`` of each allocation's lifetime, the
closed form of the simulator's books, so the same lifetimes cost the same in both executors.

Events run in time order from a heap; the launcher calls :meth:`Fleet.advance` every poll tick, so an
event is *booked* at its own market time and *carried out* at the next tick.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from clustertwin.policies.bidbrain import Allocation, Market, MarketView
from clustertwin.policies.bidbrain.cost_model import HOUR_S
from clustertwin.policies.bidbrain.history import PriceSeries
from clustertwin.policies.spot import NO_FAULT_TOLERANCE, AcquisitionPolicy, DecisionPoint, FaultTolerance
from clustertwin.policies.spot.billing import BillingModel, lifetime_bill
from clustertwin.scenarios.spot_results import acquisition_row


@dataclass(frozen=True)
class MarketInputs:
    """What the fleet replays and who decides (built from the scenario one layer up, as the simulator's)."""

    acquisition: AcquisitionPolicy
    fault_tolerance: FaultTolerance
    billing: BillingModel
    series: Mapping[Market, PriceSeries]
    on_demand_prices: Mapping[str, float]
    work_rates: Mapping[str, float]
    target_rate: float
    max_rate: float
    total_work: float
    reliable_type: str
    reference_type: str
    request_delay_s: float
    boot_s: float
    max_runtime_s: float


@dataclass(frozen=True)
class Boot:
    """Spawn these processes: the allocation was granted and its instances boot until ``ready_s``
    (market seconds), when they may join the job (a process's own start-up is part of the boot)."""

    alloc_id: int
    names: tuple[str, ...]
    on_demand: bool
    ready_s: float


@dataclass(frozen=True)
class Leave:
    """Warn these processes at ``warn_s`` and SIGKILL them at ``kill_s`` (market seconds)."""

    alloc_id: int
    names: tuple[str, ...]
    warn_s: float
    kill_s: float
    reason: str  # evicted | released


@dataclass
class _Rec:
    alloc: Allocation
    requested_s: float
    names: tuple[str, ...] = ()
    granted_s: float = math.nan
    ready_s: float = math.nan
    ended_s: float = math.nan
    end_reason: str = ""
    state: str = "pending"  # pending | booting | running | warned | gone
    first_hour_s: float = math.nan
    drop: bool = False  # not renewed: released when its billing hour ends

    @property
    def alive(self) -> bool:
        return self.state in ("booting", "running", "warned")


@dataclass
class Fleet:
    """One run's market and allocations; see the module docstring."""

    inputs: MarketInputs
    now: float = 0.0
    evictions: list[dict] = field(default_factory=list)
    _recs: dict[int, _Rec] = field(default_factory=dict)
    _heap: list = field(default_factory=list)
    _seq: itertools.count = field(default_factory=itertools.count)
    _out: list = field(default_factory=list)
    _names: dict[str, int] = field(default_factory=lambda: {"r": 0, "t": 0})
    ended: bool = False

    def __post_init__(self) -> None:
        inp = self.inputs
        self.acq = inp.acquisition
        self.ft = inp.fault_tolerance if self.acq.holds_transient else NO_FAULT_TOLERANCE
        self.markets = sorted(inp.series)

    # ---- the clock ----------------------------------------------------------------------------
    def _at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (max(t, self.now), next(self._seq), fn))

    def start(self) -> list[Boot | Leave]:
        inp = self.inputs
        if inp.billing.price_evictions:
            for m in self.markets:
                s = inp.series[m]
                for t in s.times_s[(s.times_s > 0) & (s.times_s <= inp.max_runtime_s)]:
                    self._at(float(t), lambda m=m: self._price_changed(m))
        rate = inp.work_rates[inp.reference_type]
        self._on_demand(inp.reference_type, self.acq.on_demand_count(inp.target_rate, rate))
        self._on_demand(inp.reliable_type, self.ft.reliable_count)
        self._decide("start")
        return self._flush()

    def advance(self, t: float, before: bool = False) -> list[Boot | Leave]:
        """Run every event due by market time ``t`` (``before``: only those before it); return what the
        launcher must carry out."""
        while self._heap and not self.ended and (self._heap[0][0] < t if before else self._heap[0][0] <= t):
            when, _, fn = heapq.heappop(self._heap)
            self.now = when
            fn()
        self.now = max(self.now, t)
        return self._flush()

    def _flush(self) -> list[Boot | Leave]:
        out, self._out = self._out, []
        return out

    # ---- acquisition --------------------------------------------------------------------------
    def _on_demand(self, itype: str, count: int) -> None:
        if count > 0:
            self._new((itype, "on-demand"), count, math.inf, on_demand=True)

    def _new(self, market: Market, count: int, bid: float, on_demand: bool = False) -> None:
        aid = len(self._recs)
        alloc = Allocation(
            alloc_id=aid,
            market=market,
            count=count,
            bid=bid,
            price=math.nan,
            hour_start_s=math.nan,
            work_rate=self.inputs.work_rates[market[0]],
            on_demand=on_demand,
        )
        rec = _Rec(alloc, self.now)
        self._recs[aid] = rec
        self._at(self.now + self.inputs.request_delay_s, lambda: self._grant(rec))

    def price(self, market: Market, t: float) -> float:
        return float(self.inputs.series[market].at(t))

    def _current(self, rec: _Rec) -> float:
        a = rec.alloc
        return self.inputs.on_demand_prices[a.market[0]] if a.on_demand else self.price(a.market, self.now)

    def _grant(self, rec: _Rec) -> None:
        price = self._current(rec)
        if not rec.alloc.on_demand and self.inputs.billing.price_evictions and price > rec.alloc.bid:
            rec.state, rec.ended_s, rec.end_reason = "gone", self.now, "request_failed"
            self._decide("request_failed")
            return
        rec.alloc = replace(rec.alloc, price=price, hour_start_s=self.now)
        rec.state, rec.granted_s, rec.first_hour_s = "booting", self.now, self.now
        prefix = "r" if rec.alloc.on_demand else "t"
        first = self._names[prefix]
        self._names[prefix] += rec.alloc.count
        rec.names = tuple(f"{prefix}{first + i}" for i in range(rec.alloc.count))
        ready = self.now + self.inputs.boot_s
        self._out.append(Boot(rec.alloc.alloc_id, rec.names, rec.alloc.on_demand, ready))
        self._at(ready, lambda: self._ready(rec))
        self._at(self.now + HOUR_S, lambda: self._hour_boundary(rec))
        self._schedule_renewal(rec)

    def _ready(self, rec: _Rec) -> None:
        if rec.state != "booting":
            return
        rec.state, rec.ready_s = "running", self.now

    def _hour_boundary(self, rec: _Rec) -> None:
        if not rec.alive:
            return
        if rec.drop:
            self._end_rec(rec, "released")
            return
        rec.alloc = replace(rec.alloc, price=self._current(rec), hour_start_s=self.now)
        self._at(self.now + HOUR_S, lambda: self._hour_boundary(rec))
        self._schedule_renewal(rec)

    def _schedule_renewal(self, rec: _Rec) -> None:
        at = None if rec.alloc.on_demand else self.acq.renewal_at(rec.alloc)
        if at is not None:
            self._at(at, lambda: self._renewal_check(rec))

    def _renewal_check(self, rec: _Rec) -> None:
        if rec.state != "running":
            return
        footprint = [r.alloc for r in self._recs.values() if r.alive]
        if not self.acq.renew(self.now, rec.alloc, self._footprint_work(footprint), self._prices()):
            rec.drop = True
            end = rec.alloc.hour_start_s + HOUR_S
            self._out.append(Leave(rec.alloc.alloc_id, rec.names, self.now, end, "released"))

    # ---- evictions ----------------------------------------------------------------------------
    def _price_changed(self, m: Market) -> None:
        price = self.price(m, self.now)
        for rec in list(self._recs.values()):
            a = rec.alloc
            if a.market == m and not a.on_demand and rec.state in ("booting", "running") and price > a.bid:
                self._warn(rec)

    def _warn(self, rec: _Rec) -> None:
        rec.state = "warned"
        warned, price = self.now, self._current(rec)
        kill = self.now + self.inputs.billing.warning_s
        self._out.append(Leave(rec.alloc.alloc_id, rec.names, warned, kill, "evicted"))
        self._at(kill, lambda: self._evicted(rec, warned, price))

    def _evicted(self, rec: _Rec, warned_s: float, price: float) -> None:
        if rec.state == "gone":  # released at its hour end while warned: nothing left to evict
            return
        a = rec.alloc
        self.evictions.append(
            {
                "time_s": warned_s,
                "terminate_s": self.now,
                "alloc_id": a.alloc_id,
                "instance_type": a.market[0],
                "zone": a.market[1],
                "count": a.count,
                "price": price,
                "bid": a.bid,
                "recovery": "none",  # the launcher says what happened (record_recovery)
                "lost_work": 0.0,
            }
        )
        self._end_rec(rec, "evicted")
        self._decide("eviction")

    def record_recovery(self, alloc_id: int, recovery: str, lost_work: float) -> None:
        """What the job did about an eviction of ``alloc_id`` (measured by the launcher)."""
        for row in self.evictions:
            if row["alloc_id"] == alloc_id:
                row["recovery"], row["lost_work"] = recovery, lost_work

    def _end_rec(self, rec: _Rec, reason: str) -> None:
        rec.state, rec.ended_s, rec.end_reason = "gone", self.now, reason

    # ---- decisions (the simulator's DecisionPoint, built the same way) ------------------------
    def _prices(self) -> dict[Market, float]:
        return {m: self.price(m, self.now) for m in self.markets}

    def _footprint_work(self, footprint: list[Allocation]) -> list[Allocation]:
        n_r = sum(a.count for a in footprint if a.on_demand)
        n_t = sum(a.count for a in footprint if not a.on_demand)
        if self.ft.reliable_does_work(n_r, n_t):
            return footprint
        return [replace(a, does_work=False) if a.on_demand else a for a in footprint]

    def _decide(self, why: str) -> None:
        if self.ended:
            return
        inp = self.inputs
        prices = self._prices()
        # as the simulator: a warned allocation is gone; one not renewed still counts until its hour ends
        held = [r.alloc for r in self._recs.values() if r.state in ("booting", "running")]
        pending = [
            replace(r.alloc, price=self._current(r), hour_start_s=self.now)
            for r in self._recs.values()
            if r.state == "pending"
        ]
        views = [
            MarketView(m, prices[m], inp.on_demand_prices[m[0]], inp.work_rates[m[0]]) for m in self.markets
        ]
        held_rate = sum(
            r.alloc.count * r.alloc.work_rate for r in self._recs.values() if r.alive or r.state == "pending"
        )
        point = DecisionPoint(
            now=self.now,
            why=why,
            markets=views,
            prices=prices,
            footprint=self._footprint_work(held + pending),
            held_rate=held_rate,
            target_rate=inp.target_rate,
            max_rate=inp.max_rate,
        )
        decision = self.acq.decide(point)
        if decision.next_s is not None:
            self._at(decision.next_s, lambda: self._decide(decision.next_why))
        for request in decision.requests:
            self._new(request.market, request.count, request.bid)

    # ---- the end and the books ----------------------------------------------------------------
    def end(self, t: float, reason: str) -> None:
        """The job is done (or stopped): every held instance ends now, pending requests are cancelled.
        The end comes first among the events at ``t``, as in the simulator."""
        self.advance(t, before=True)
        for rec in self._recs.values():
            if rec.alive:
                self._end_rec(rec, reason)
            elif rec.state == "pending":
                self._end_rec(rec, "cancelled")
        self.ended = True

    def _price_of(self, rec: _Rec, t: float) -> float:
        a = rec.alloc
        return self.inputs.on_demand_prices[a.market[0]] if a.on_demand else self.price(a.market, t)

    def _integral_of(self, rec: _Rec, t0: float, t1: float) -> float:
        """∫ price dt over [t0, t1] in $ per instance (price is $/h)."""
        if t1 <= t0:
            return 0.0
        if rec.alloc.on_demand:
            return self.inputs.on_demand_prices[rec.alloc.market[0]] * (t1 - t0) / 3600.0
        s = self.inputs.series[rec.alloc.market]
        edges = np.r_[t0, s.times_s[(s.times_s > t0) & (s.times_s < t1)], t1]
        return float(np.sum(s.at(edges[:-1]) * np.diff(edges)) / 3600.0)

    def books(self) -> dict[str, list[dict]]:
        """The simulator's acquisitions, evictions, bills and usage rows (``scenarios.spot_results``)."""
        inp = self.inputs
        acquisitions, bills, usage = [], [], []
        for aid, rec in sorted(self._recs.items()):
            a = rec.alloc
            acquisitions.append(acquisition_row(aid, rec))
            if math.isnan(rec.granted_s):
                continue
            evicted = rec.end_reason == "evicted"
            items = lifetime_bill(
                inp.billing,
                rec.first_hour_s,
                rec.ended_s,
                evicted=evicted,
                on_demand=a.on_demand,
                price_at=lambda t, r=rec: self._price_of(r, t),
                integral_usd=lambda t0, t1, r=rec: self._integral_of(r, t0, t1),
                count=a.count,
            )
            for t, kind, amount in items:
                into = min(t, rec.ended_s - 1e-9) - rec.first_hour_s
                hour = rec.first_hour_s + math.floor(into / HOUR_S) * HOUR_S
                bills.append(
                    {
                        "time_s": t,
                        "alloc_id": aid,
                        "kind": kind,
                        "amount_usd": amount,
                        "hour_start_s": max(hour, rec.first_hour_s),
                        "on_demand": a.on_demand,
                    }
                )
            refunded = evicted and inp.billing.refund_on_eviction and inp.billing.hourly and not a.on_demand
            t = rec.first_hour_s
            while t < rec.ended_s:
                end = min(t + HOUR_S, rec.ended_s)
                usage.append(
                    {
                        "alloc_id": aid,
                        "start_s": t,
                        "end_s": end,
                        "on_demand": a.on_demand,
                        "count": a.count,
                        "work_rate": a.work_rate,
                        "paid": not (refunded and end >= rec.ended_s),
                    }
                )
                t += HOUR_S
        return {"acquisitions": acquisitions, "evictions": self.evictions, "bills": bills, "usage": usage}
