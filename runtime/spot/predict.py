"""The simulator's prediction for a real run: ``sim.spot``'s engine replaying the same eviction schedule.

The spot simulator (``sim/spot/engine.py``) models eviction handling in cloud seconds: AgileML stalls
``eviction_stall_s`` (5 s) per eviction in stages 2/3 and, on an effective failure (the recovery plan of
``policies.agileml.plan_recovery`` says the flush does not fit in the warning), loses ``consistent_lag_s``
(10 s) of progress; the checkpoint baseline runs ``checkpoint_overhead`` (17%) slower, checkpoints every
interval, and on an eviction loses the progress since the last checkpoint plus ``restart_s`` (300 s).
Its rate is Σν / the AgileML performance model's slowdown for the stage and the R:T mix.

To predict a real run we run that engine itself (a small subclass that acquires one allocation per
process instead of asking BidBrain or Standard, and gives each eviction its own warning) on one market
per transient process whose price jumps above the bid at the eviction's warning time. Time compression:
``f = prediction.real_s_per_sim_h / 3600`` real seconds per simulated second. The real run's own
parameters — eviction and warning times, the EC's poll period, the checkpoint interval — are divided by
f into simulated time; the constants the real run measures instead (stall, restart, overhead, consistent
lag) keep the simulator's values in simulated seconds. Every simulated time is multiplied by f back into
real seconds. The work unit (ν·hour) is converted into clocks with one anchor: the simulator's rate with
every process up is matched to the real run's measured clock rate before the first warning. Everything
after that — rate after each eviction, stalls, lost work, restarts — is the simulator's prediction.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
from clustertwin.policies.agileml import StageThresholds
from clustertwin.policies.bidbrain.history import PriceSeries
from clustertwin.runtime.spot.driver import EvictionEvent
from clustertwin.sim.spot.billing import BillingModel
from clustertwin.sim.spot.engine import SpotConfig, SpotSim
from clustertwin.sim.spot.market import MarketReplay
from clustertwin.sim.spot.perf import DEFAULT_PERF

RELIABLE, TRANSIENT = "reliable", "transient"


class _ScheduleSim(SpotSim):
    """SpotSim with a fixed footprint (R reliable on demand, one spot allocation per transient process)
    and a per-eviction warning; everything else is the engine's own handling."""

    def __init__(
        self, config: SpotConfig, market: MarketReplay, warnings: dict[str, float], reliable: int
    ) -> None:
        super().__init__(config, market, market.markets, np.random.default_rng(0))
        self._base = config
        self._warnings = warnings
        self._reliable = reliable

    def _decide(self, why: str) -> None:
        if why != "start":
            return  # the real run replaces nobody
        if self.cfg.fault_tolerance == "checkpoint":
            self._request_on_demand(self._reliable)
        for m in self.markets:
            self._new_alloc(m, 1, 1.0)

    def _with_warning(self, rec) -> None:
        w = self._warnings.get(rec.alloc.market[1], self._base.billing.warning_s)
        self.cfg = replace(self._base, billing=replace(self._base.billing, warning_s=w))

    def _warn(self, rec) -> None:
        self._with_warning(rec)
        try:
            super()._warn(rec)
        finally:
            self.cfg = self._base

    def _evicted(self, rec, warned_s: float, price: float, was_working: bool) -> None:
        self._with_warning(rec)
        try:
            super()._evicted(rec, warned_s, price, was_working)
        finally:
            self.cfg = self._base


