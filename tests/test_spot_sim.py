"""Spot simulator: invariants under random markets (hypothesis), and end-to-end runs of the scenario."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from clustertwin.analysis.spot_metrics import spot_metrics
from clustertwin.policies.bidbrain import BidBrainParams, PriceSeries, estimate_eviction_table
from clustertwin.policies.spot import ACQUISITION, FAULT_TOLERANCE, AcquisitionInputs, FaultToleranceSettings
from clustertwin.policies.spot.billing import billing_model
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.results import RunResult
from clustertwin.scenarios.spot_replay import MarketReplay
from clustertwin.scenarios.spot_results import check_spot_tables, to_frame
from clustertwin.scenarios.spot_schema import DEFAULT_SPOT_SCENARIO
from clustertwin.sim.spot import run
from clustertwin.sim.spot.engine import SpotConfig, SpotSim
from clustertwin.sim.spot.perf import DEFAULT_PERF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

A = ("p2.xlarge", "us-east-1a")
B = ("p3.2xlarge", "us-east-1b")
OD = {"p2.xlarge": 0.9, "p3.2xlarge": 3.06}
NU = {"p2.xlarge": 4.0, "p3.2xlarge": 8.0}

# A price path: (gap to the next change in s, price as a fraction of on demand). Fractions above 1
# are spikes that evict even an on-demand bid.
path = st.lists(st.tuples(st.floats(30.0, 5400.0), st.floats(0.2, 1.6)), min_size=1, max_size=25)


def _series(steps: list[tuple[float, float]], od: float) -> PriceSeries:
    # A flat day of history before t=0 (the β table's training window), then the drawn changes. Flat
    # history makes BidBrain expect no evictions, so it bids close to the price: the hardest case.
    times = np.r_[-86400.0, np.cumsum([gap for gap, _ in steps])]
    prices = np.array([0.3 * od] + [frac * od for _, frac in steps])
    return PriceSeries(times, prices)


def _simulate(acq, ft, billing, pa, pb, hours, seed=0, warning_s=None) -> tuple[SpotSim, RunResult]:
    series = {A: _series(pa, OD["p2.xlarge"]), B: _series(pb, OD["p3.2xlarge"])}
    ref = 8 * NU["p2.xlarge"]
    inputs = AcquisitionInputs(bidbrain=BidBrainParams(counts=(1, 4, 16)))
    if acq == "bidbrain":
        table = estimate_eviction_table(series, (-86400.0, 0.0), deltas=(0.001, 0.05, 0.4), step_s=600.0)
        inputs = replace(inputs, eviction_table=lambda: table)
    cfg = SpotConfig(
        acquisition=ACQUISITION.get(acq)(inputs),
        fault_tolerance=FAULT_TOLERANCE.get(ft)(
            FaultToleranceSettings(reliable_count=1, checkpoint_interval_s=1200.0)
        ),
        billing=billing_model(billing, warning_s),
        total_work=ref * hours,
        target_rate=ref,
        max_rate=3 * ref,
        on_demand_prices=OD,
        work_rates=NU,
        reliable_type="p2.xlarge",
        reference_type="p2.xlarge",
        perf=DEFAULT_PERF,
        preemption_rate_per_s=1 / 3600.0,
        max_runtime_s=40 * 3600.0,
    )
    sim = SpotSim(cfg, MarketReplay(series), [A, B], np.random.default_rng(seed))
    sim.run()
    books = sim.books
    tables = {
        name: to_frame(name, getattr(books, name))
        for name in ("acquisitions", "evictions", "bills", "progress", "usage")
    }
    info = {
        "total_work": cfg.total_work,
        "reference_rate": ref,
        "reference_on_demand_usd_per_h": 8 * OD["p2.xlarge"],
        "completed": int(not math.isnan(sim.finished_s)),
        "runtime_s": sim.finished_s,
    }
    return sim, RunResult(tables, info)


configs = st.sampled_from(
    [
        ("bidbrain", "agileml", "hourly_refund"),
        ("bidbrain", "checkpoint", "hourly_refund"),
        ("standard", "checkpoint", "hourly_refund"),
        ("just_above", "checkpoint", "hourly_refund"),
        ("standard", "agileml", "per_second"),
        ("standard", "checkpoint", "fixed_preemptible"),
        ("on_demand", "checkpoint", "hourly_refund"),
    ]
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, path, path, st.floats(0.5, 6.0))
def test_invariants_under_random_markets(config, pa, pb, hours) -> None:
    acq, ft, billing = config
    sim, result = _simulate(acq, ft, billing, pa, pb, hours)
    check_spot_tables(result)
    acq_t, bills, ev = result.tables["acquisitions"], result.tables["bills"], result.tables["evictions"]

    # Costs are never negative: not in total, not per allocation (a refund or prorate never exceeds
    # what was charged for that hour).
    assert bills["amount_usd"].sum() >= -1e-9
    assert (bills.groupby("alloc_id")["amount_usd"].sum() >= -1e-9).all()
    assert (bills.groupby(["alloc_id", "hour_start_s"])["amount_usd"].sum() >= -1e-9).all()

    # No instance is billed after it is gone, nor before it was granted: every money movement of an
    # allocation lies in [granted, ended], every charged hour starts while it is held, and a never-granted
    # request costs nothing.
    life = bills.merge(acq_t[["alloc_id", "granted_s", "ended_s"]], on="alloc_id", how="left")
    assert life["granted_s"].notna().all()
    assert (life["time_s"] >= life["granted_s"] - 1e-9).all()
    assert (life["time_s"] <= life["ended_s"] + 1e-9).all()
    charged = life[life["kind"] == "charge"]
    assert (charged["hour_start_s"] < charged["ended_s"]).all()
    assert (charged["hour_start_s"] >= charged["granted_s"] - 1e-9).all()
    assert (acq_t["ended_s"] <= sim.env.now + 1e-9).all()

    # Capacity is never exceeded: at every request, what is held or pending stays within the cap.
    cap = sim.cfg.max_rate if acq == "bidbrain" else sim.cfg.target_rate + sim.ft.reliable_count * 4.0
    nu = acq_t["count"] * acq_t["instance_type"].map(NU)
    for t in acq_t["requested_s"]:
        held = nu[(acq_t["requested_s"] <= t) & (acq_t["ended_s"] > t)].sum()
        assert held <= cap + 1e-9

    # Under the refund model an evicted allocation pays nothing for the hour it was evicted in.
    if billing == "hourly_refund":
        for e in ev.itertuples():
            mine = bills[bills["alloc_id"] == e.alloc_id]
            hour = mine[mine["hour_start_s"] <= e.terminate_s]["hour_start_s"].max()
            assert abs(mine[mine["hour_start_s"] == hour]["amount_usd"].sum()) < 1e-9
            assert (mine["kind"] == "refund").sum() == 1

    # Work is conserved: done = ∫rate − Σ lost; nothing beyond the last consistent state is lost,
    # nothing is counted twice, and a finished job did exactly its work.
    assert sim.done == pytest.approx(sim.integrated - sim.lost, abs=1e-6)
    assert sim.lost == pytest.approx(ev["lost_work"].sum(), abs=1e-9)
    assert (ev["lost_work"] >= 0).all()
    if ft == "agileml":
        assert (ev.loc[ev["recovery"] != "effective_failure", "lost_work"] == 0).all()
    prog = result.tables["progress"]
    assert (prog["work_done"] <= sim.cfg.total_work + 1e-6).all()
    if result.info["completed"]:
        assert sim.done == pytest.approx(sim.cfg.total_work)
        assert prog["work_done"].iloc[-1] == pytest.approx(sim.cfg.total_work)


def test_checkpoint_rollback_loses_exactly_the_work_since_the_checkpoint() -> None:
    # Calm market, then at t=2000 s a spike above on demand evicts the Standard allocation.
    pa = [(1600.0, 0.3), (400.0, 1.5), (600.0, 0.3)]
    pb = [(600.0, 0.9)]
    sim, result = _simulate("standard", "checkpoint", "hourly_refund", pa, pb, hours=2.0)
    ev = result.tables["evictions"]
    assert len(ev) == 1 and ev["recovery"].iloc[0] == "checkpoint_rollback"
    # Ready at 180 s, checkpoint at 1200 s, evicted at 2000 + 120 s: the work of 920 s at 83% speed.
    rate = 8 * 4.0 * (1 - 0.17)
    assert ev["lost_work"].iloc[0] == pytest.approx(rate * 920.0 / 3600.0)
    assert result.info["completed"] == 1
    assert result.tables["bills"].query("kind == 'refund'")["amount_usd"].sum() < 0


def test_agileml_eviction_with_warning_loses_nothing() -> None:
    pa = [(1600.0, 0.3), (400.0, 1.5), (600.0, 0.3)]
    pb = [(600.0, 0.9)]
    _, result = _simulate("standard", "agileml", "hourly_refund", pa, pb, hours=2.0)
    ev = result.tables["evictions"]
    assert len(ev) == 1 and ev["lost_work"].iloc[0] == 0.0
    assert ev["recovery"].iloc[0] in ("end_of_life_flush", "stateless")
    m = spot_metrics(result)
    assert 0 < m["free_compute_fraction"] < 1  # the evicted hour was refunded: free compute


@pytest.fixture(scope="module")
def default_run() -> tuple[RunResult, RunResult]:
    scenario = load_scenario(DEFAULT_SPOT_SCENARIO, ["job.reference_hours=1.0", "seed=3"])
    return run(scenario), run(scenario)


def test_default_scenario_runs_deterministically(default_run) -> None:
    first, second = default_run
    check_spot_tables(first)
    for name in first.tables:
        pd.testing.assert_frame_equal(first.tables[name], second.tables[name])
    m = spot_metrics(first)
    assert m["completed"] == 1.0
    assert m["cost_usd"] > 0
    assert math.isclose(
        m["free_compute_fraction"] + m["on_demand_compute_fraction"] + m["spot_paid_compute_fraction"], 1.0
    )


def test_on_demand_costs_what_the_reference_cluster_costs() -> None:
    result = run(load_scenario(DEFAULT_SPOT_SCENARIO, ["policy=on_demand", "job.reference_hours=1.0"]))
    m = spot_metrics(result)
    # 64 p2.xlarge for 1 h of work, plus the 2 min boot it pays for (requested at 0, granted at 60 s).
    assert m["cost_usd"] == pytest.approx(64 * 0.9 * (1.0 + 120.0 / 3600.0))
    assert m["runtime_h"] == pytest.approx(1.0 + 180.0 / 3600.0)


def test_agileml_warning_too_short_is_an_effective_failure_that_rolls_back() -> None:
    pa = [(1600.0, 0.3), (400.0, 1.5), (600.0, 0.3)]
    pb = [(600.0, 0.9)]
    sim, result = _simulate("standard", "agileml", "hourly_refund", pa, pb, hours=2.0, warning_s=1.0)
    ev = result.tables["evictions"]
    assert list(ev["recovery"]) == ["effective_failure"]
    # Stage 2 (7 transient : 1 reliable); the BackupPSs lag by consistent_lag_s = 10 s of progress.
    prog = result.tables["progress"]
    rate_before = prog[prog["time_s"] < ev["terminate_s"].iloc[0]]["rate"].iloc[-1]
    assert prog[prog["time_s"] < ev["terminate_s"].iloc[0]]["stage"].iloc[-1] == 2
    assert ev["lost_work"].iloc[0] == pytest.approx(rate_before * 10.0 / 3600.0)
    assert sim.done == pytest.approx(sim.integrated - sim.lost)
