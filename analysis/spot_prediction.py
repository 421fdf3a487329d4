"""The simulator's prediction of a real spot run: ``sim.spot``'s engine replaying the run's eviction
schedule, and the real run composed with it (``run_real``: run for real, then predict).

The prediction needs both executors — the runtime's measured clock rate anchors it — so it lives in the
analysis layer above them.

The spot simulator (``sim/spot/engine.py``) models eviction handling in cloud seconds, by the scenario's
fault-tolerance scheme: AgileML stalls ``agileml.eviction_stall_s`` (5 s) per eviction in stages 2/3 and,
on an effective failure (the recovery plan says the flush does not fit in the warning), loses
``agileml.consistent_lag_s`` (10 s) of progress; the checkpoint baseline runs ``checkpoint.overhead``
(17%) slower, checkpoints every interval, and on an eviction loses the progress since the last checkpoint
plus ``checkpoint.restart_s`` (300 s). Its rate is Σν / the AgileML performance model's slowdown for the
stage and the R:T mix.

To predict a real run we run that engine itself on one market per transient process whose price jumps
above the bid at the eviction's warning time, with a fixed footprint (:class:`FixedFootprint`: the real
run's processes, acquired once, never replaced) and each eviction's own warning (the engine's public
``warning_s`` hook). Time compression: ``f = real.real_s_per_sim_h / 3600`` real seconds per simulated
second. The real run's own parameters — eviction and warning times, the EC's poll period, the checkpoint
interval — are divided by f into simulated time; the constants the real run measures instead (stall,
restart, overhead, consistent lag) keep the simulator's values in simulated seconds. Every simulated time
is multiplied by f back into real seconds. The work unit (ν·hour) is converted into clocks with one
anchor: the simulator's rate with every process up is matched to the real run's measured clock rate
before the first warning. Everything after that — rate after each eviction, stalls, lost work, restarts —
is the simulator's prediction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from clustertwin.policies.bidbrain import SpotRequest
from clustertwin.policies.bidbrain.history import PriceSeries
from clustertwin.policies.spot import AcquisitionPolicy, Decision, DecisionPoint, FaultTolerance
from clustertwin.policies.spot.billing import BillingModel
from clustertwin.runtime.spot.driver import EvictionEvent, schedule
from clustertwin.scenarios.results import RunResult
from clustertwin.scenarios.spot_real_results import PREDICTED_EVICTION_COLUMNS, to_frame
from clustertwin.scenarios.spot_replay import MarketReplay
from clustertwin.scenarios.spot_schema import SpotScenario
from clustertwin.sim.spot.engine import SpotConfig, SpotSim
from clustertwin.sim.spot.perf import DEFAULT_PERF

RELIABLE, TRANSIENT = "reliable", "transient"


class FixedFootprint(AcquisitionPolicy):
    """The real run's processes as the engine's machines: ``reliable`` on demand (those the scheme does
    not hold itself) and one spot allocation per market (a transient process), all at the start; nobody
    is replaced (the base type renews nothing)."""

    def __init__(self, reliable: int, scheme: FaultTolerance) -> None:
        super().__init__()
        self.extra_reliable = reliable - scheme.reliable_count

    def on_demand_count(self, target_rate: float, rate: float) -> int:
        return self.extra_reliable

    def decide(self, point: DecisionPoint) -> Decision:
        if point.why != "start":
            return Decision()
        return Decision(requests=tuple(SpotRequest(v.market, 1, 1.0) for v in point.markets))


def simulate(scenario: SpotScenario, events: list[EvictionEvent], part_bytes: float) -> SpotSim:
    """Run the engine on the real run's schedule, in simulated seconds (see the module docstring)."""
    real = scenario.real
    assert real is not None
    f = real.real_s_per_sim_h / 3600.0
    n_r, n_t = real.processes.reliable, real.processes.transient
    warn_at = {p: ev.warn_s / f for ev in events for p in ev.processes}
    warnings = {p: ev.warning_s / f for ev in events for p in ev.processes}
    series = {}
    for name in real.transient_names:
        if name in warn_at:
            series[(TRANSIENT, name)] = PriceSeries(
                np.array([0.0, max(warn_at[name], 1e-9)]), np.array([0.1, 10.0])
            )
        else:
            series[(TRANSIENT, name)] = PriceSeries(np.array([0.0]), np.array([0.1]))
    scheme = scenario.fault_tolerance_scheme(
        reliable_count=n_r,
        poll_s=real.agileml.poll_s / f,
        checkpoint_interval_s=real.checkpoint.interval_s / f,
    )
    # An overhead of 0 would switch the engine's checkpoints off; the real run checkpoints regardless.
    overhead = max(scheme.settings.checkpoint_overhead, 1e-12)
    scheme = type(scheme)(replace(scheme.settings, checkpoint_overhead=overhead))
    cfg = SpotConfig(
        acquisition=FixedFootprint(n_r, scheme),
        fault_tolerance=scheme,
        billing=BillingModel("per_second", 0.0, hourly=False, refund_on_eviction=False, price_evictions=True),
        total_work=1e18,
        target_rate=float(n_r + n_t),
        max_rate=float(n_r + n_t),
        on_demand_prices={RELIABLE: 1.0, TRANSIENT: 1.0},
        work_rates={RELIABLE: 1.0, TRANSIENT: 1.0},
        reliable_type=RELIABLE,
        reference_type=RELIABLE,
        request_delay_s=0.0,
        boot_s=0.0,
        partition_mb=part_bytes / 1e6,
        nic_gbps=real.agileml.flush_bandwidth_mbps / 1e3,
        perf=DEFAULT_PERF,
        max_runtime_s=real.duration_s / f,
    )
    market = MarketReplay(series)
    sim = SpotSim(
        cfg, market, market.markets, np.random.default_rng(0), warning_s=lambda m: warnings.get(m[1], 0.0)
    )
    sim.run()
    return sim


