"""Gavel on a spot fleet (scenario ``market:`` section, ``sim/gavel_market.py``; [Narayanan] §6, [Proteus]).

Billing properties over random price paths and bids; an eviction preempts its job and loses exactly
the progress since the round's start; an all-on-demand fleet is the plain simulation; bad market input
names its field; the closed-form bill agrees with the spot engine's incremental books.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from clustertwin.analysis.gavel_market import market_metrics
from clustertwin.policies.bidbrain import PriceSeries
from clustertwin.policies.gavel.cluster import ClusterLayout
from clustertwin.policies.spot import ACQUISITION, FAULT_TOLERANCE, AcquisitionInputs, FaultToleranceSettings
from clustertwin.policies.spot.billing import billing_model, lifetime_bill
from clustertwin.scenarios.gavel_fleet import Lease, MarketHook, Worker, spot_leases
from clustertwin.scenarios.load import load_scenario
from clustertwin.scenarios.results import check_tables
from clustertwin.scenarios.spot_replay import MarketReplay
from clustertwin.sim.spot.engine import SpotConfig, SpotSim
from clustertwin.sim.spot.perf import DEFAULT_PERF
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustertwin.api import simulate
from clustertwin.errors import InputError

OD_V100 = 3.06  # p3.2xlarge on demand, $/h (traces/data/spot/on_demand_us-east-1.csv)
MARKET = ("p3.2xlarge", "us-east-1b")

# A price path: (gap to the next change in s, price as a fraction of on demand), from t = 0.
path = st.lists(st.tuples(st.floats(10.0, 7200.0), st.floats(0.2, 1.4)), min_size=1, max_size=30)


def _series(steps: list[tuple[float, float]], od: float = OD_V100) -> PriceSeries:
    times = np.r_[-3600.0, np.cumsum([gap for gap, _ in steps])]
    prices = np.array([0.3 * od] + [frac * od for _, frac in steps])
    return PriceSeries(times, prices)


def _hook(series: PriceSeries, bid: float, spot: int, on_demand: int, scheme: str, **delays) -> MarketHook:
    replay = MarketReplay({MARKET: series})
    workers = [
        Worker(i, f"v100/od/{i}", "v100", False, MARKET[0], "", 1, math.inf, (Lease(0.0, 0.0),))
        for i in range(on_demand)
    ]
    for i in range(spot):
        leases = spot_leases(series, bid, **delays)
        workers.append(Worker(len(workers), f"v100/spot/{i}", "v100", True, *MARKET, 1, bid, tuple(leases)))
    names = ("v100", "v100:spot")
    layout = ClusterLayout(names, (on_demand, spot), (1, 1))
    model = billing_model(scheme, delays["warning_s"])
    kinds, spots, markets, prices = ("v100", "v100"), (False, True), (None, MARKET), (OD_V100, OD_V100)
    return MarketHook(layout, kinds, spots, workers, replay, markets, prices, model)


# --- leases and billing under random markets ----------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path,
    st.floats(0.25, 1.2),
    st.sampled_from(["per_second", "hourly_refund"]),
    st.floats(0.0, 300.0),
    st.floats(0.0, 600.0),
    st.floats(0.0, 300.0),
    st.floats(60.0, 40 * 3600.0),
)
def test_billing_is_never_negative_and_stops_when_the_worker_is_gone(
    steps, bid_frac, scheme, warning_s, delay_s, boot_s, run_end
) -> None:
    series = _series(steps)
    bid = bid_frac * OD_V100
    delays = {"warning_s": warning_s, "request_delay_s": delay_s, "boot_s": boot_s}
    leases = spot_leases(series, bid, **delays)

    # Leases follow the market: granted only at a price within the bid, usable until the first price
    # above it (the warning), gone a warning later; one at a time.
    for lease in leases:
        assert lease.granted_s <= lease.ready_s
        assert series.at(lease.granted_s) <= bid
        assert lease.warned_s > lease.granted_s
        if math.isfinite(lease.warned_s):
            assert series.at(lease.warned_s) > bid
            assert lease.ended_s == pytest.approx(lease.warned_s + warning_s)
            changes = series.times_s[(series.times_s > lease.granted_s) & (series.times_s < lease.warned_s)]
            assert (series.at(changes) <= bid).all()  # no eviction was missed
        else:
            assert lease.ended_s == math.inf
    for a, b in zip(leases, leases[1:], strict=False):
        assert b.granted_s >= a.ended_s + delay_s - 1e-9

    billing = _hook(series, bid, spot=2, on_demand=1, scheme=scheme, **delays).tables(run_end)["billing"]
    assert (billing["cost_usd"] >= -1e-9).all()
    assert (billing["end_s"] <= run_end).all()
    assert (billing["start_s"] < billing["end_s"]).all()
    spot_rows = billing[billing["capacity"] == "spot"]
    for row in spot_rows.itertuples():
        lease = next(x for x in leases if x.granted_s == row.start_s)
        assert row.end_s == min(lease.ended_s, run_end)  # billed exactly while it held the instance
        if scheme == "per_second":
            replay = MarketReplay({MARKET: series})
            assert row.cost_usd == pytest.approx(
                replay.integral_usd(MARKET, row.start_s, row.end_s), abs=1e-9
            )
        elif row.end_reason == "evicted":
            # hourly_refund: the hour in progress at the eviction is refunded, so it never costs more
            # than the whole hours before it.
            whole = math.floor((row.end_s - row.start_s) / 3600.0)
            assert row.cost_usd <= whole * bid + 1e-9
    od = billing[billing["capacity"] == "on_demand"]
    assert od["cost_usd"].to_numpy() == pytest.approx([OD_V100 * run_end / 3600.0])


@settings(max_examples=100, deadline=None)
@given(
    st.floats(0.0, 10 * 3600.0),
    st.floats(1.0, 10 * 3600.0),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["per_second", "hourly_refund"]),
    path,
)
def test_lifetime_bill_items_stay_inside_the_lifetime(
    start, length, evicted, on_demand, scheme, steps
) -> None:
    series = _series(steps)
    replay = MarketReplay({MARKET: series})
    items = lifetime_bill(
        billing_model(scheme),
        start,
        start + length,
        evicted=evicted,
        on_demand=on_demand,
        price_at=lambda t: replay.price(MARKET, t),
        integral_usd=lambda a, b: replay.integral_usd(MARKET, a, b),
    )
    assert all(start <= t <= start + length for t, _, _ in items)
    assert sum(amount for _, _, amount in items) >= -1e-9


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path, st.sampled_from(["per_second", "hourly_refund"]), st.sampled_from(["standard", "just_above"]))
def test_closed_form_bill_matches_the_spot_engine(steps, scheme, acquisition) -> None:
    """clustertwin.policies.spot.billing.lifetime_bill is what SpotSim books, allocation by allocation."""
    od = {"p3.2xlarge": OD_V100}
    series = {MARKET: _series(steps)}
    cfg = SpotConfig(
        acquisition=ACQUISITION.get(acquisition)(AcquisitionInputs()),
        fault_tolerance=FAULT_TOLERANCE.get("checkpoint")(FaultToleranceSettings()),
        billing=billing_model(scheme),
        total_work=8.0 * 4,
        target_rate=8.0 * 2,
        max_rate=8.0 * 2,
        on_demand_prices=od,
        work_rates={"p3.2xlarge": 8.0},
        reliable_type="p3.2xlarge",
        reference_type="p3.2xlarge",
        perf=DEFAULT_PERF,
        max_runtime_s=30 * 3600.0,
    )
    replay = MarketReplay(series)
    sim = SpotSim(cfg, replay, [MARKET], np.random.default_rng(0))
    sim.run()
    bills = pd.DataFrame(sim.books.bills, columns=["alloc_id", "amount_usd"])
    paid = bills.groupby("alloc_id")["amount_usd"].sum()
    for a in sim.books.acquisitions:
        if not math.isfinite(a["granted_s"]):
            continue
        items = lifetime_bill(
            cfg.billing,
            a["granted_s"],
            a["ended_s"],
            evicted=a["end_reason"] == "evicted",
            on_demand=a["on_demand"],
            price_at=lambda t: replay.price(MARKET, t),
            integral_usd=lambda t0, t1: replay.integral_usd(MARKET, t0, t1),
            count=a["count"],
        )
        assert sum(x for _, _, x in items) == pytest.approx(paid.get(a["alloc_id"], 0.0), abs=1e-6)


# --- scenarios -----------------------------------------------------------------------------------------

TRACE_LINE = "ResNet-18 (batch size 32)\tpython3 main.py\tdir\t--num_steps\t1\t{steps}\t1\t1\t-1\t{arrival}\n"


def _prices(tmp_path: Path, rows: list[tuple[str, float]]) -> Path:
    """A canonical price CSV for p3.2xlarge in us-east-1b."""
    text = "timestamp,region,zone,instance_type,price\n" + "".join(
        f"{t},us-east-1,us-east-1b,p3.2xlarge,{p}\n" for t, p in rows
    )
    path = tmp_path / "prices.csv"
    path.write_text(text)
    return path


def _scenario(tmp_path: Path, body: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text("name: spot-test\nkind: gavel\nseed: 1\n" + body)
    return path


def _one_spot_v100(tmp_path: Path, prices: Path, start: str, extra: str = "") -> Path:
    trace = tmp_path / "jobs.trace"
    trace.write_text(TRACE_LINE.format(steps=200000, arrival=0))
    return _scenario(
        tmp_path,
        f"""\
