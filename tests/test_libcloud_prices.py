"""GPU prices from Apache Libcloud's price catalogue (``traces/libcloud_prices.py``): the rows it takes from
a catalogue, the errors that name the JSON path, the bundled extract against the 2020 list, and the Azure
regions it adds to the chapter-6 price board."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clustertwin.traces.azure_prices import AZURE_REGION_CODES
from clustertwin.traces.cloud_catalog import BUNDLED_CLOUD_ON_DEMAND, load_cloud_on_demand
from clustertwin.traces.libcloud_prices import (
    BUNDLED_LIBCLOUD_LOW_PRIORITY,
    BUNDLED_LIBCLOUD_ON_DEMAND,
    gpu_prices,
    write_extract,
)

from clustertwin.errors import InputError

CATALOGUE = {
    "updated": 1740936978,
    "compute": {
        "ec2_linux": {
            "p3.2xlarge": {"us-east-1": 3.06, "eu-west-2": 3.589, "us-west-2": 0.0},
            "m5.large": {"us-east-1": 0.096},
        },
        "azure_linux": {
            "standardnc6sv3": {"eastus": 3.06, "southcentralus": 3.366},
            "lowprioritync6sv3": {"eastus": 0.612},
            "standardd2v3": {"eastus": 0.096},
        },
    },
}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "pricing.json"
    path.write_text(json.dumps(data))
    return path


def test_takes_the_gpu_sizes_the_project_knows_and_drops_unlisted_prices(tmp_path: Path) -> None:
    prices = gpu_prices(_write(tmp_path, CATALOGUE))
    od = {(i.cloud, i.region, i.instance_type): (i.gpu_type, i.gpus, i.price) for i in prices.on_demand}
    assert od == {
        ("aws", "eu-west-2", "p3.2xlarge"): ("V100", 1, 3.589),
        ("aws", "us-east-1", "p3.2xlarge"): ("V100", 1, 3.06),  # us-west-2's 0 is "not listed"
        ("azure", "eastus", "NC6s v3"): ("V100", 1, 3.06),  # the size's name, not libcloud's key
        ("azure", "southcentralus", "NC6s v3"): ("V100", 1, 3.366),
    }
    assert [(i.region, i.instance_type, i.price) for i in prices.low_priority] == [
        ("eastus", "NC6s v3", 0.612)
    ]
    # the extract reads back through the on-demand table's own loader
    back_od, back_low = write_extract(prices, tmp_path)
    assert sorted(load_cloud_on_demand(back_od), key=repr) == sorted(prices.on_demand, key=repr)
    assert load_cloud_on_demand(back_low) == prices.low_priority


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d.pop("compute"), "compute"),
        (lambda d: d["compute"].pop("azure_linux"), "compute.azure_linux"),
        (lambda d: d["compute"]["ec2_linux"].update({"p3.2xlarge": 3.06}), "compute.ec2_linux.p3.2xlarge"),
        (lambda d: d["compute"]["azure_linux"]["standardnc6sv3"].update(eastus=-1), "standardnc6sv3.eastus"),
        (
            lambda d: d["compute"]["azure_linux"]["standardnc6sv3"].update(eastus="$3"),
            "standardnc6sv3.eastus",
        ),
    ],
)
def test_a_malformed_catalogue_names_the_json_path(tmp_path: Path, mutate, where: str) -> None:
    data = json.loads(json.dumps(CATALOGUE))
    mutate(data)
    with pytest.raises(InputError, match=where.replace(".", r"\.")):
        gpu_prices(_write(tmp_path, data))


def test_the_bundled_extract_matches_the_2020_list_where_both_price_a_size() -> None:
    old = {(i.cloud, i.instance_type): i.price for i in load_cloud_on_demand(BUNDLED_CLOUD_ON_DEMAND)}
    codes = {"aws": "us-east-1", "azure": AZURE_REGION_CODES["us-east"]}
    new = [i for i in load_cloud_on_demand(BUNDLED_LIBCLOUD_ON_DEMAND) if codes.get(i.cloud) == i.region]
    azure = [i for i in new if i.cloud == "azure"]
    assert len(azure) == 12 and len(new) >= 16
    assert all(i.price == pytest.approx(old[(i.cloud, i.instance_type)]) for i in new)
    low = load_cloud_on_demand(BUNDLED_LIBCLOUD_LOW_PRIORITY)
    assert all(i.cloud == "azure" for i in low) and len({i.region for i in low}) >= 3


def test_the_board_prices_the_other_azure_regions_on_demand() -> None:
    from clustertwin.analysis import cloud_whatif as w
    from clustertwin.analysis.cloud_market import azure_on_demand_elsewhere, default_board

    extra = azure_on_demand_elsewhere()
    assert {i.region for i in extra} == {"us-north-central", "us-south-central"}
    cells = {"k80": ("azure", "us-north-central", "K80"), "v100": ("azure", "us-south-central", "V100")}
    ratios = w.table_6_3(default_board(), cells)
    assert all(1.0 < r < 20.0 for r in ratios.values())  # on demand above low priority, as in every region
    assert set(w.azure_ratios_2025()) == {"azure-2025-k80", "azure-2025-p100", "azure-2025-v100"}