def prediction_tables(
    scenario: SpotScenario, events: list[EvictionEvent], part_bytes: float, clocks_per_s: float
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, float]]:
    """(per-eviction prediction, predicted progress curve, scalars), all in real seconds and clocks.

    ``clocks_per_s``: the real run's measured clock rate with every process up (the one anchor).
    """
    real = scenario.real
    assert real is not None
    f = real.real_s_per_sim_h / 3600.0
    sim = simulate(scenario, events, part_bytes)
    progress = pd.DataFrame(sim.books.progress)
    # every process is ready at t = 0 (no request delay, no boot): the last row at t = 0 has them all
    rate0 = float(progress.loc[progress["time_s"] <= progress["time_s"].iloc[0], "rate"].iloc[-1])
    # work units per real second at the start = rate0 (per simulated hour) / real_s_per_sim_h
    k = clocks_per_s / (rate0 / real.real_s_per_sim_h) if rate0 > 0 else math.nan
    curve = pd.DataFrame(
        {
            "time_s": progress["time_s"].to_numpy(float) * f,
            "clock": progress["work_done"].to_numpy(float) * k,
            "clocks_per_s": progress["rate"].to_numpy(float) / real.real_s_per_sim_h * k,
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
        stall = _stall(sim.ft, kinds)
        redo = lost / rate_after * 3600.0 if rate_after > 0 else math.nan
        rows.append(
            {
                "event": ev.index,
                "recovery": " ".join(kinds),
                "stall_s": stall * f,
                "lost_clocks": lost * k,
                "redo_s": redo * f,
                "recover_s": (stall + redo) * f,
                "clocks_per_s_after": rate_after / real.real_s_per_sim_h * k,
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


def _stall(scheme: FaultTolerance, recoveries: list[str]) -> float:
    """The stall the scheme charged for an event whose evictions were recovered as ``recoveries``."""
    if scheme.checkpoints:
        return scheme.settings.restart_s
    if any(r in ("end_of_life_flush", "effective_failure") for r in recoveries):
        return scheme.settings.eviction_stall_s
    return 0.0


def add_prediction(scenario: SpotScenario, result: RunResult) -> RunResult:
    """The real run's result with the simulator's prediction of it: the ``prediction`` table, the
    ``pred_*`` columns of ``evictions`` and the prediction's scalars in ``info``."""
    real = scenario.real
    assert real is not None
    events = schedule(scenario)
    part_bytes = 8.0 * math.ceil(real.job.features * real.job.classes / result.info["partitions"])
    pred, curve, pinfo = prediction_tables(scenario, events, part_bytes, result.info["clocks_per_s_initial"])
    by_event = {int(r["event"]): r for r in pred.to_dict("records")}
    rows = []
    for row in result.tables["evictions"].to_dict("records"):
        p = by_event.get(int(row["event"]))
        predicted = {
            "pred_recovery": p["recovery"] if p else "",
            "pred_stall_s": p["stall_s"] if p else math.nan,
            "pred_lost_clocks": p["lost_clocks"] if p else math.nan,
            "pred_recover_s": p["recover_s"] if p else math.nan,
        }
        assert set(predicted) == set(PREDICTED_EVICTION_COLUMNS)
        rows.append({**row, **predicted})
    tables = {
        **result.tables,
        "evictions": to_frame("evictions", rows),
        "prediction": to_frame("prediction", curve.to_dict("records")),
    }
    predicted_result = RunResult(tables=tables, info={**result.info, **pinfo})
    predicted_result.final_params = getattr(result, "final_params", None)  # type: ignore[attr-defined]
    return predicted_result


def run_real(
    scenario: SpotScenario,
    progress: Callable[[float, str], None] | None = None,
    workdir: Path | None = None,
) -> RunResult:
    """Run a spot scenario's ``real:`` section for real (``runtime``), then predict it (the simulator)."""
    import tempfile

    from clustertwin.runtime.spot import run_real as run_processes

    assert scenario.real is not None
    if scenario.real.market:
        from clustertwin.analysis.spot_market_real import run_market_real

        if workdir is not None:
            return run_market_real(scenario, workdir, progress)
        with tempfile.TemporaryDirectory(prefix="clustertwin-spot-") as tmp:
            return run_market_real(scenario, Path(tmp), progress)

    if workdir is not None:
        return add_prediction(scenario, run_processes(scenario, workdir, progress))
    with tempfile.TemporaryDirectory(prefix="clustertwin-spot-") as tmp:
        return add_prediction(scenario, run_processes(scenario, Path(tmp), progress))