cluster: {{gpus: {{v100: 1}}, gpus_per_server: 1}}
workload: {{trace: {trace}}}
policy: {{name: max_sum_throughput}}
market:
  trace: {prices}
  start: "{start}"{extra}
  types: {{v100: {{instance_type: p3.2xlarge, zone: us-east-1b, spot: 1}}}}
""",
    )


def test_eviction_preempts_the_job_and_loses_the_progress_since_its_checkpoint(tmp_path: Path) -> None:
    # One spot V100; the price jumps above the on-demand bid 800 s in (mid-round 3, [720, 1080)), so the
    # worker is terminated at 920 s; the price is back at 3000 s and the worker returns 180 s later.
    prices = _prices(
        tmp_path,
        [("2020-02-20T00:00:00Z", 1.0), ("2020-02-20T00:13:20Z", 5.0), ("2020-02-20T00:50:00Z", 1.0)],
    )
    result = simulate(load_scenario(_one_spot_v100(tmp_path, prices, "2020-02-20T00:00:00Z")))
    check_tables(result)
    pre, ev, rounds = result.tables["preemptions"], result.tables["evictions"], result.tables["rounds"]
    assert len(ev) == 1 and ev["warned_s"].iloc[0] == 800.0 and ev["terminated_s"].iloc[0] == 920.0
    assert len(pre) == 1 and pre["job_id"].iloc[0] == 0 and pre["time_s"].iloc[0] == 920.0
    rate = rounds["steps"].iloc[0] / 360.0  # a whole first round on the V100
    assert pre["lost_steps"].iloc[0] == pytest.approx(rate * 200.0)  # since the round start at 720 s
    assert pre["lost_gpu_h"].iloc[0] == pytest.approx(200.0 / 3600.0)
    cut = rounds[rounds["start_s"] == 720.0]
    assert cut["steps"].iloc[0] == 0.0 and cut["end_s"].iloc[0] == 920.0
    # Rescheduled when the worker is back (re-requested at 3000 s, granted at 3060 s, ready at 3180 s),
    # and it still does exactly its steps.
    assert rounds["start_s"].iloc[3] == pytest.approx(3180.0)
    jobs = result.tables["jobs"]
    assert jobs["steps_done"].iloc[0] == pytest.approx(200000.0)
    assert jobs["completion_s"].iloc[0] == pytest.approx(3180.0 + (200000.0 - 2 * 360 * rate) / rate)
    billing = result.tables["billing"]
    assert list(billing["start_s"]) == [0.0, 3060.0] and list(billing["end_reason"]) == ["evicted", "run_end"]
    assert (billing["cost_usd"] > 0).all()
    metrics = market_metrics(result, {"v100": 1})
    assert metrics["evictions"] == 1 and metrics["work_lost_gpu_h"] == pytest.approx(200.0 / 3600.0)


FLEET = """\
cluster: {{gpus: {{v100: 4, k80: 4}}, gpus_per_server: 1{prices}}}
workload: {{generate: {{num_jobs: 30, jobs_per_hour: 3.0}}}}
policy: {{name: {policy}}}
"""
MARKET_OD = """\
market:
  start: "2020-02-20T00:00:00Z"
  types:
    v100: {instance_type: p3.2xlarge, zone: us-east-1b, on_demand: 4}
    k80: {instance_type: p2.xlarge, zone: us-east-1b, on_demand: 4}
