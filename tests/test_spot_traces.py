"""Spot-price, on-demand and preemption loaders: round trips of the three price formats, and bad input
rejected with the file, line and column named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from clustertwin.traces.on_demand import BUNDLED_ON_DEMAND, load_on_demand
from clustertwin.traces.preemption import (
    load_availability_log,
    load_instance_counts,
    load_node_events,
    load_slot_availability,
    preemption_times,
)
from clustertwin.traces.spot_generator import fit_preemption_model, fit_price_model, generate_prices
from clustertwin.traces.spot_prices import (
    BUNDLED_SPOT_TRACES,
    COLUMNS,
    load_bundled_or_path,
    load_spot_prices,
    region_of,
    write_price_csv,
)

from clustertwin.errors import InputError


def _table() -> pd.DataFrame:
    rows = [
        ("2020-01-01T00:00:00Z", "us-east-1", "us-east-1a", "p2.xlarge", 0.3611),
        ("2020-01-01T00:05:07Z", "us-east-1", "us-east-1b", "p3.2xlarge", 1.0211),
        ("2020-01-01T01:00:00Z", "us-east-1", "us-east-1a", "p2.xlarge", 0.4),
    ]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True).astype("datetime64[ns, UTC]")
    for col in ("region", "zone", "instance_type"):
        frame[col] = frame[col].astype(str)
    return frame


def _aws_json(table: pd.DataFrame) -> str:
    records = [
        {
            "AvailabilityZone": r.zone,
            "InstanceType": r.instance_type,
            "ProductDescription": "Linux/UNIX",
            "SpotPrice": f"{r.price:.6f}",
            "Timestamp": r.timestamp.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        }
        for r in table.itertuples()
    ]
    # A Windows row is a different market: the loader must drop it.
    records.append({**records[0], "ProductDescription": "Windows", "SpotPrice": "9.0"})
    return json.dumps({"SpotPriceHistory": records}, indent=4)


def _archive_tsv(table: pd.DataFrame) -> str:
    return "".join(
        f"{r.zone}\t{r.instance_type}\tLinux/UNIX\t{r.price:.6f}\t{r.timestamp.isoformat()}\n"
        for r in table.itertuples()
    )


def test_csv_round_trip(tmp_path: Path) -> None:
    table = _table()
    write_price_csv(table, tmp_path / "p.csv")
    back = load_spot_prices(tmp_path / "p.csv")
    pd.testing.assert_frame_equal(back, table)


def test_aws_json_round_trip(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(_aws_json(_table()))
    pd.testing.assert_frame_equal(load_spot_prices(tmp_path / "p.json"), _table())


def test_archive_tsv_plain_and_zstd_round_trip(tmp_path: Path) -> None:
    text = _archive_tsv(_table())
    (tmp_path / "p.tsv").write_text(text)
    with pa.output_stream(str(tmp_path / "p.tsv.zst"), compression="zstd") as out:
        out.write(text.encode())
    for name in ("p.tsv", "p.tsv.zst"):
        pd.testing.assert_frame_equal(load_spot_prices(tmp_path / name), _table())


def test_az_ids_map_to_regions() -> None:
    assert region_of("use1-az4") == "us-east-1"
    assert region_of("apne1-az1") == "ap-northeast-1"
    assert region_of("us-west-2b") == "us-west-2"


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        (
            "neg.csv",
            "timestamp,region,zone,instance_type,price\n2020-01-01T00:00:00Z,us-east-1,us-east-1a,p2.xlarge,-1\n",
            ":2: column price",
        ),
        (
            "bad_col.csv",
            "timestamp,region,zone,instance_type,price\n2020-01-01T00:00:00Z,us-east-1,us-east-1a,p2.xlarge,0.3\n"
            "yesterday,us-east-1,us-east-1a,p2.xlarge,0.3\n",
            ":3: column timestamp",
        ),
        (
            "trunc.csv",
            "timestamp,region,zone,instance_type,price\n2020-01-01T00:00:00Z,us-east-1,us-east-1a,p2.xl",
            ":2",
        ),
        ("neg.tsv", "use1-az1\tp2.xlarge\tLinux/UNIX\tabc\t2020-01-01T00:00:00Z\n", ":1: column price"),
        ("short.tsv", "use1-az1\tp2.xlarge\tLinux/UNIX\t0.3\n", ":1"),
        ("bad_header.csv", "when,price\n", ":1"),
    ],
)
def test_bad_text_input_names_file_line_and_column(tmp_path: Path, name: str, text: str, where: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_spot_prices(path)
    assert str(path) + where in str(err.value)


def test_bad_json_names_line_and_field(tmp_path: Path) -> None:
    text = _aws_json(_table())
    truncated = tmp_path / "trunc.json"
    truncated.write_text(text[: len(text) // 2])
    with pytest.raises(InputError, match=r"trunc\.json:\d+:\d+"):
        load_spot_prices(truncated)
    negative = tmp_path / "neg.json"
    negative.write_text(text.replace('"SpotPrice": "1.021100"', '"SpotPrice": "-1.0"'))
    with pytest.raises(InputError) as err:
        load_spot_prices(negative)
    # The second record's keys sit on lines 9-15 of the indented JSON.
    line = text.splitlines().index('            "InstanceType": "p3.2xlarge",') + 1
    assert f"neg.json:{line}: column SpotPrice" in str(err.value)


def test_corrupt_zstd_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd garbage")
    with pytest.raises(InputError, match="bad.tsv.zst"):
        load_spot_prices(path)


def test_bundled_slice_is_small_documented_and_loads() -> None:
    path = BUNDLED_SPOT_TRACES["aws-p2-p3-us-east-1-2020"]
    assert path.stat().st_size < 1_000_000
    assert (path.parent / "README.md").is_file()
    table = load_bundled_or_path("aws-p2-p3-us-east-1-2020")
    assert set(table["region"]) == {"us-east-1"}
    assert table["timestamp"].is_monotonic_increasing
    assert (table["price"] > 0).all()
    od = load_on_demand(BUNDLED_ON_DEMAND)
    # Spot never exceeds on demand by much in this post-2017 market (a sanity check on the units).
    ratio = table.groupby("instance_type")["price"].max() / pd.Series(
        {k: v.on_demand_price for k, v in od.items()}
    )
    assert (ratio.dropna() <= 1.0 + 1e-9).all()


def test_on_demand_rejects_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "od.csv"
    path.write_text("instance_type,vcpus,gpus,price\np2.xlarge,4,1,0.9\np3.2xlarge,8,1,0\n")
    with pytest.raises(InputError, match=r"od\.csv:3: column price"):
        load_on_demand(path)


def test_preemption_loaders(tmp_path: Path) -> None:
    log = tmp_path / "aws.out"
    log.write_text(
        "[2020-03-15T10:00:00.000Z] Created instance i-1 with 1 GPU(s) of type v100 in zone us-east-1b\n"
        "[2020-03-15T10:10:00.000Z] Instance i-1 running in zone us-east-1b\n"
        "[2020-03-15T10:11:00.000Z] Instance with 8 GPU(s) of type k80 creation failed\n"
        "[2020-03-15T11:00:00.000Z] Instance i-1 not running in zone us-east-1b\n"
        "[2020-03-15T11:00:01.000Z] Successfully deleted instance i-1\n"
        "[2020-03-15T11:05:00.000Z] Created instance i-2 with 8 GPU(s) of type k80 in zone us-east-1c\n"
        "[2020-03-15T12:05:00.000Z] Instance i-2 running in zone us-east-1c\n"
    )
    events = load_availability_log(log)
    assert list(events["event"]) == [
        "created", "running", "creation_failed", "preempted", "deleted", "created", "running"
    ]  # fmt: skip
    life = preemption_times(events)
    assert list(life["preempted"]) == [True, False]
    assert list(life["lifetime_s"]) == [3600.0, 3600.0]  # i-2 is censored at the log's end
    assert fit_preemption_model(life).rate_per_s == pytest.approx(1 / 7200)
    (tmp_path / "bad.out").write_text(log.read_text() + "garbage line\n")
    with pytest.raises(InputError, match=r"bad\.out:8"):
        load_availability_log(tmp_path / "bad.out")

    slots = tmp_path / "s.json"
    # 1 marks a preempted slot in the source repository, so availability is its negation.
    slots.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 1, 1]}))
    assert list(load_slot_availability(slots)["available"]) == [True, False, False]

    nodes = tmp_path / "n.csv"
    nodes.write_text("0,add,node1\r\n0,add,node2\r\n2040000,remove,node1\r\n")
    assert list(load_node_events(nodes)["time_s"]) == [0.0, 0.0, 2040.0]
    nodes.write_text("10,add,node1\n5,remove,node1\n")
    with pytest.raises(InputError, match=r"n\.csv:2: column 1"):
        load_node_events(nodes)

    counts = tmp_path / "c.txt"
    counts.write_text("2021-12-11, 11:11:30, 55\n2021-12-11, 11:13:10, 54\n")
    assert list(load_instance_counts(counts)["time_s"]) == [0.0, 100.0]
    hours = tmp_path / "h.csv"
    hours.write_text("0.000,0\n0.5,9\n")
    assert list(load_instance_counts(hours, "h")["time_s"]) == [0.0, 1800.0]
    hours.write_text("0.000,0\n0.5,-9\n")
    with pytest.raises(InputError, match=r"h\.csv:2: column 2"):
        load_instance_counts(hours)


def test_generator_is_seeded_and_recovers_the_change_rate() -> None:
    table = load_bundled_or_path("aws-p2-p3-us-east-1-2020")
    model = fit_price_model(table, "p3.2xlarge", "us-east-1b", 3.06)
    start = pd.Timestamp("2021-01-01", tz="UTC")
    a = generate_prices([model], start, 400 * 86400.0, np.random.default_rng(7))
    b = generate_prices([model], start, 400 * 86400.0, np.random.default_rng(7))
    pd.testing.assert_frame_equal(a, b)
    refit = fit_price_model(a, "p3.2xlarge", "us-east-1b", 3.06)
    # ~800 Poisson changes: the refitted rate is within 15% (5 standard deviations is ~18%).
    assert refit.changes_per_h == pytest.approx(model.changes_per_h, rel=0.15)
    assert refit.spikes_per_h == 0.0
    spiky = generate_prices(
        [model.with_spikes(0.2, 2.0, 600.0)], start, 30 * 86400.0, np.random.default_rng(1)
    )
    spike_rows = np.isclose(spiky["price"], 2.0 * 3.06)
    assert 0 < spike_rows.sum() and (spiky["price"] >= 0).all()


# --- bad traces: a clear error or a documented, reported repair ------------------------------

HEADER = "timestamp,region,zone,instance_type,price\n"


def _json_record(**over: object) -> dict:
    rec = {
        "AvailabilityZone": "us-east-1a",
        "InstanceType": "p2.xlarge",
        "ProductDescription": "Linux/UNIX",
        "SpotPrice": "0.3",
        "Timestamp": "2020-01-01T00:00:00.000Z",
    }
    rec.update(over)
    return {k: v for k, v in rec.items() if v is not ...}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("SpotPrice", ...),  # missing
        ("SpotPrice", None),
        ("SpotPrice", ""),
        ("SpotPrice", "NaN"),
        ("SpotPrice", "inf"),
        ("SpotPrice", "-0.1"),
        ("SpotPrice", True),
        ("Timestamp", ...),
        ("Timestamp", 12),
        ("AvailabilityZone", ""),
        ("AvailabilityZone", None),
        ("InstanceType", None),
    ],
)
def test_bad_json_values_name_the_record_line_and_field(tmp_path: Path, field: str, value: object) -> None:
    records = [_json_record(), _json_record(**{"Timestamp": "2020-01-01T01:00:00.000Z", field: value})]
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"SpotPriceHistory": records}, indent=4))
    # The loader places a record by its "InstanceType" key: the second record's.
    line = [i for i, text in enumerate(path.read_text().splitlines(), 1) if '"InstanceType"' in text][1]
    with pytest.raises(InputError) as err:
        load_spot_prices(path)
    assert f"p.json:{line}: column {field}" in str(err.value)


def test_json_nan_literal_price_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"SpotPriceHistory": [' + json.dumps(_json_record()).replace('"0.3"', "NaN") + "]}")
    with pytest.raises(InputError, match=r"p\.json:1: column SpotPrice"):
        load_spot_prices(path)


def test_unsorted_rows_are_sorted(tmp_path: Path) -> None:
    table = _table()
    shuffled = table.iloc[[2, 0, 1]].reset_index(drop=True)
    write_price_csv(shuffled, tmp_path / "p.csv")
    pd.testing.assert_frame_equal(load_spot_prices(tmp_path / "p.csv"), table)
    # AWS returns newest first: the JSON loader sorts too.
    (tmp_path / "p.json").write_text(_aws_json(shuffled))
    pd.testing.assert_frame_equal(load_spot_prices(tmp_path / "p.json"), table)


def test_exact_duplicates_are_dropped_with_a_warning(tmp_path: Path) -> None:
    row = "2020-01-01T00:00:00Z,us-east-1,us-east-1a,p2.xlarge,0.3\n"
    path = tmp_path / "dup.csv"
    path.write_text(HEADER + row + "2020-01-01T01:00:00Z,us-east-1,us-east-1a,p2.xlarge,0.4\n" + row)
    with pytest.warns(UserWarning, match=r"dup\.csv: dropped 1 duplicate row\(s\).*dup\.csv:4"):
        table = load_spot_prices(path)
    assert list(table["price"]) == [0.3, 0.4]
    assert "dropped 1 duplicate" in table.attrs["repairs"][0]


def test_conflicting_prices_at_one_instant_name_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "clash.csv"
    path.write_text(
        HEADER
        + "2020-01-01T00:00:00Z,us-east-1,us-east-1a,p2.xlarge,0.3\n"
        + "2020-01-01T00:00:00Z,us-east-1,us-east-1b,p2.xlarge,0.5\n"
        + "2020-01-01T00:00:00Z,us-east-1,us-east-1a,p2.xlarge,0.4\n"
    )
    with pytest.raises(InputError) as err:
        load_spot_prices(path)
    msg = str(err.value)
    assert f"{path}:4: column price" in msg and f"{path}:2" in msg and "conflicting" in msg


@pytest.mark.parametrize(
    ("name", "text", "where", "what"),
    [
        (  # a region cell that contradicts the zone
            "r.csv",
            HEADER + "2020-01-01T00:00:00Z,us-west-2,us-east-1a,p2.xlarge,0.3\n",
            ":2: column region",
            "contradicts",
        ),
        (  # an AZ id with no region
            "r.tsv",
            "usq1-az1\tp2.xlarge\tLinux/UNIX\t0.3\t2020-01-01T00:00:00Z\n",
            ":1: column az_id",
            "region is unknown",
        ),
        (  # a derived-CSV az_id with no region
            "a.csv",
            "timestamp_utc,az_id,instance_type,price_usd_per_hour\n2020-01-01T00:00:00Z,mars-az1,p2.xlarge,0.3\n",
            ":2: column az_id",
            "region is unknown",
        ),
        (  # one market key in two regions (zone names the loader cannot place, regions given)
            "m.csv",
            HEADER
            + "2020-01-01T00:00:00Z,us-east-1,zone-x,p2.xlarge,0.3\n"
            + "2020-01-01T01:00:00Z,us-west-2,zone-x,p2.xlarge,0.3\n",
            ":3: column region",
            "mix regions",
        ),
    ],
)
def test_zone_and_region_errors(tmp_path: Path, name: str, text: str, where: str, what: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_spot_prices(path)
    assert str(path) + where in str(err.value) and what in str(err.value)


def test_json_zone_with_no_region_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "z.json"
    path.write_text(json.dumps({"SpotPriceHistory": [_json_record(AvailabilityZone="somewhere")]}))
    with pytest.raises(InputError, match=r"z\.json:1: column AvailabilityZone.*region is unknown"):
        load_spot_prices(path)


def test_coverage_check_rejects_a_replay_outside_the_trace() -> None:
    from clustertwin.policies.bidbrain import PriceSeries
    from clustertwin.scenarios.spot_replay import check_coverage

    series = {("p2.xlarge", "us-east-1a"): PriceSeries(np.array([0.0, 3600.0]), np.array([0.3, 0.4]))}
    check_coverage(series, 0.0, 3600.0 + 7200.0, 7200.0, "here")  # exactly max_stale past: fine
    with pytest.raises(InputError, match=r"here: the run lasts until.*3\.0 h earlier.*max_stale_h = 2"):
        check_coverage(series, 0.0, 3600.0 + 3 * 3600.0, 7200.0, "here")
    with pytest.raises(InputError, match=r"here: the replay starts at.*begin at"):
        check_coverage(series, -1.0, 0.0, 7200.0, "here")


# --- the same cases end to end through a `kind: spot` scenario ------------------------------------------


def _spot_trace(tmp_path: Path, hours: int = 48, zones: tuple[str, ...] = ("us-east-1a",)) -> Path:
    rows = []
    for h in range(0, hours + 1, 6):
        stamp = (pd.Timestamp("2020-01-01", tz="UTC") + pd.Timedelta(hours=h)).strftime("%Y-%m-%dT%H:%M:%SZ")
        for zone in zones:
            region = zone[:-1]
            rows.append(f"{stamp},{region},{zone},p2.xlarge,{0.27 + 0.01 * (h % 12 == 0)}\n")
            rows.append(f"{stamp},{region},{zone},p3.2xlarge,{0.92 + 0.01 * (h % 12 == 0)}\n")
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "".join(rows))
    return path


def _spot_run(trace: Path, *overrides: str):
    from clustertwin.scenarios.load import load_scenario
    from clustertwin.scenarios.spot_schema import DEFAULT_SPOT_SCENARIO
    from clustertwin.sim.spot import run

    base = [
        f"market.trace={trace}",
        'market.start="2020-01-01T12:00:00Z"',
        "policy=standard",
        "fault_tolerance=checkpoint",
        "job.reference_count=2",
        "job.reference_hours=1.0",
    ]
    return run(load_scenario(DEFAULT_SPOT_SCENARIO, [*base, *overrides]))


def _spot_error(trace: Path, *overrides: str) -> str:
    with pytest.raises(InputError) as err:
        _spot_run(trace, *overrides)
    return str(err.value)


def test_spot_scenario_bad_markets_name_the_field(tmp_path: Path) -> None:
    trace = _spot_trace(tmp_path)
    assert _spot_run(trace).info["completed"] == 1  # the valid baseline runs
    msg = _spot_error(trace, "market.instance_types=[p2.xlarge, p9.huge]")
    assert "market.instance_types" in msg and "p9.huge" in msg and "on-demand price table" in msg
    msg = _spot_error(trace, "market.instance_types=[p2.xlarge, p3.8xlarge]")  # priced, not in the trace
    assert "market.instance_types" in msg and "p3.8xlarge" in msg
    msg = _spot_error(trace, "job.reference_type=p9.huge")
    assert "job.reference_type" in msg
    msg = _spot_error(trace, "agileml.reliable_type=p9.huge")
    assert "agileml.reliable_type" in msg
    msg = _spot_error(trace, "market.zones=[us-east-1a, us-east-1f]")
    assert "market.zones" in msg and "us-east-1f" in msg and "it has zones us-east-1a" in msg


def test_spot_scenario_rejects_mixed_regions(tmp_path: Path) -> None:
    trace = _spot_trace(tmp_path, zones=("us-east-1a", "us-west-2a"))
    msg = _spot_error(trace)
    assert "market.zones" in msg and "us-east-1, us-west-2" in msg
    assert _spot_run(trace, "market.zones=[us-west-2a]").info["completed"] == 1


def test_spot_scenario_never_extends_the_last_price_past_max_stale(tmp_path: Path) -> None:
    trace = _spot_trace(tmp_path, hours=12)  # rows at 00:00, 06:00, 12:00
    # Starts before the trace: an error, not the first price backwards.
    msg = _spot_error(trace, 'market.start="2019-12-31T23:00:00Z"')
    assert "market.start" in msg and "begin at" in msg
    # Starts after the trace by more than max_stale_h: an error at the start.
    msg = _spot_error(trace, 'market.start="2020-01-05T00:00:00Z"')
    assert "market.start" in msg and "max_stale_h = 48" in msg
    # Starts inside, but the run (~1.1 h) goes 1.6 h past the last row with max_stale_h = 1: an error.
    msg = _spot_error(trace, 'market.start="2020-01-01T12:30:00Z"', "market.max_stale_h=1.0")
    assert "market.max_stale_h" in msg and "p2.xlarge" in msg and "h earlier" in msg
    # Within the allowance the last price holds (AWS records only changes).
    assert _spot_run(trace, 'market.start="2020-01-01T12:30:00Z"').info["completed"] == 1