def simulate(scenario, events: list[EvictionEvent], part_bytes: float) -> SpotSim:
    """Run the engine on the scenario's schedule, in simulated seconds (see the module docstring)."""
    f = scenario.prediction.real_s_per_sim_h / 3600.0
    pr, a = scenario.prediction, scenario.agileml
    n_r, n_t = scenario.processes.reliable, scenario.processes.transient
    warn_at = {p: ev.warn_s / f for ev in events for p in ev.processes}
    warnings = {p: ev.warning_s / f for ev in events for p in ev.processes}
    series = {}
    for name in scenario.transient_names:
        if name in warn_at:
            series[(TRANSIENT, name)] = PriceSeries(
                np.array([0.0, max(warn_at[name], 1e-9)]), np.array([0.1, 10.0])
            )
        else:
            series[(TRANSIENT, name)] = PriceSeries(np.array([0.0]), np.array([0.1]))
    cfg = SpotConfig(
        acquisition="standard",
        fault_tolerance=scenario.fault_tolerance,
        billing=BillingModel("per_second", 0.0, hourly=False, refund_on_eviction=False, price_evictions=True),
        total_work=1e18,
        target_rate=float(n_r + n_t),
        max_rate=float(n_r + n_t),
        on_demand_prices={RELIABLE: 1.0, TRANSIENT: 1.0},
        work_rates={RELIABLE: 1.0, TRANSIENT: 1.0},
        reliable_type=RELIABLE,
        reliable_count=n_r,
        request_delay_s=0.0,
        boot_s=0.0,
        checkpoint_interval_s=scenario.checkpoint.interval_s / f,
        checkpoint_overhead=max(pr.checkpoint_overhead, 1e-12),  # 0 would switch the engine's checkpoints off
        restart_s=pr.restart_s,
        poll_s=a.poll_s / f,
        partition_mb=part_bytes / 1e6,
        nic_gbps=a.flush_bandwidth_mbps / 1e3,
        consistent_lag_s=pr.consistent_lag_s,
        eviction_stall_s=pr.eviction_stall_s,
        thresholds=StageThresholds(a.stage2_above, a.stage3_above),
        perf=DEFAULT_PERF,
        max_runtime_s=scenario.duration_s / f,
    )
    sim = _ScheduleSim(cfg, MarketReplay(series), warnings, n_r)
    sim.run()
    return sim


def prediction_tables(
    scenario, events: list[EvictionEvent], part_bytes: float, clocks_per_s: float
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """(per-eviction prediction, predicted progress curve, scalars), all in real seconds and clocks.

    ``clocks_per_s``: the real run's measured clock rate with every process up (the one anchor).
    """
    f = scenario.prediction.real_s_per_sim_h / 3600.0
    sim = simulate(scenario, events, part_bytes)
    progress = pd.DataFrame(sim.books.progress)
    # every process is ready at t = 0 (no request delay, no boot): the last row at t = 0 has them all
    rate0 = float(progress.loc[progress["time_s"] <= progress["time_s"].iloc[0], "rate"].iloc[-1])
    # work units per real second at the start = rate0 (per simulated hour) / real_s_per_sim_h
    k = clocks_per_s / (rate0 / scenario.prediction.real_s_per_sim_h) if rate0 > 0 else math.nan
    curve = pd.DataFrame(
        {
            "time_s": progress["time_s"].to_numpy(float) * f,
            "clock": progress["work_done"].to_numpy(float) * k,
            "clocks_per_s": progress["rate"].to_numpy(float) / scenario.prediction.real_s_per_sim_h * k,
            "stage": progress["stage"].astype("int64"),
            "event": progress["event"].astype(str),
        }
    )
    rows = []
    by_time = sorted(sim.books.evictions, key=lambda r: r["terminate_s"])
    for ev in events:
        mine = [r for r in by_time if abs(r["time_s"] * f - ev.warn_s) < 1e-6]
        lost = sum(r["lost_work"] for r in mine)
        kinds = sorted({r["recovery"] for r in mine})
        term = ev.kill_s / f
        after = progress[progress["time_s"] >= term - 1e-9]
        # the rate once this event's allocations are all gone (the last row at the termination time)
        at_term = after[after["time_s"] <= term + 1e-9]
        rate_after = float(at_term["rate"].iloc[-1]) if len(at_term) else math.nan
        if scenario.fault_tolerance == "checkpoint":
            stall = scenario.prediction.restart_s
        elif any(k_ in ("end_of_life_flush", "effective_failure") for k_ in kinds):
            stall = scenario.prediction.eviction_stall_s
        else:
            stall = 0.0
        redo = lost / rate_after * 3600.0 if rate_after > 0 else math.nan
        rows.append(
            {
                "event": ev.index,
                "recovery": " ".join(kinds),
                "stall_s": stall * f,
                "lost_clocks": lost * k,
                "redo_s": redo * f,
                "recover_s": (stall + redo) * f,
                "clocks_per_s_after": rate_after / scenario.prediction.real_s_per_sim_h * k,
            }
        )
    info = {
        "predicted_final_clock": float(sim.done * k),
        "predicted_lost_clocks": float(sim.lost * k),
        "sim_rate0_work_per_h": rate0,
        "clocks_per_work_unit": k,
        "time_compression_real_s_per_sim_s": f,
    }
    return pd.DataFrame(rows), curve, info
