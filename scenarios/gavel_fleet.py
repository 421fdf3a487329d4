"""Gavel on a cloud fleet: on-demand and spot instances over a replayed price trace ([Narayanan] §6,
[Proteus]).

[Narayanan] §6 gives the market model Gavel's cost policies face: AWS spot prices float below the
on-demand cap, an eviction comes with a 2-minute warning, and a price change triggers a recompute of the
allocation. [Proteus] §2–§3 (notes "markets, billing") gives the bid rules and billing schemes, which live
below both executors and are reused here: :class:`scenarios.spot_replay.MarketReplay` for prices,
:func:`policies.spot.billing.lifetime_bill` for charges.

The model, and the choices the papers leave open:

* A worker is one instance (a Gavel server of ``gpus_per_server`` GPUs). On-demand workers are up for
  the whole run. A spot worker is granted when the price is at most its bid, is warned when the price
  rises above the bid (a price change), and is terminated ``warning_s`` later; it is re-requested as soon
  as the price is back at or below the bid and granted ``request_delay_s`` later if the bid still holds
  (else it waits for the next drop), then boots for ``boot_s`` (billed, not usable). The whole fleet is up
  at t = 0 (spot workers whose bid holds then), so fleets are compared from the same start.
* Which workers are alive depends only on the market, never on the jobs, so each spot worker's leases
  are computed up front (:func:`spot_leases`, a pure function of the price path and bid).
* The scheduler plans per worker type with counts, so each Gavel type with spot workers becomes two
  scheduler types, ``v100`` (on demand) and ``v100:spot``, with the same throughputs and their own price:
  the policy sees the on-demand price for one and the current spot price for the other, and only the
  workers usable now (warned workers are not). A membership change forces an allocation reset; a price
  change triggers one as soon as Gavel's rate limit allows ([Narayanan] §6.4, "[code] a price change
  triggers a recompute").
* Checkpoints: Gavel checkpoints at round ends, and we do not checkpoint on the warning, so a job on a
  worker terminated mid-round loses the round's progress (the upper bound; a warning-time checkpoint
  would lose almost nothing with 2-minute warnings and 6-minute rounds). It gets no credit for the round
  and is rescheduled by the policy at the next round.
* Billing: every worker is billed while it holds an instance (granted to terminated, or to the end of
  the run), busy or idle — a static fleet, not Gavel's pay-per-use ``Σ price × GPU-time``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.policies.bidbrain.history import Market, PriceSeries
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.gavel.scheduler import GavelScheduler, RoundPlan
from clustertwin.policies.spot.billing import BillingModel, billing_model, lifetime_bill
from clustertwin.scenarios.gavel_market_schema import GavelMarket
from clustertwin.scenarios.spot_replay import MarketReplay, check_coverage, series_from_table
from clustertwin.traces.on_demand import BUNDLED_ON_DEMAND, InstanceType, load_on_demand
from clustertwin.traces.spot_prices import load_bundled_or_path, select

from clustertwin.errors import InputError

INF = math.inf
SPOT_SUFFIX = ":spot"


@dataclass(frozen=True)
class Lease:
    """One tenure of an instance: billed from ``granted_s``, usable in ``[ready_s, warned_s)``, gone at
    ``ended_s`` (``inf``: never evicted)."""

    granted_s: float
    ready_s: float
    warned_s: float = INF
    ended_s: float = INF


def _next_time(series: PriceSeries, after: float, above: bool, bid: float, inclusive: bool) -> float:
    """First time ≥ ``after`` (or > when not ``inclusive``) at which the price is above (or at most) the
    bid; ``inf`` if it never is again (the last price holds forever)."""
    if (series.at(after) > bid) == above and inclusive:
        return after
    i = int(np.searchsorted(series.times_s, after, side="right"))
    prices = series.prices[i:]
    hits = np.flatnonzero(prices > bid if above else prices <= bid)
    return float(series.times_s[i + hits[0]]) if hits.size else INF


def _grant(
    series: PriceSeries,
    bid: float,
    after: float,
    inclusive: bool,
    request_delay_s: float,
    boot_s: float,
    horizon_s: float,
) -> tuple[float, float]:
    """(granted, ready) of the first request made once the price is at most the bid after ``after`` and
    still at most the bid when it is due ``request_delay_s`` later; ``(inf, inf)`` if none before the
    horizon (a request due at a higher price fails and waits for the next drop)."""
    request = _next_time(series, after, False, bid, inclusive) if math.isfinite(after) else INF
    while request < horizon_s:
        due = request + request_delay_s
        if series.at(due) <= bid:
            return due, due + boot_s
        request = _next_time(series, due, False, bid, inclusive=False)
    return INF, INF


def spot_leases(
    series: PriceSeries,
    bid: float,
    *,
    warning_s: float,
    request_delay_s: float,
    boot_s: float,
    start_s: float = 0.0,
    horizon_s: float = INF,
) -> list[Lease]:
    """The leases of one spot worker from ``start_s`` until ``horizon_s`` ([Proteus] §2: evicted when the
    price exceeds the bid, after a warning; here re-requested whenever the price is back under the bid).

    At ``start_s`` the worker is already up if the bid holds (the fleet exists when the replay starts).
    """
    leases: list[Lease] = []
    if series.at(start_s) <= bid:
        granted, ready = start_s, start_s
    else:
        granted, ready = _grant(series, bid, start_s, False, request_delay_s, boot_s, horizon_s)
    while granted < horizon_s:
        warned = _next_time(series, granted, True, bid, inclusive=False)
        ended = warned + warning_s
        leases.append(Lease(granted, ready, warned, ended))
        granted, ready = _grant(series, bid, ended, True, request_delay_s, boot_s, horizon_s)
    return leases


@dataclass(frozen=True)
class Worker:
    """One instance of the fleet and its leases (on-demand: one lease over the whole run)."""

    worker_id: int
    name: str  # e.g. v100/spot/3
    worker_type: str  # the Gavel worker type
    spot: bool
    instance_type: str
    zone: str
    gpus: int
    bid: float  # $/instance-hour (inf: on demand)
    leases: tuple[Lease, ...]

    def lease_at(self, t: float) -> Lease | None:
        """The lease usable at ``t`` (ready ≤ t < warned), if any."""
        for lease in self.leases:
            if lease.ready_s <= t < lease.warned_s:
                return lease
        return None


class MarketHook:
    """What an executor of Gavel (the simulator, ``sim.gavel.engine``, or the real runtime,
    ``runtime.gavel.run``) asks of the market each round: both hold the same fleet and bill it here.

    Scheduler types are the split layout's: index ``s`` is Gavel type ``base[s]``, spot iff ``spot[s]``.
    Scheduler GPU ids of type ``s`` are ``0 .. k·n − 1`` over its ``n`` usable workers in ``slots[s]``
    order; they are renumbered when membership changes, and the mechanism's lease memory is translated
    (or revoked for a job whose worker is gone) so that a renewed lease stays on the same instance.
    """

    def __init__(
        self,
        layout: ClusterLayout,
        base: tuple[str, ...],
        spot: tuple[bool, ...],
        workers: list[Worker],
        replay: MarketReplay,
        markets: tuple[Market | None, ...],
        on_demand_usd: tuple[float, ...],
        billing: BillingModel,
    ) -> None:
        self.layout = layout
        self.base = base
        self.spot = spot
        self.workers = workers
        self.replay = replay
        self.markets = markets  # spot market of each scheduler type (None: on demand)
        self.on_demand_usd = on_demand_usd  # $/instance-hour of each scheduler type's instance
        self.billing = billing
        self.of_type = [[w.worker_id for w in workers if self._type_of(w) == s] for s in range(len(base))]
        # The scheduler starts with the whole fleet (the layout); the first sync drops any worker whose
        # bid does not hold at t = 0, so an all-on-demand fleet never looks changed.
        self.slots: list[list[int]] = [list(ids) for ids in self.of_type]
        self.preemptions: list[dict] = []
        # Every time the market can change what the scheduler sees: lease edges and price changes.
        times = {t for w in workers for lease in w.leases for t in (lease.ready_s, lease.warned_s)}
        for m in {m for m in markets if m is not None}:
            times.update(t for t, _ in replay.changes(m, 0.0, float(replay.series[m].times_s[-1])))
        self.change_times = np.array(sorted(t for t in times if math.isfinite(t) and t > 0))
        # Set by build_market: (max_stale_s, where, origin) for the end-of-run check that the replay did
        # not run past a market's last price row (None: no check, as for hand-built hooks in tests).
        self.coverage: tuple[float, str, pd.Timestamp] | None = None

    def _type_of(self, w: Worker) -> int:
        for s, (b, sp) in enumerate(zip(self.base, self.spot, strict=True)):
            if b == w.worker_type and sp == w.spot:
                return s
        raise ValueError(f"no scheduler type for {w.name}")

    # --- the scheduler's view ------------------------------------------------------------------------

    def current_prices(self, now: float) -> np.ndarray:
        """$/GPU-hour per scheduler type: the spot price now for spot types, on demand otherwise."""
        out = []
        for s, m in enumerate(self.markets):
            usd = self.on_demand_usd[s] if m is None else self.replay.price(m, now)
            out.append(usd / self.layout.gpus_per_server[s])
        return np.array(out)

    def sync(self, sched: GavelScheduler, events: list[tuple], now: float) -> bool:
        """Show the scheduler the workers usable now and the prices now, and reset the allocation when
        it says the change calls for one (``GavelScheduler.cluster_reset_due``); ``events`` gets the
        executor's event rows. Returns whether the usable workers changed."""
        slots = [[i for i in ids if self.workers[i].lease_at(now) is not None] for ids in self.of_type]
        moved = slots != self.slots
        if moved:
            sched.resize(
                tuple(len(ids) * k for ids, k in zip(slots, self.layout.gpus_per_server, strict=True)),
                self._gpu_maps(slots),
            )
            self.slots = slots
            events.append((now, "market", -1, "workers " + self._counts()))
        prices = self.current_prices(now)
        if sched.set_prices(prices, now):
            events.append((now, "market", -1, "prices " + _fmt(prices)))
        if sched.cluster_reset_due(now, moved):
            sched.reset(now)
            events.append((now, "reset", -1, f"{len(sched.jobs)} jobs (market)"))
        return moved

    def _counts(self) -> str:
        names = [b + (SPOT_SUFFIX if s else "") for b, s in zip(self.base, self.spot, strict=True)]
        return ", ".join(f"{n}={len(ids)}" for n, ids in zip(names, self.slots, strict=True))

    def _gpu_maps(self, slots: list[list[int]]) -> list[dict[int, int]]:
        """Per type, old GPU index → new GPU index for every GPU whose worker is still usable."""
        maps = []
        for s, (old, new) in enumerate(zip(self.slots, slots, strict=True)):
            k = self.layout.gpus_per_server[s]
            position = {w: i for i, w in enumerate(new)}
            maps.append(
                {i * k + g: position[w] * k + g for i, w in enumerate(old) if w in position for g in range(k)}
            )
        return maps

    def next_change_s(self, now: float) -> float | None:
        """The next time after ``now`` at which workers or prices change (None: never)."""
        i = int(np.searchsorted(self.change_times, now, side="right"))
        return float(self.change_times[i]) if i < len(self.change_times) else None

    # --- rounds --------------------------------------------------------------------------------------

    def workers_of(self, plan: RoundPlan, c: int) -> list[int]:
        """Worker ids holding combination ``c`` of the plan (placed on the current numbering)."""
        s = int(plan.worker_types[c])
        k = self.layout.gpus_per_server[s]
        return sorted({self.slots[s][g // k] for g in plan.gpus[c]})

    def cut_times(self, plan: RoundPlan, start: float, length: float) -> np.ndarray:
        """Per combination: when a worker it runs on is terminated during the round (``inf``: never)."""
        cut = np.full(len(plan), INF)
        for c in range(len(plan)):
            for w in self.workers_of(plan, c):
                lease = self.workers[w].lease_at(start)
                if lease is not None and lease.ended_s < start + length:
                    cut[c] = min(cut[c], lease.ended_s)
        return cut

    def record_preemption(
        self, time_s: float, job_id: int, workers: list[int], lost_steps: float, lost_gpu_s: float
    ) -> None:
        self.preemptions.append(
            {
                "time_s": time_s,
                "job_id": job_id,
                "workers": ",".join(self.workers[w].name for w in workers),
                "lost_steps": lost_steps,
                "lost_gpu_h": lost_gpu_s / 3600.0,
            }
        )

    # --- results -------------------------------------------------------------------------------------

    def tables(self, end_s: float) -> dict[str, pd.DataFrame]:
        """``billing`` (one row per lease, billed up to ``end_s``), ``evictions`` and ``preemptions``."""
        if self.coverage is not None:
            max_stale_s, where, origin = self.coverage
            used = {m: self.replay.series[m] for m in self.markets if m is not None}
            check_coverage(used, 0.0, end_s, max_stale_s, where, origin)
        bills, evictions = [], []
        for w in self.workers:
            market = (w.instance_type, w.zone)
            for lease in w.leases:
                if lease.granted_s >= end_s:
                    continue
                stop = min(lease.ended_s, end_s)
                evicted = lease.ended_s <= end_s
                if w.spot:
                    items = lifetime_bill(
                        self.billing,
                        lease.granted_s,
                        stop,
                        evicted=evicted,
                        on_demand=False,
                        price_at=functools.partial(self.replay.price, market),
                        integral_usd=functools.partial(self.replay.integral_usd, market),
                    )
                else:
                    price = self.on_demand_usd[self._type_of(w)]
                    items = lifetime_bill(
                        self.billing,
                        lease.granted_s,
                        stop,
                        evicted=False,
                        on_demand=True,
                        price_at=lambda _t, p=price: p,
                        integral_usd=lambda a, b, p=price: p * (b - a) / 3600.0,
                    )
                bills.append(
                    {
                        "worker": w.name,
                        "worker_type": w.worker_type,
                        "capacity": "spot" if w.spot else "on_demand",
                        "instance_type": w.instance_type,
                        "zone": w.zone if w.spot else "",
                        "start_s": lease.granted_s,
                        "end_s": stop,
                        "end_reason": "evicted" if evicted else "run_end",
                        "cost_usd": sum(amount for _, _, amount in items),
                    }
                )
                if evicted:
                    evictions.append(
                        {
                            "worker": w.name,
                            "worker_type": w.worker_type,
                            "warned_s": lease.warned_s,
                            "terminated_s": lease.ended_s,
                            "price": self.replay.price(market, lease.warned_s),
                            "bid": w.bid,
                        }
                    )
        return {
            "billing": _frame(bills, BILLING_COLUMNS),
            "evictions": _frame(evictions, EVICTION_COLUMNS),
            "preemptions": _frame(self.preemptions, PREEMPTION_COLUMNS),
        }

    def held_cost(self, rounds: pd.DataFrame) -> np.ndarray:
        """$ of the GPUs each rounds row held over its interval at the prices its workers are billed at
        (pay-per-use, Gavel's ``Σ price × GPU-time``); the second job of a shared pair adds nothing."""
        names = rounds["worker_type"].astype(str).tolist()
        index = {
            b + (SPOT_SUFFIX if s else ""): i
            for i, (b, s) in enumerate(zip(self.base, self.spot, strict=True))
        }
        owned = ((rounds["shared_with"] < 0) | (rounds["job_id"] < rounds["shared_with"])).to_numpy()
        cost = np.zeros(len(rounds))
        starts, ends = rounds["start_s"].to_numpy(), rounds["end_s"].to_numpy()
        gpus = rounds["num_gpus"].to_numpy()
        for i, name in enumerate(names):
            if not owned[i]:
                continue
            s = index[name]
            m = self.markets[s]
            usd = (
                self.on_demand_usd[s] * (ends[i] - starts[i]) / 3600.0
                if m is None
                else self.replay.integral_usd(m, starts[i], ends[i])
            )
            cost[i] = gpus[i] * usd / self.layout.gpus_per_server[s]
        return cost

    def base_types(self, scheduler_types: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """(Gavel type, spot?) of scheduler type names, for the rounds table."""
        names = scheduler_types.astype(str)
        spot = names.str.endswith(SPOT_SUFFIX).to_numpy(dtype=bool)
        base = names.str.removesuffix(SPOT_SUFFIX).to_numpy(dtype=object)
        return base, spot


BILLING_COLUMNS = {
    "worker": str,
    "worker_type": str,
    "capacity": str,  # spot | on_demand
    "instance_type": str,
    "zone": str,
    "start_s": float,  # granted (billed from here; usable after boot)
    "end_s": float,  # terminated, or the end of the run
    "end_reason": str,  # evicted | run_end
    "cost_usd": float,
}
EVICTION_COLUMNS = {
    "worker": str,
    "worker_type": str,
    "warned_s": float,
    "terminated_s": float,
    "price": float,  # $/instance-hour that exceeded the bid
    "bid": float,
}
PREEMPTION_COLUMNS = {
    "time_s": float,
    "job_id": np.int64,
    "workers": str,
    "lost_steps": float,  # progress since the job's last checkpoint (the round's start)
    "lost_gpu_h": float,  # GPU time spent on that lost progress
}


def _frame(rows: list[dict], columns: dict[str, type]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(columns))
    return frame.astype(columns)


def _fmt(prices: np.ndarray) -> str:
    return " ".join(f"{p:.4f}" for p in prices)


# --- building from a scenario ------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _trace(name: str) -> pd.DataFrame:
    return load_bundled_or_path(name)


@functools.lru_cache(maxsize=4)
def _on_demand(path: str) -> dict[str, InstanceType]:
    return load_on_demand(BUNDLED_ON_DEMAND if path == "bundled" else Path(path))


@dataclass(frozen=True)
class SplitLayout:
    """The scheduler's layout (each Gavel type with spot workers split in two) and how it maps back."""

    layout: ClusterLayout
    base_index: np.ndarray  # (k',) index of each scheduler type's Gavel type in the base layout
    base: tuple[str, ...]
    spot: tuple[bool, ...]


def split_layout(base: ClusterLayout, spec: GavelMarket) -> SplitLayout:
    """On-demand first, then spot, for each Gavel type in the base order (fastest first); a fleet with no
    spot workers gives back the base layout itself, so an all-on-demand run is the plain simulation."""
    names, gpus, per_server, index, kinds, spot = [], [], [], [], [], []
    for j, t in enumerate(base.worker_types):
        k = base.gpus_per_server[j]
        fleet = spec.types[t]
        for is_spot, count in ((False, fleet.on_demand), (True, fleet.spot)):
            if count:
                names.append(t + (SPOT_SUFFIX if is_spot else ""))
                gpus.append(count * k)
                per_server.append(k)
                index.append(j)
                kinds.append(t)
                spot.append(is_spot)
    layout = ClusterLayout(tuple(names), tuple(gpus), tuple(per_server))
    return SplitLayout(layout, np.array(index, dtype=np.int64), tuple(kinds), tuple(spot))


def build_market(source: str, spec: GavelMarket, base: ClusterLayout) -> tuple[MarketHook, SplitLayout]:
    """The market hook and split layout for a scenario's ``market`` section; bad values raise
    :class:`InputError` naming the field (``market.types.v100.instance_type``, ``market.start``, …)."""
    field = f"{source}: field market"
    on_demand = _on_demand(spec.on_demand_prices)
    table = _trace(spec.trace)
    for j, t in enumerate(base.worker_types):
        fleet = spec.types[t]
        if fleet.instance_type not in on_demand:
            raise InputError(
                f"{field}.types.{t}.instance_type",
                f"{fleet.instance_type!r} is not in the on-demand price table "
                f"(it has {', '.join(sorted(on_demand))})",
            )
        gpus = on_demand[fleet.instance_type].gpus
        if gpus != base.gpus_per_server[j]:
            raise InputError(
                f"{field}.types.{t}.instance_type",
                f"{fleet.instance_type} has {gpus} GPU(s) but cluster.gpus_per_server for {t} is "
                f"{base.gpus_per_server[j]}: a worker is one instance, so they must match",
            )
        if fleet.spot and select(table, [fleet.instance_type], [fleet.zone]).empty:
            have = sorted(set(select(table, [fleet.instance_type])["zone"]))
            what = "zone" if have else "instance_type"
            raise InputError(
                f"{field}.types.{t}.{what}",
                f"the price trace has no spot prices for {fleet.instance_type} in {fleet.zone}"
                + (f" (it has zones {', '.join(have)})" if have else ""),
            )
    spot_types = [t for t in base.worker_types if spec.types[t].spot]
    regions = {
        t: sorted(set(select(table, [spec.types[t].instance_type], [spec.types[t].zone])["region"]))
        for t in spot_types
    }
    if len({r for rs in regions.values() for r in rs}) > 1:
        t0 = spot_types[0]
        t = next(t for t in spot_types if regions[t] != regions[t0])
        raise InputError(
            f"{field}.types.{t}.zone",
            f"{spec.types[t].zone} is in {', '.join(regions[t])} but {t0}'s zone {spec.types[t0].zone} is in "
            f"{', '.join(regions[t0])}: one fleet lives in one region (one on-demand price table)",
        )
    try:
        start = pd.Timestamp(spec.start)
    except ValueError:
        raise InputError(f"{field}.start", f"not an ISO time: {spec.start!r}") from None
    start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
    spot_markets = sorted({(f.instance_type, f.zone) for f in spec.types.values() if f.spot})
    used = (
        select(table, [m[0] for m in spot_markets], [m[1] for m in spot_markets]) if spot_markets else table
    )
    first = max(
        (used[(used.instance_type == i) & (used.zone == z)]["timestamp"].min() for i, z in spot_markets),
        default=table["timestamp"].min(),
    )
    last = table["timestamp"].max()
    if not first <= start <= last:
        raise InputError(
            f"{field}.start",
            f"{spec.start} is outside the price trace: its markets have prices from {first.isoformat()} "
            f"to {last.isoformat()}",
        )
    replay = MarketReplay(series_from_table(used, start)) if spot_markets else MarketReplay({})
    split = split_layout(base, spec)
    model = billing_model(spec.billing, spec.warning_s)
    workers: list[Worker] = []
    for t in base.worker_types:
        fleet = spec.types[t]
        itype = on_demand[fleet.instance_type]
        bid = fleet.bid_usd if fleet.bid_usd is not None else fleet.bid_multiple * itype.on_demand_price
        for i in range(fleet.on_demand):
            lease = Lease(0.0, 0.0)
            workers.append(
                Worker(
                    len(workers), f"{t}/od/{i}", t, False, itype.name, fleet.zone, itype.gpus, INF, (lease,)
                )
            )
        for i in range(fleet.spot):
            leases = spot_leases(
                replay.series[(itype.name, fleet.zone)],
                bid,
                warning_s=spec.warning_s,
                request_delay_s=spec.request_delay_s,
                boot_s=spec.boot_s,
            )
            workers.append(
                Worker(
                    len(workers),
                    f"{t}/spot/{i}",
                    t,
                    True,
                    itype.name,
                    fleet.zone,
                    itype.gpus,
                    bid,
                    tuple(leases),
                )
            )
    markets = tuple(
        (spec.types[b].instance_type, spec.types[b].zone) if s else None
        for b, s in zip(split.base, split.spot, strict=True)
    )
    on_demand_usd = tuple(on_demand[spec.types[b].instance_type].on_demand_price for b in split.base)
    hook = MarketHook(split.layout, split.base, split.spot, workers, replay, markets, on_demand_usd, model)
    hook.coverage = (spec.max_stale_h * 3600.0, f"{field}.max_stale_h", start)
    return hook, split


def expand_columns(values: np.ndarray, split: SplitLayout) -> np.ndarray:
    """A per-Gavel-type row (or the last axis of an array) as a per-scheduler-type one."""
    return np.asarray(values)[..., split.base_index]
