"""Loaders of the multi-cloud price data: Azure low-priority tables and sizes, GCP preemptible probes, the
on-demand and egress tables. Bad input names its file and line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from clustertwin.traces.azure_prices import BUNDLED_AZURE_PRICES, load_azure_low_priority, load_azure_sizes
from clustertwin.traces.cloud_catalog import (
    EgressTier,
    egress_usd,
    load_cloud_on_demand,
    load_egress,
)
from clustertwin.traces.gcp_prices import GCP_HOST_ALLOWANCE, load_gcp_preemptible

from clustertwin.errors import InputError

HEADER = "Date,NC6,NC6s v3\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_azure_table_reads_dollars_skips_sizes_not_offered(tmp_path: Path) -> None:
    path = _write(tmp_path, "us_east.csv", HEADER + "2/24/2020,$0.12276,\n2/25/2020,$0.13,$0.60313\n")
    table = load_azure_low_priority(path)
    assert list(table["region"].unique()) == ["us-east"]
    assert len(table) == 3  # the empty cell is "not offered", not a price
    assert str(table["timestamp"].dt.tz) == "UTC"


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("2/24/2020,0.12x,$1\n", ":2: column NC6"),
        ("2/24/2020,$-1,$1\n", ":2: column NC6"),
        ("2/24/2020,$1\n", ":2"),
        ("24.2.2020,$1,$1\n", ":2: column Date"),
        ("2/24/2020,$1,$1\n2/24/2020,$1,$1\n", ":3: column Date"),
    ],
)
def test_azure_bad_cells_name_file_line_and_column(tmp_path: Path, body: str, where: str) -> None:
    path = _write(tmp_path, "us_east.csv", HEADER + body)
    with pytest.raises(InputError, match=str(path) + where):
        load_azure_low_priority(path)


def test_azure_sizes_and_their_errors(tmp_path: Path) -> None:
    sizes = load_azure_sizes()
    assert (sizes["NC24s v3"].gpu_type, sizes["NC24s v3"].gpus) == ("V100", 4)
    bad = _write(tmp_path, "map.csv", "Instance,GPU type,# GPUs\nNC6,K80,one\n")
    with pytest.raises(InputError, match=f"{bad}:2: column # GPUs"):
        load_azure_sizes(bad)


def test_bundled_azure_regions_differ_in_price() -> None:
    east, south = (load_azure_low_priority(BUNDLED_AZURE_PRICES[r]) for r in ("us-east", "us-south-central"))
    nc6 = [t[t["instance_type"] == "NC6"]["price"].iloc[0] for t in (east, south)]
    assert nc6[0] != nc6[1]


def test_gcp_probe_round_prices_per_gpu(tmp_path: Path) -> None:
    offers = load_gcp_preemptible()
    v100 = {o.gpus: o for o in offers if o.gpu_type == "V100" and o.zone == "us-west1-b"}
    # The probing script priced n GPUs at n times one: the per-GPU price does not depend on n.
    assert len({round(o.gpu_price, 6) for o in v100.values()}) == 1
    assert v100[1].price == pytest.approx(v100[1].gpu_price * GCP_HOST_ALLOWANCE)
    assert v100[1].region == "us-west1"
    bad = _write(
        tmp_path,
        "2020-02-26T17-03-53.000Z.out",
        "Zone: us-west1-b, GPU type: nvidia-tesla-v100, Number of GPUs: 1, Price per hour: $0.851\nZone: x\n",
    )
    with pytest.raises(InputError, match=f"{bad}:2"):
        load_gcp_preemptible(bad)
    unnamed = _write(tmp_path, "round.out", "")
    with pytest.raises(InputError, match="file name"):
        load_gcp_preemptible(unnamed)


def test_on_demand_table_and_errors(tmp_path: Path) -> None:
    table = load_cloud_on_demand()
    assert {i.cloud for i in table} == {"aws", "azure", "gcp"}
    head = "cloud,region,instance_type,gpu_type,gpus,price\n"
    for body, column in (
        ("aws,r,t,K80,0,1\n", "gpus"),
        ("aws,r,t,K80,1,free\n", "price"),
        ("aws,r,,K80,1,1\n", "instance_type"),
    ):
        bad = _write(tmp_path, "od.csv", head + body)
        with pytest.raises(InputError, match=f"{bad}:2: column {column}"):
            load_cloud_on_demand(bad)


def test_egress_tiers_price_volumes_in_turn(tmp_path: Path) -> None:
    aws = load_egress()["aws"]
    assert egress_usd(aws, 1.0) == 0.0  # the first GB is free
    assert egress_usd(aws, 150.0) == pytest.approx(149 * 0.09)
    tiers = [EgressTier(0, 10, 1.0), EgressTier(10, math.inf, 0.5)]
    assert egress_usd(tiers, 30) == pytest.approx(10 + 10)
    gap = _write(tmp_path, "e.csv", "cloud,from_gb,to_gb,usd_per_gb\nx,0,1,0\nx,2,inf,1\n")
    with pytest.raises(InputError, match=f"{gap}:3: column from_gb"):
        load_egress(gap)
