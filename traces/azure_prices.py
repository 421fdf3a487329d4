"""Azure low-priority (spot) VM prices: the daily per-region tables of the public training_on_a_dime logs,
and their size-to-GPU mapping (provenance: ``data/cloud/PROVENANCE.md``).

A price table has a header ``Date,<VM size>,...`` and one row per day; a cell is a price in USD per
instance-hour written as ``$0.12276``, or empty where the size is not offered in that region. Read into
the canonical spot-price table of ``traces.spot_prices`` (``timestamp, region, zone, instance_type,
price``): one row per (day, size), the day's price holding from 00:00 UTC until the next row. Azure
low-priority prices have no availability zones in these logs, so ``zone`` is the region.

The mapping (``Instance,GPU type,# GPUs``) says which GPU and how many each size has.

Every malformed value is an :class:`InputError` naming ``file:line: column``.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from clustertwin.traces.files import read_text
from clustertwin.traces.spot_prices import COLUMNS

from clustertwin.errors import InputError

CLOUD_DIR = Path(__file__).resolve().parent / "data" / "cloud"
AZURE_REGIONS = ("us-east", "us-north-central", "us-south-central")
BUNDLED_AZURE_PRICES = {r: CLOUD_DIR / f"azure_low_priority_{r.replace('-', '_')}.csv" for r in AZURE_REGIONS}
BUNDLED_AZURE_MAPPING = CLOUD_DIR / "azure_instance_mapping.csv"
# The logs' region names and Azure's own codes (which other price tables use).
AZURE_REGION_CODES = {
    "us-east": "eastus",
    "us-north-central": "northcentralus",
    "us-south-central": "southcentralus",
}
_MAPPING_HEADER = ("Instance", "GPU type", "# GPUs")


@dataclass(frozen=True)
class AzureSize:
    """One Azure VM size: its GPU type (upper case, ``K80``) and GPU count."""

    name: str
    gpu_type: str
    gpus: int


def load_azure_low_priority(path: str | Path, region: str | None = None) -> pd.DataFrame:
    """One region's daily low-priority prices as a canonical price table.

    ``region`` defaults to the file name without its ``azure_low_priority_`` prefix, ``_`` read as
    ``-`` (``us_east.csv`` -> ``us-east``).
    """
    path = Path(path)
    region = region or path.stem.removeprefix("azure_low_priority_").replace("_", "-")
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    header = [h.strip() for h in next(reader, [])]
    if not header or header[0] != "Date" or len(header) < 2:
        raise InputError(f"{path}:1", f"expected a header Date,<VM size>,..., got {','.join(header)!r}")
    sizes = header[1:]
    if any(not s for s in sizes) or len(set(sizes)) != len(sizes):
        raise InputError(f"{path}:1", "every VM size column needs a name, once")
    rows = []
    seen: dict[pd.Timestamp, int] = {}
    for cells in reader:
        line = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        where = f"{path}:{line}"
        if len(cells) != len(header):
            raise InputError(where, f"expected {len(header)} columns, found {len(cells)}")
        day = _date(cells[0], f"{where}: column Date")
        if day in seen:
            raise InputError(f"{where}: column Date", f"{cells[0]} is listed twice (also line {seen[day]})")
        seen[day] = line
        for size, cell in zip(sizes, cells[1:], strict=True):
            if cell.strip():
                rows.append((day, region, region, size, _dollars(cell, f"{where}: column {size}")))
    if not rows:
        raise InputError(str(path), "no prices")
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table["timestamp"] = table["timestamp"].astype("datetime64[ns, UTC]")
    return table.sort_values(["timestamp", "zone", "instance_type"], kind="stable").reset_index(drop=True)


def load_azure_sizes(path: str | Path = BUNDLED_AZURE_MAPPING) -> dict[str, AzureSize]:
    """The VM-size mapping: size name -> :class:`AzureSize`."""
    path = Path(path)
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    header = tuple(h.strip() for h in next(reader, ()))
    if header != _MAPPING_HEADER:
        raise InputError(
            f"{path}:1", f"expected header {','.join(_MAPPING_HEADER)}, got {','.join(header)!r}"
        )
    sizes: dict[str, AzureSize] = {}
    for cells in reader:
        if not any(c.strip() for c in cells):
            continue
        where = f"{path}:{reader.line_num}"
        if len(cells) != 3:
            raise InputError(where, f"expected 3 columns, found {len(cells)}")
        name, gpu, count = (c.strip() for c in cells)
        if not name or not gpu:
            raise InputError(f"{where}: column {'Instance' if not name else 'GPU type'}", "empty value")
        if name in sizes:
            raise InputError(f"{where}: column Instance", f"{name} is listed twice")
        try:
            gpus = int(count)
        except ValueError:
            raise InputError(f"{where}: column # GPUs", f"not an integer: {count!r}") from None
        if gpus < 1:
            raise InputError(f"{where}: column # GPUs", f"must be >= 1, got {gpus}")
        sizes[name] = AzureSize(name, gpu.upper(), gpus)
    if not sizes:
        raise InputError(str(path), "no VM sizes")
    return sizes


def _date(text: str, where: str) -> pd.Timestamp:
    try:
        return pd.Timestamp(pd.to_datetime(text.strip(), format="%m/%d/%Y")).tz_localize("UTC")
    except (ValueError, TypeError):
        raise InputError(where, f"not a M/D/YYYY date: {text!r}") from None


def _dollars(text: str, where: str) -> float:
    value = text.strip()
    try:
        price = float(value.removeprefix("$"))
    except ValueError:
        raise InputError(where, f"not a dollar price like $0.12276: {text!r}") from None
    if not math.isfinite(price) or price <= 0:
        raise InputError(where, f"a price must be a finite number > 0, got {text!r}")
    return price
