"""The spot-market executor: SimPy replay of markets, requests, evictions, billing and job progress.

Time advances only by events — price changes, request grants, boots, evictions (warning, then
termination), billing-hour boundaries, checkpoints, decision points and the job's completion — and
progress between events is closed form (rate × time), so a 20-hour job costs a few thousand events.

Decisions come from ``policies/``: an acquisition policy (``policies.spot.ACQUISITION``: what to request
and renew at each decision point) and a fault-tolerance scheme (``policies.spot.FAULT_TOLERANCE``: stage,
reliable machines, checkpoints, what an eviction costs). This module only carries them out and keeps the
books; it never names a policy.

Work accounting (what the property tests check): ``done`` only grows by rate × elapsed time; a rollback
subtracts exactly what is recorded as ``lost_work`` in the evictions table, so at any time
``done = ∫rate dt − Σ lost_work``, and ``done`` never drops below the last consistent state (checkpoint,
or the BackupPS state for AgileML).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import simpy
from clustertwin.policies.agileml import PartitionTable, choose_active_ps_hosts, num_partitions
from clustertwin.policies.bidbrain import Allocation, MarketView
from clustertwin.policies.bidbrain.cost_model import HOUR_S
from clustertwin.policies.bidbrain.history import Market
from clustertwin.policies.spot import (
    NO_FAULT_TOLERANCE,
    AcquisitionPolicy,
    Decision,
    DecisionPoint,
    FaultTolerance,
)
from clustertwin.policies.spot.billing import BillingModel
from clustertwin.scenarios.spot_replay import MarketReplay
from clustertwin.scenarios.spot_results import acquisition_row
from clustertwin.sim.spot.perf import PerfModel


@dataclass(frozen=True)
class SpotConfig:
    """Everything a run needs besides the market and the policies; built from a scenario by
    ``sim.spot.setup``."""

    acquisition: AcquisitionPolicy
    fault_tolerance: FaultTolerance
    billing: BillingModel
    total_work: float  # work units (ν·hours)
    target_rate: float  # ν of the reference cluster: what Standard and all-on-demand hold
    max_rate: float  # most ν the job may hold at once (BidBrain's cap)
    on_demand_prices: dict[str, float]
    work_rates: dict[str, float]
    reliable_type: str  # the fault-tolerance scheme's on-demand machines
    reference_type: str  # the reference cluster's machines (what all-on-demand holds)
    request_delay_s: float = 60.0
    boot_s: float = 120.0
    partition_mb: float = 64.0
    nic_gbps: float = 1.0
    perf: PerfModel | None = None
    preemption_rate_per_s: float = 0.0  # fixed_preemptible only
    max_runtime_s: float = 30 * 24 * 3600.0
    # iteration-time multiplier of n workers (stragglers, and FlexRR in the workers); None: 1
    straggle: Callable[[int], float] | None = None


@dataclass
class _Alloc:
    alloc: Allocation
    requested_s: float
    granted_s: float = math.nan
    ready_s: float = math.nan
    ended_s: float = math.nan
    end_reason: str = ""
    state: str = "pending"  # pending | booting | running | warned | gone
    hour_charge: float = 0.0
    settled_s: float = 0.0
    drop_at_hour_end: bool = False

    @property
    def alive(self) -> bool:
        return self.state in ("booting", "running", "warned", "warned_boot")

    @property
    def working(self) -> bool:
        return self.state in ("running", "warned")


@dataclass
class _Books:
    acquisitions: list[dict] = field(default_factory=list)
    evictions: list[dict] = field(default_factory=list)
    bills: list[dict] = field(default_factory=list)
    progress: list[dict] = field(default_factory=list)
    usage: list[dict] = field(default_factory=list)


class SpotSim:
    """One run. Call :meth:`run`; then read ``books`` and ``finished_s``.

    ``warning_s``, when given, is the public hook for an eviction schedule that is not a provider's: the
    notice (seconds between warning and termination) an eviction in each market gets, instead of the
    billing model's one warning. A replay of a real run's schedule gives each eviction its own.
    """

    def __init__(
        self,
        config: SpotConfig,
        market: MarketReplay,
        markets: Sequence[Market],
        rng: np.random.Generator,
        progress: Callable[[float, str], None] | None = None,
        warning_s: Callable[[Market], float] | None = None,
    ) -> None:
        self.cfg = config
        self.market = market
        self.markets = sorted(markets)
        self.rng = rng
        self.acq = config.acquisition
        # A policy that never holds transient machines needs no fault tolerance (and pays for none).
        self.ft = config.fault_tolerance if self.acq.holds_transient else NO_FAULT_TOLERANCE
        self.report = progress
        self._warning_for = warning_s
        self.env = simpy.Environment()
        self.allocs: dict[int, _Alloc] = {}
        self.books = _Books()
        self.done = 0.0
        self.rate = 0.0
        self.last_t = 0.0
        self.stall_until = 0.0
        self.ckpt_work = 0.0
        self.integrated = 0.0  # ∫ rate dt, for the conservation check
        self.lost = 0.0
        self.stage = 0
        self.finished_s = math.nan
        self._version = 0
        self._finish = self.env.event()
        self._next_id = 0
        self.partitions: PartitionTable | None = None  # AgileML's partition owners (created with R)
        self._migrations = 0

    # ---- scheduling helpers -------------------------------------------------------------------
    def _at(self, t: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` at absolute time ``t`` (now if ``t`` is past)."""
        ev = self.env.timeout(max(t - self.env.now, 0.0))
        ev.callbacks.append(lambda _ev: None if self._finish.triggered else fn())

    # ---- the run ------------------------------------------------------------------------------
    def run(self) -> None:
        cfg = self.cfg
        for m in self.markets:
            if cfg.billing.price_evictions:
                self.env.process(self._market_process(m))
        rate = cfg.work_rates[cfg.reference_type]
        self._request_on_demand(cfg.reference_type, self.acq.on_demand_count(cfg.target_rate, rate))
        self._request_on_demand(cfg.reliable_type, self.ft.reliable_count)
        self._decide("start")
        every = self.ft.checkpoint_every_s()
        if every is not None:
            self._at(every, self._checkpoint)
        self._at(cfg.max_runtime_s, lambda: self._end("max_runtime"))
        self.env.run(until=self._finish)

    def _market_process(self, m: Market):  # simpy generator
        for t, _price in self.market.changes(m, 0.0, self.cfg.max_runtime_s):
            yield self.env.timeout(t - self.env.now)
            if self._finish.triggered:
                return
            self._price_changed(m)

    # ---- progress -----------------------------------------------------------------------------
    def _advance(self) -> None:
        now = self.env.now
        start = max(self.last_t, self.stall_until)
        if now > start and self.rate > 0:
            gained = self.rate * (now - start) / 3600.0
            self.done += gained
            self.integrated += gained
        self.last_t = now

    def _recompute(self, event: str) -> None:
        """Re-derive the work rate from the live machines, log it, and re-aim the completion event."""
        self._advance()
        cfg = self.cfg
        working = [a for a in self.allocs.values() if a.working]
        rel = [a for a in working if a.alloc.on_demand]
        tra = [a for a in working if not a.alloc.on_demand]
        n_r = sum(a.alloc.count for a in rel)
        n_t = sum(a.alloc.count for a in tra)
        nu = sum(a.alloc.count * a.alloc.work_rate for a in working)
        stage = self.ft.stage(n_r, n_t)
        self.stage = stage or 0
        if stage == 0:  # a scheme without stages: every machine trains, less the scheme's overhead
            rate = nu * self.ft.work_fraction()
        elif stage is None or cfg.perf is None:
            rate = 0.0
        else:
            rate = nu / cfg.perf.slowdown(stage, n_r, n_t)
        if cfg.straggle is not None and rate > 0:
            workers = n_r + n_t if stage is None or self.ft.reliable_does_work(n_r, n_t) else n_t
            rate /= cfg.straggle(workers)
        self.rate = rate
        if self.ft.partitioned:
            self._sync_partitions(rel, tra)
        self.books.progress.append(
            {
                "time_s": self.env.now,
                "work_done": self.done,
                "rate": rate,
                "n_reliable": n_r,
                "n_transient": n_t,
                "stage": self.stage,
                "migrations": self._migrations,
                "event": event,
            }
        )
        self._version += 1
        if rate > 0:
            version = self._version
            t_done = max(self.env.now, self.stall_until) + (cfg.total_work - self.done) / rate * 3600.0
            self._at(t_done, lambda: self._maybe_done(version))
        if self.report is not None:
            self.report(min(self.done / cfg.total_work, 1.0), f"{self.done:.0f}/{cfg.total_work:.0f} work")

    def _sync_partitions(self, rel: list[_Alloc], tra: list[_Alloc]) -> None:
        """Keep AgileML's partition owners in step with the machines (§3.3): ActivePSs on half of the
        machines in stages 2/3, longest-running first; none in stage 1 (BackupPSs serve as ParamServs)."""
        reliable = [n for a in rel for n in _nodes(a)]
        if self.partitions is None:
            if not reliable:
                return
            max_machines = int(self.cfg.max_rate // min(self.cfg.work_rates.values())) + 1
            self.partitions = PartitionTable.create(num_partitions(max_machines), reliable)
        started = {n: a.ready_s for a in tra for n in _nodes(a)}
        if self.ft.has_active_ps(self.stage):
            current = [h for h in dict.fromkeys(self.partitions.active) if h is not None]
            hosts = choose_active_ps_hosts(started, current, len(reliable) + len(started))
        else:
            hosts = []
        self._migrations += len(self.partitions.assign_active(hosts))

    def _maybe_done(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        self.done = max(self.done, self.cfg.total_work)  # float round-off at the last step
        self._end("job_done")

    def _checkpoint(self) -> None:
        self._advance()
        if self.env.now >= self.stall_until:
            self.ckpt_work = self.done
        every = self.ft.checkpoint_every_s()
        assert every is not None
        self._at(self.env.now + every, self._checkpoint)

    # ---- acquisition --------------------------------------------------------------------------
    def _request_on_demand(self, itype: str, count: int) -> None:
        if count > 0:
            self._new_alloc((itype, "on-demand"), count, math.inf, on_demand=True)

    def _new_alloc(self, market: Market, count: int, bid: float, on_demand: bool = False) -> _Alloc:
        aid = self._next_id
        self._next_id += 1
        alloc = Allocation(
            alloc_id=aid,
            market=market,
            count=count,
            bid=bid,
            price=math.nan,
            hour_start_s=math.nan,
            work_rate=self.cfg.work_rates[market[0]],
            on_demand=on_demand,
        )
        rec = _Alloc(alloc, requested_s=self.env.now)
        self.allocs[aid] = rec
        self._at(self.env.now + self.cfg.request_delay_s, lambda: self._grant(rec))
        return rec

    def _current_price(self, rec: _Alloc) -> float:
        a = rec.alloc
        if a.on_demand:
            return self.cfg.on_demand_prices[a.market[0]]
        if self.cfg.billing.fixed_discount is not None:
            return (1.0 - self.cfg.billing.fixed_discount) * self.cfg.on_demand_prices[a.market[0]]
        return self.market.price(a.market, self.env.now)

    def _grant(self, rec: _Alloc) -> None:
        now = self.env.now
        price = self._current_price(rec)
        if not rec.alloc.on_demand and self.cfg.billing.price_evictions and price > rec.alloc.bid:
            rec.state, rec.ended_s, rec.end_reason = "gone", now, "request_failed"
            self._log_acquisition(rec)
            self._decide("request_failed")
            return
        rec.alloc = replace(rec.alloc, price=price, hour_start_s=now)
        rec.state, rec.granted_s, rec.settled_s = "booting", now, now
        self._charge_hour(rec)
        self._at(now + self.cfg.boot_s, lambda: self._ready(rec))
        self._at(now + HOUR_S, lambda: self._hour_boundary(rec))
        self._schedule_renewal(rec)
        if not rec.alloc.on_demand and self.cfg.billing.name == "fixed_preemptible":
            life = self.cfg.billing.max_lifetime_s
            if self.cfg.preemption_rate_per_s > 0:
                life = min(life, float(self.rng.exponential(1.0 / self.cfg.preemption_rate_per_s)))
            self._at(now + max(life - self.cfg.billing.warning_s, 0.0), lambda: self._warn(rec))

    def _ready(self, rec: _Alloc) -> None:
        if rec.state != "booting":
            return
        rec.state, rec.ready_s = "running", self.env.now
        self._recompute("ready")

    # ---- billing ------------------------------------------------------------------------------
    def _bill(self, rec: _Alloc, kind: str, amount: float) -> None:
        self.books.bills.append(
            {
                "time_s": self.env.now,
                "alloc_id": rec.alloc.alloc_id,
                "kind": kind,
                "amount_usd": amount,
                "hour_start_s": rec.alloc.hour_start_s,
                "on_demand": rec.alloc.on_demand,
            }
        )

    def _charge_hour(self, rec: _Alloc) -> None:
        if self.cfg.billing.hourly or rec.alloc.on_demand:
            rec.hour_charge = rec.alloc.count * rec.alloc.price
            self._bill(rec, "charge", rec.hour_charge)

    def _settle(self, rec: _Alloc) -> None:
        """Per-second billing: pay for [settled_s, now] at the prices in effect."""
        if self.cfg.billing.hourly or rec.alloc.on_demand:
            return
        now = self.env.now
        if self.cfg.billing.fixed_discount is not None:
            amount = rec.alloc.count * rec.alloc.price * (now - rec.settled_s) / 3600.0
        else:
            amount = rec.alloc.count * self.market.integral_usd(rec.alloc.market, rec.settled_s, now)
        rec.settled_s = now
        if amount > 0:
            self._bill(rec, "settle", amount)

    def _close_usage(self, rec: _Alloc, paid: bool) -> None:
        start = rec.alloc.hour_start_s
        self.books.usage.append(
            {
                "alloc_id": rec.alloc.alloc_id,
                "start_s": start,
                "end_s": self.env.now,
                "on_demand": rec.alloc.on_demand,
                "count": rec.alloc.count,
                "work_rate": rec.alloc.work_rate,
                "paid": paid,
            }
        )

    def _hour_boundary(self, rec: _Alloc) -> None:
        if not rec.alive:
            return
        self._settle(rec)
        self._close_usage(rec, paid=True)
        if rec.drop_at_hour_end:
            self._terminate(rec, "released")
            return
        now = self.env.now
        price = self._current_price(rec)
        rec.alloc = replace(rec.alloc, price=price, hour_start_s=now)
        self._charge_hour(rec)
        self._at(now + HOUR_S, lambda: self._hour_boundary(rec))
        self._schedule_renewal(rec)

    # ---- evictions ----------------------------------------------------------------------------
    def _price_changed(self, m: Market) -> None:
        price = self.market.price(m, self.env.now)
        for rec in list(self.allocs.values()):
            a = rec.alloc
            if a.market == m and not a.on_demand and rec.state in ("booting", "running") and price > a.bid:
                self._warn(rec)

    def _warn(self, rec: _Alloc) -> None:
        if rec.state not in ("booting", "running"):
            return
        now = self.env.now
        was_working = rec.working
        rec.state = "warned" if was_working else "warned_boot"
        warning = self._warning(rec)
        price = self._current_price(rec)
        self._at(now + warning, lambda: self._evicted(rec, now, price, was_working))

    def _evicted(self, rec: _Alloc, warned_s: float, price: float, was_working: bool) -> None:
        if rec.state == "gone":  # released at its hour end while warned: nothing left to evict
            return
        cfg = self.cfg
        self._advance()
        recovery, lost = "none", 0.0
        if was_working:
            cost = self.ft.eviction_cost(
                self.stage, self._warning(rec), self._unpushed_bytes(rec), cfg.nic_gbps * 1e9
            )
            recovery = cost.recovery
            if cost.lost == "since_checkpoint":
                lost = max(self.done - self.ckpt_work, 0.0)
            elif cost.lost == "recent":
                lost = min(self.rate * cost.lost_s / 3600.0, self.done)
            if cost.stall_s > 0:
                self.stall_until = max(self.stall_until, self.env.now + cost.stall_s)
        self.done -= lost
        self.lost += lost
        self.ckpt_work = min(self.ckpt_work, self.done)
        self.books.evictions.append(
            {
                "time_s": warned_s,
                "terminate_s": self.env.now,
                "alloc_id": rec.alloc.alloc_id,
                "instance_type": rec.alloc.market[0],
                "zone": rec.alloc.market[1],
                "count": rec.alloc.count,
                "price": price,
                "bid": rec.alloc.bid,
                "recovery": recovery,
                "lost_work": lost,
            }
        )
        self._settle(rec)
        if cfg.billing.refund_on_eviction and cfg.billing.hourly:
            self._bill(rec, "refund", -rec.hour_charge)  # the provider evicted: this hour is free
            self._close_usage(rec, paid=False)
        else:
            self._close_usage(rec, paid=True)
        self._terminate(rec, "evicted")
        self._decide("eviction")

    def _warning(self, rec: _Alloc) -> float:
        if self._warning_for is None:
            return self.cfg.billing.warning_s
        return self._warning_for(rec.alloc.market)

    def _unpushed_bytes(self, rec: _Alloc) -> float:
        """What the evicted machines must push before they go. Each doomed node pushes the unpushed
        deltas of the partitions it hosts over its own NIC, and all of it lands on the R reliable NICs:
        the slower of the two bounds the flush."""
        hosted = [len(self.partitions.owned_by(n)) for n in _nodes(rec)] if self.partitions else [0]
        n_rel = max(sum(a.alloc.count for a in self.allocs.values() if a.working and a.alloc.on_demand), 1)
        return max(max(hosted), sum(hosted) / n_rel) * self.cfg.partition_mb * 1e6

    def _terminate(self, rec: _Alloc, reason: str) -> None:
        rec.state, rec.ended_s, rec.end_reason = "gone", self.env.now, reason
        self._log_acquisition(rec)
        self._recompute(reason)

    def _schedule_renewal(self, rec: _Alloc) -> None:
        at = None if rec.alloc.on_demand else self.acq.renewal_at(rec.alloc)
        if at is not None:
            self._at(at, lambda: self._renewal_check(rec))

    def _renewal_check(self, rec: _Alloc) -> None:
        if not rec.alive or rec.state != "running":
            return
        footprint = [a.alloc for a in self.allocs.values() if a.alive]
        if not self.acq.renew(self.env.now, rec.alloc, self._footprint_work(footprint), self._prices()):
            rec.drop_at_hour_end = True

    # ---- decisions ----------------------------------------------------------------------------
    def _prices(self) -> dict[Market, float]:
        discount = self.cfg.billing.fixed_discount
        if discount is not None:  # fixed-price preemptible: the price is a list price, not a market
            return {m: (1.0 - discount) * self.cfg.on_demand_prices[m[0]] for m in self.markets}
        return {m: self.market.price(m, self.env.now) for m in self.markets}

    def _views(self) -> list[MarketView]:
        prices = self._prices()
        return [
            MarketView(m, prices[m], self.cfg.on_demand_prices[m[0]], self.cfg.work_rates[m[0]])
            for m in self.markets
        ]

    def _held_rate(self) -> float:
        """ν held or requested, on demand included."""
        return sum(
            a.alloc.count * a.alloc.work_rate for a in self.allocs.values() if a.alive or a.state == "pending"
        )

    def _footprint_work(self, footprint: list[Allocation]) -> list[Allocation]:
        """Mark whether the on-demand allocations do work (the fault-tolerance scheme says; AgileML's
        reliable machines do none in stage 3, Fig. 6)."""
        n_r = sum(a.count for a in footprint if a.on_demand)
        n_t = sum(a.count for a in footprint if not a.on_demand)
        if self.ft.reliable_does_work(n_r, n_t):
            return footprint
        return [replace(a, does_work=False) if a.on_demand else a for a in footprint]

    def _decide(self, why: str) -> None:
        """A decision point: ask the acquisition policy, schedule its next point, place its requests."""
        if self._finish.triggered:
            return
        cfg = self.cfg
        footprint = self._footprint_work(
            [a.alloc for a in self.allocs.values() if a.alive and a.state not in ("warned", "warned_boot")]
            + [
                replace(a.alloc, price=self._current_price(a), hour_start_s=self.env.now)
                for a in self.allocs.values()
                if a.state == "pending"
            ]
        )
        point = DecisionPoint(
            now=self.env.now,
            why=why,
            markets=self._views(),
            prices=self._prices(),
            footprint=footprint,
            held_rate=self._held_rate(),
            target_rate=cfg.target_rate,
            max_rate=cfg.max_rate,
        )
        decision: Decision = self.acq.decide(point)
        if decision.next_s is not None:
            self._at(decision.next_s, lambda: self._decide(decision.next_why))
        for request in decision.requests:
            self._new_alloc(request.market, request.count, request.bid)

    # ---- end ----------------------------------------------------------------------------------
    def _end(self, reason: str) -> None:
        if self._finish.triggered:
            return
        self._advance()
        now = self.env.now
        for rec in self.allocs.values():
            if rec.alive:
                self._settle(rec)
                if self.cfg.billing.hourly or rec.alloc.on_demand:
                    # Prorate the final partial hour for every scheme (§6.3).
                    used = now - rec.alloc.hour_start_s
                    self._bill(rec, "prorate", -rec.hour_charge * (1.0 - used / HOUR_S))
                self._close_usage(rec, paid=True)
                rec.state, rec.ended_s, rec.end_reason = "gone", now, reason
                self._log_acquisition(rec)
            elif rec.state == "pending":
                rec.state, rec.ended_s, rec.end_reason = "gone", now, "cancelled"
                self._log_acquisition(rec)
        self.finished_s = now if reason == "job_done" else math.nan
        self.books.progress.append(
            {
                "time_s": now,
                "work_done": self.done,
                "rate": 0.0,
                "n_reliable": 0,
                "n_transient": 0,
                "stage": self.stage,
                "migrations": self._migrations,
                "event": reason,
            }
        )
        self._finish.succeed()

    def _log_acquisition(self, rec: _Alloc) -> None:
        self.books.acquisitions.append(acquisition_row(rec.alloc.alloc_id, rec))


def _nodes(rec: _Alloc) -> list[str]:
    """Node ids of an allocation's instances (partition owners are nodes, not allocations)."""
    return [f"a{rec.alloc.alloc_id}n{i}" for i in range(rec.alloc.count)]
