"""A market-driven real spot run (``real.market: true``): the acquisition policy decides for real.

The emulated cloud (``runtime.spot.fleet``) must book exactly what the simulator books for the same
market, policy and lifetime (hypothesis, no processes); one small real run must acquire, scale up, be
evicted with a warning, recover, and end with the model the serial replay of its clocks gives; a market
section the real run cannot honour is refused by name.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from clustertwin.policies.bidbrain import BidBrainParams, PriceSeries, estimate_eviction_table
from clustertwin.policies.spot import ACQUISITION, FAULT_TOLERANCE, AcquisitionInputs, FaultToleranceSettings
from clustertwin.policies.spot.billing import billing_model
from clustertwin.runtime.spot.fleet import Boot, Fleet, Leave, MarketInputs
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.spot_real_section import REAL_MARKET_SCENARIO
from clustertwin.scenarios.spot_replay import MarketReplay
from clustertwin.sim.spot.engine import SpotConfig, SpotSim
from clustertwin.sim.spot.perf import DEFAULT_PERF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustertwin.errors import InputError

A = ("p2.xlarge", "us-east-1a")
B = ("p2.xlarge", "us-east-1b")
OD = {"p2.xlarge": 0.9}
NU = {"p2.xlarge": 4.0}
END_S = 6 * 3600.0

path = st.lists(st.tuples(st.floats(30.0, 5400.0), st.floats(0.2, 1.6)), min_size=1, max_size=20)


def _series(steps: list[tuple[float, float]]) -> PriceSeries:
    times = np.r_[-86400.0, np.cumsum([gap for gap, _ in steps])]
    return PriceSeries(times, np.array([0.3 * OD["p2.xlarge"]] + [f * OD["p2.xlarge"] for _, f in steps]))


def _policies(acq: str, ft: str, series: dict) -> tuple:
    inputs = AcquisitionInputs(bidbrain=BidBrainParams(counts=(1, 2, 4)))
    if acq == "bidbrain":
        table = estimate_eviction_table(series, (-86400.0, 0.0), deltas=(0.001, 0.05, 0.4), step_s=600.0)
        inputs = replace(inputs, eviction_table=lambda: table)
    scheme = FAULT_TOLERANCE.get(ft)(FaultToleranceSettings(reliable_count=1, checkpoint_interval_s=1200.0))
    return ACQUISITION.get(acq)(inputs), scheme


def _books_both(acq: str, ft: str, billing: str, pa, pb) -> tuple[dict, dict, list]:
    """The simulator's books and the fleet's, for a job that never finishes, both stopped at END_S."""
    series = {A: _series(pa), B: _series(pb)}
    ref = 2 * NU["p2.xlarge"]
    common = dict(
        billing=billing_model(billing),
        on_demand_prices=OD,
        work_rates=NU,
        target_rate=ref,
        max_rate=2 * ref,
        total_work=1e12,
        reliable_type="p2.xlarge",
        reference_type="p2.xlarge",
        request_delay_s=60.0,
        boot_s=120.0,
        max_runtime_s=END_S,
    )
    acquisition, scheme = _policies(acq, ft, series)
    sim = SpotSim(
        SpotConfig(acquisition=acquisition, fault_tolerance=scheme, perf=DEFAULT_PERF, **common),
        MarketReplay(series),
        [A, B],
        np.random.default_rng(0),
    )
    sim.run()
    acquisition, scheme = _policies(acq, ft, series)
    fleet = Fleet(MarketInputs(acquisition=acquisition, fault_tolerance=scheme, series=series, **common))
    actions = list(fleet.start())
    for t in np.arange(0.0, END_S, 97.0):  # a launcher's poll ticks
        actions += fleet.advance(float(t))
    actions += fleet.advance(END_S, before=True)
    fleet.end(END_S, "max_runtime")
    names = ("acquisitions", "evictions", "bills")
    sim_books = {name: pd.DataFrame(getattr(sim.books, name)) for name in names}
    return sim_books, {k: pd.DataFrame(v) for k, v in fleet.books().items()}, actions


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(
        [
            ("bidbrain", "agileml", "hourly_refund"),
            ("bidbrain", "checkpoint", "per_second"),
            ("standard", "checkpoint", "hourly_refund"),
            ("just_above", "agileml", "per_second"),
            ("on_demand", "checkpoint", "hourly_refund"),
        ]
    ),
    path,
    path,
)
def test_the_fleet_books_what_the_simulator_books(config, pa, pb) -> None:
    sim, fleet, actions = _books_both(*config, pa, pb)
    cols = ["alloc_id", "zone", "count", "bid", "on_demand", "requested_s", "granted_s", "ready_s", "ended_s"]
    s_acq = sim["acquisitions"].sort_values("alloc_id").reset_index(drop=True)
    f_acq = fleet["acquisitions"].sort_values("alloc_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(s_acq[cols], f_acq[cols], check_dtype=False)
    assert list(s_acq["end_reason"]) == list(f_acq["end_reason"])
    if len(sim["evictions"]):
        ev_cols = ["time_s", "terminate_s", "alloc_id", "price", "bid"]
        pd.testing.assert_frame_equal(
            sim["evictions"][ev_cols].reset_index(drop=True),
            fleet["evictions"][ev_cols].reset_index(drop=True),
            check_dtype=False,
        )
    else:
        assert fleet["evictions"].empty
    # the same bill, allocation by allocation (the simulator books it as it goes, the fleet in closed form)
    if len(sim["bills"]):
        per_sim = sim["bills"].groupby("alloc_id")["amount_usd"].sum()
        per_fleet = fleet["bills"].groupby("alloc_id")["amount_usd"].sum()
        pd.testing.assert_series_equal(per_sim, per_fleet, rtol=1e-9, atol=1e-9)
    # every instance is spawned once, when granted; an eviction warns exactly its allocation's processes
    boots = [a for a in actions if isinstance(a, Boot)]
    names = [n for b in boots for n in b.names]
    assert len(names) == len(set(names)) == int(f_acq.loc[f_acq["granted_s"].notna(), "count"].sum())
    for leave in (a for a in actions if isinstance(a, Leave)):
        assert leave.warn_s <= leave.kill_s
        assert leave.names == next(b.names for b in boots if b.alloc_id == leave.alloc_id)


def _market(overrides: list[str]):
    return load_scenario(REAL_MARKET_SCENARIO, overrides)


SMALL_MARKET = [
    "seed=4",
    "job={reference_type: p2.xlarge, reference_count: 2, reference_hours: 1.0, max_scale: 2.0}",
    "market.synthetic={spikes_per_h: 2.0}",
    "real.job={features: 16, classes: 4, examples: 512, batch: 64, lr: 0.5, step_s: 0.05}",
    "real.real_s_per_sim_h=6",
    "real.duration_s=40",
]


@pytest.mark.slow  # ~15-30 s of processes on a loaded 2-core host
def test_bidbrain_acquires_scales_up_and_is_evicted_for_real(tmp_path) -> None:
    from clustertwin.analysis.spot_market_real import run_market_real
    from clustertwin.scenarios.spot_real_results import check_market_real_tables

    result = run_market_real(_market(SMALL_MARKET), tmp_path)
    check_market_real_tables(result)
    info, t = result.info, result.tables
    acq, ev, bills, rec = t["acquisitions"], t["evictions"], t["bills"], t["recoveries"]
    assert info["completed"] == 1
    # BidBrain bought spot instances after the start and the job grew to use them (scale-up epochs)
    spot = acq[~acq["on_demand"]]
    assert len(spot) >= 2 and spot["granted_s"].notna().all()
    assert (t["progress"]["event"] == "scale_up").any()
    assert t["progress"]["n_transient"].max() >= 2
    # a price spike evicted an allocation: warned, then killed a warning later, and the job recovered
    assert len(ev) >= 1 and np.allclose(ev["terminate_s"] - ev["time_s"], 120.0)
    evicted = rec[rec["reason"] == "evicted"]
    assert (evicted["killed_s"] >= evicted["terminate_s"] - 1e-9).all()
    # "none": evicted while booting (its processes never joined); else what the job did, measured
    assert set(ev["recovery"]) <= {"end_of_life_flush", "effective_failure", "stateless", "none"}
    assert len(evicted) >= (ev["recovery"] != "none").sum() >= 1
    # the bill: every granted allocation paid, the evicted hour refunded
    assert bills["amount_usd"].sum() > 0
    assert (bills[bills["kind"] == "refund"]["alloc_id"].isin(ev["alloc_id"])).all()
    # no acknowledged update lost or applied twice across joins, migrations and evictions
    assert info["final_clock"] >= info["total_clocks"]
    assert info["max_abs_diff_vs_reference"] < 1e-9


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["real.processes={reliable: 1, transient: 2}"], "processes"),
        (["real.evictions=[{at_s: 3, processes: [t0]}]"], "evictions"),
        (["real.agileml.poll_s=0.5"], "agileml.poll_s"),
    ],
)
def test_a_market_run_refuses_a_fixed_schedule_by_name(overrides: list[str], field: str) -> None:
    with pytest.raises(InputError, match=field):
        _market(overrides)


def test_a_market_run_refuses_types_of_different_speed_by_name(tmp_path) -> None:
    from clustertwin.analysis.spot_market_real import run_market_real

    with pytest.raises(InputError, match="market.instance_types"):
        run_market_real(_market(["market.instance_types=[p2.xlarge, p3.2xlarge]"]), tmp_path)


def test_the_simulation_of_the_same_file_runs() -> None:
    from clustertwin.api import simulate

    result = simulate(_market([]))
    assert math.isfinite(result.info["runtime_s"])