"""


@pytest.mark.parametrize("policy", ["min_cost", "las"])
def test_an_all_on_demand_fleet_is_the_plain_simulation(tmp_path: Path, policy: str) -> None:
    plain = _scenario(
        tmp_path, FLEET.format(prices=", prices: {v100: 3.06, k80: 0.9}", policy=policy), "plain.yaml"
    )
    cloud = _scenario(tmp_path, FLEET.format(prices="", policy=policy) + MARKET_OD, "cloud.yaml")
    a, b = simulate(load_scenario(plain)), simulate(load_scenario(cloud))
    pd.testing.assert_frame_equal(a.tables["jobs"], b.tables["jobs"])
    pd.testing.assert_frame_equal(a.tables["rounds"], b.tables["rounds"][a.tables["rounds"].columns])
    assert not b.tables["rounds"]["spot"].any()
    # Billed while up: 4 × $3.06 + 4 × $0.90 per hour over the whole run.
    end = b.info["sim_end_s"]
    assert b.tables["billing"]["cost_usd"].sum() == pytest.approx((4 * 3.06 + 4 * 0.9) * end / 3600.0)


def _market_error(tmp_path: Path, overrides: list[str]) -> str:
    path = _scenario(tmp_path, FLEET.format(prices="", policy="min_cost") + MARKET_OD)
    with pytest.raises(InputError) as err:
        simulate(load_scenario(path, overrides))
    return str(err.value)


def test_bad_market_input_names_the_field(tmp_path: Path) -> None:
    msg = _market_error(tmp_path, ["market.types.v100.instance_type=p9.huge"])
    assert "market.types.v100.instance_type" in msg and "p9.huge" in msg
    zone = ["market.types.v100.on_demand=2", "market.types.v100.spot=2", "market.types.v100.zone=us-east-1a"]
    msg = _market_error(tmp_path, zone)
    assert "market.types.v100.zone" in msg and "us-east-1a" in msg
    msg = _market_error(tmp_path, ["market.types.k80.spot=-1"])
    assert "market.types.k80.spot" in msg
    msg = _market_error(tmp_path, ["market.types.k80.spot=2"])
    assert "market.types.k80" in msg and "4 servers" in msg
    msg = _market_error(tmp_path, ["market.start=2021-06-01T00:00:00Z"])
    assert "market.start" in msg and "outside the price trace" in msg
    msg = _market_error(tmp_path, ["market.start=yesterday"])
    assert "market.start" in msg
    msg = _market_error(
        tmp_path,
        ["cluster.gpus_per_server=2", "market.types.v100.on_demand=2", "market.types.k80.on_demand=2"],
    )
    assert "market.types.k80.instance_type" in msg or "market.types.v100.instance_type" in msg


def test_cli_run_of_a_spot_fleet_reports_the_billed_cost(tmp_path) -> None:
    import json

    from clustertwin.cli import main

    out = tmp_path / "run"
    assert main(["run", "scenarios/gavel/spot-whatif.yaml", "--out", str(out), "--quiet", "--no-plots"]) == 0
    metrics = json.loads((out / "summary.json").read_text())["metrics"]
    billed = pd.read_parquet(out / "billing.parquet")["cost_usd"].sum()
    assert metrics["cost_usd"] == pytest.approx(billed) and billed > 0
    assert metrics["cost_spot_usd"] + metrics["cost_on_demand_usd"] == pytest.approx(billed)


def test_a_fleet_whose_policy_learns_the_true_table_runs_as_one_that_knows_it() -> None:
    """``mechanism.planned_throughputs`` on a fleet: the planned rows are split over the spot and
    on-demand halves like the true ones, so planning from the truth and learning it changes nothing."""
    base = ["workload.generate.num_jobs=12"]
    knows = simulate(load_scenario("scenarios/gavel/spot-whatif.yaml", base)).tables
    learns = simulate(
        load_scenario("scenarios/gavel/spot-whatif.yaml", [*base, "mechanism.planned_throughputs=simulation"])
    ).tables
    for name in ("jobs", "rounds", "billing"):
        pd.testing.assert_frame_equal(knows[name], learns[name])
    assert len(knows["rounds"]) > 0


# --- bad traces through a Gavel `market:` section ---------------------------------------------


def test_the_replay_never_extends_the_last_price_past_max_stale(tmp_path: Path) -> None:
    prices = _prices(tmp_path, [("2020-02-20T00:00:00Z", 1.0), ("2020-02-20T00:10:00Z", 1.1)])
    # The job runs ~1.5 h; with max_stale_h = 0.5 the run outlives the trace's last row by too much.
    path = _one_spot_v100(tmp_path, prices, "2020-02-20T00:00:00Z", "\n  max_stale_h: 0.5")
    with pytest.raises(InputError) as err:
        simulate(load_scenario(path))
    msg = str(err.value)
    assert "market.max_stale_h" in msg and "p3.2xlarge in us-east-1b" in msg and "2020-02-20T00:10:00" in msg
    # Within the default 48 h the last price holds (AWS records only changes), and the bill is positive.
    result = simulate(load_scenario(_one_spot_v100(tmp_path, prices, "2020-02-20T00:00:00Z")))
    assert (result.tables["billing"]["cost_usd"] > 0).all()
    # A start before the market's first row is an error, not the first price backwards.
    with pytest.raises(InputError, match="market.start.*outside the price trace"):
        simulate(load_scenario(_one_spot_v100(tmp_path, prices, "2020-02-19T00:00:00Z")))


def test_a_fleet_in_two_regions_is_an_error(tmp_path: Path) -> None:
    prices = tmp_path / "two.csv"
    prices.write_text(
        "timestamp,region,zone,instance_type,price\n"
        "2020-02-20T00:00:00Z,us-east-1,us-east-1b,p3.2xlarge,1.0\n"
        "2020-02-20T00:00:00Z,us-west-2,us-west-2a,p2.xlarge,0.3\n"
    )
    trace = tmp_path / "jobs.trace"
    trace.write_text(TRACE_LINE.format(steps=1000, arrival=0))
    path = _scenario(
        tmp_path,
        f"""\
