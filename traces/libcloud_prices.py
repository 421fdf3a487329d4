"""GPU instance prices by region from Apache Libcloud's price catalogue: the ``libcloud/data/pricing.json``
that the ``apache-libcloud`` package on PyPI ships (Apache License 2.0; provenance and the bundled extract:
``data/cloud/PROVENANCE.md``).

The catalogue is one JSON object, ``{"compute": {table: {size: ...}}, "updated": unix seconds}``. Two of
its tables price GPU instances per region, in USD per instance-hour:

* ``ec2_linux``: AWS on-demand Linux, ``{instance_type: {region: price}}`` (a price of 0 means not listed);
* ``azure_linux``: Azure pay-as-you-go (``standard<size>``) and low-priority (``lowpriority<size>``) prices,
  ``{key: {region: price}}``, where ``<size>`` is the VM size in lower case without spaces
  (``NC6s v3`` -> ``standardnc6sv3``).

:func:`gpu_prices` takes the rows of the GPU types the project already describes: the AWS instance types of
the on-demand table and the Azure sizes of the size mapping (which say each one's GPU and GPU count). Regions
keep the clouds' own codes (``us-east-1``, ``eastus``). :func:`write_extract` writes them as the two bundled
tables in the format of ``cloud_catalog.load_cloud_on_demand``: ``libcloud_on_demand.csv`` and
``libcloud_low_priority.csv``. Regenerate them from an installed package with
``python -m clustertwin.traces.libcloud_prices PATH/TO/libcloud/data/pricing.json``.

Every malformed value is an :class:`InputError` naming the file and the JSON path.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from clustertwin.traces.azure_prices import BUNDLED_AZURE_MAPPING, AzureSize, load_azure_sizes
from clustertwin.traces.cloud_catalog import (
    BUNDLED_CLOUD_ON_DEMAND,
    CLOUD_DIR,
    CloudInstance,
    load_cloud_on_demand,
)
from clustertwin.traces.files import read_json

from clustertwin.atomic import write_text
from clustertwin.errors import InputError

BUNDLED_LIBCLOUD_ON_DEMAND = CLOUD_DIR / "libcloud_on_demand.csv"
BUNDLED_LIBCLOUD_LOW_PRIORITY = CLOUD_DIR / "libcloud_low_priority.csv"
# The version the bundled extract comes from, and its catalogue's "updated" stamp.
BUNDLED_FROM = "apache-libcloud 3.9.1, pricing.json updated 2025-03-02"
_HEADER = "cloud,region,instance_type,gpu_type,gpus,price"


@dataclass(frozen=True)
class LibcloudPrices:
    """The GPU rows of one catalogue: on-demand (AWS and Azure) and Azure low-priority."""

    on_demand: list[CloudInstance]
    low_priority: list[CloudInstance]
    updated: float  # the catalogue's own stamp, unix seconds


def gpu_prices(
    path: str | Path,
    aws_types: Iterable[CloudInstance] | None = None,
    azure_sizes: dict[str, AzureSize] | None = None,
) -> LibcloudPrices:
    """The GPU instance rows of the catalogue at ``path``, for the AWS types of ``aws_types`` (default: the
    bundled on-demand table's) and the Azure sizes of ``azure_sizes`` (default: the bundled mapping)."""
    path = Path(path)
    data = read_json(path)
    compute = _field(data, "compute", dict, path, "")
    updated = _field(data, "updated", (int, float), path, "")
    aws = {
        i.instance_type: i
        for i in (aws_types or load_cloud_on_demand(BUNDLED_CLOUD_ON_DEMAND))
        if i.cloud == "aws"
    }
    sizes = azure_sizes or load_azure_sizes(BUNDLED_AZURE_MAPPING)
    on_demand: list[CloudInstance] = []
    low: list[CloudInstance] = []
    ec2 = _field(compute, "ec2_linux", dict, path, "compute")
    for itype, kind in aws.items():
        for region, price in _regions(ec2, itype, path, "compute.ec2_linux"):
            on_demand.append(CloudInstance("aws", region, itype, kind.gpu_type, kind.gpus, price))
    azure = _field(compute, "azure_linux", dict, path, "compute")
    for name, size in sizes.items():
        key = name.lower().replace(" ", "")
        for prefix, into in (("standard", on_demand), ("lowpriority", low)):
            for region, price in _regions(azure, prefix + key, path, "compute.azure_linux"):
                into.append(CloudInstance("azure", region, name, size.gpu_type, size.gpus, price))
    return LibcloudPrices(on_demand, low, float(updated))


def write_extract(prices: LibcloudPrices, folder: Path = CLOUD_DIR) -> tuple[Path, Path]:
    """Write the two bundled tables (see the module docstring) into ``folder``, atomically."""
    out = (folder / BUNDLED_LIBCLOUD_ON_DEMAND.name, folder / BUNDLED_LIBCLOUD_LOW_PRIORITY.name)
    for target, rows in zip(out, (prices.on_demand, prices.low_priority), strict=True):
        lines = [_HEADER] + [
            f"{r.cloud},{r.region},{r.instance_type},{r.gpu_type},{r.gpus},{r.price:g}"
            for r in sorted(rows, key=lambda r: (r.cloud, r.region, r.gpu_type, r.gpus, r.instance_type))
        ]
        write_text(target, "\n".join(lines) + "\n")
    return out


def _field(obj: object, key: str, kind: type | tuple[type, ...], path: Path, at: str) -> object:
    where = f"{path}: {at + '.' if at else ''}{key}"
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(where, "missing (is this libcloud's pricing.json?)")
    value = obj[key]
    if not isinstance(value, kind):
        raise InputError(
            where, f"expected {getattr(kind, '__name__', 'a number')}, got {type(value).__name__}"
        )
    return value


def _regions(table: dict, key: str, path: Path, at: str) -> list[tuple[str, float]]:
    """(region, price) of one size, in region order; absent sizes and 0 prices (not listed) give none."""
    if key not in table:
        return []
    per_region = table[key]
    if not isinstance(per_region, dict):
        raise InputError(
            f"{path}: {at}.{key}", f"expected {{region: price}}, got {type(per_region).__name__}"
        )
    out = []
    for region, price in sorted(per_region.items()):
        if (
            not isinstance(price, (int, float))
            or isinstance(price, bool)
            or not math.isfinite(price)
            or price < 0
        ):
            raise InputError(f"{path}: {at}.{key}.{region}", f"a price must be a number >= 0, got {price!r}")
        if price > 0:
            out.append((str(region), float(price)))
    return out


if __name__ == "__main__":  # python -m clustertwin.traces.libcloud_prices PRICING_JSON [FOLDER]
    if len(sys.argv) not in (2, 3):
        raise SystemExit("usage: python -m clustertwin.traces.libcloud_prices PRICING_JSON [FOLDER]")
    written = write_extract(gpu_prices(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else CLOUD_DIR)
    print("\n".join(str(p) for p in written))
