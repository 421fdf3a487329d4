"""Spot-price, on-demand and preemption loaders: round trips of the three price formats, and bad input
rejected with the file, line and column named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from scenarios.errors import InputError
from traces.on_demand import BUNDLED_ON_DEMAND, load_on_demand
from traces.preemption import (
    load_availability_log,
    load_instance_counts,
    load_node_events,
    load_slot_availability,
    preemption_times,
)
from traces.spot_generator import fit_preemption_model, fit_price_model, generate_prices
from traces.spot_prices import (
    BUNDLED_SPOT_TRACES,
    COLUMNS,
    load_bundled_or_path,
    load_spot_prices,
    region_of,
    write_price_csv,
)


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
    slots.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 1, 1]}))
    assert list(load_slot_availability(slots)["available"]) == [False, True, True]

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