cluster: {{gpus: {{v100: 1, k80: 1}}, gpus_per_server: 1}}
workload: {{trace: {trace}}}
policy: {{name: max_sum_throughput}}
market:
  trace: {prices}
  start: "2020-02-20T00:00:00Z"
  types:
    v100: {{instance_type: p3.2xlarge, zone: us-east-1b, spot: 1}}
    k80: {{instance_type: p2.xlarge, zone: us-west-2a, spot: 1}}
""",
    )
    with pytest.raises(InputError) as err:
        simulate(load_scenario(path))
    msg = str(err.value)
    assert "market.types.k80.zone" in msg and "us-west-2" in msg and "one region" in msg


def test_a_bad_trace_file_is_an_error_naming_its_line(tmp_path: Path) -> None:
    prices = tmp_path / "clash.csv"
    prices.write_text(
        "timestamp,region,zone,instance_type,price\n"
        "2020-02-20T00:00:00Z,us-east-1,us-east-1b,p3.2xlarge,1.0\n"
        "2020-02-20T00:00:00Z,us-east-1,us-east-1b,p3.2xlarge,-1.0\n"
    )
    with pytest.raises(InputError, match=r"clash\.csv:3: column price"):
        simulate(load_scenario(_one_spot_v100(tmp_path, prices, "2020-02-20T00:00:00Z")))
    prices.write_text(
        "timestamp,region,zone,instance_type,price\n"
        "2020-02-20T00:00:00Z,us-east-1,us-east-1b,p3.2xlarge,1.0\n"
        "2020-02-20T00:00:00Z,us-east-1,us-east-1b,p3.2xlarge,2.0\n"
    )
    with pytest.raises(InputError, match=r"clash\.csv:3: column price.*conflicting"):
        simulate(load_scenario(_one_spot_v100(tmp_path, prices, "2020-02-20T00:00:00Z")))
