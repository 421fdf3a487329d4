"""Cloud list prices the chapter-6 what-ifs need besides the spot traces: on-demand prices of GPU
instances on several clouds, and the price of moving data out of a cloud (provenance:
``data/cloud/PROVENANCE.md``).

* On-demand table ``cloud,region,instance_type,gpu_type,gpus,price`` (USD per instance-hour). GCP rents
  GPUs by the GPU, so its rows are one GPU (``instance_type`` is the GPU type); n GPUs cost n times that.
* Egress table ``cloud,from_gb,to_gb,usd_per_gb``: the price of each GB sent to the Internet from a
  North-American region, by volume tier; a cloud's tiers start at 0 and join without gaps, the last may
  end at ``inf``. :func:`egress_usd` prices one transfer.

Every malformed value is an :class:`InputError` naming ``file:line: column``.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from clustertwin.traces.files import read_text

from clustertwin.errors import InputError

CLOUD_DIR = Path(__file__).resolve().parent / "data" / "cloud"
BUNDLED_CLOUD_ON_DEMAND = CLOUD_DIR / "on_demand.csv"
BUNDLED_EGRESS = CLOUD_DIR / "egress.csv"
_ON_DEMAND_HEADER = ("cloud", "region", "instance_type", "gpu_type", "gpus", "price")
_EGRESS_HEADER = ("cloud", "from_gb", "to_gb", "usd_per_gb")


@dataclass(frozen=True)
class CloudInstance:
    """One on-demand GPU instance type of one cloud and region."""

    cloud: str
    region: str
    instance_type: str
    gpu_type: str
    gpus: int
    price: float  # USD per instance-hour


@dataclass(frozen=True)
class EgressTier:
    from_gb: float
    to_gb: float
    usd_per_gb: float


def load_cloud_on_demand(path: str | Path = BUNDLED_CLOUD_ON_DEMAND) -> list[CloudInstance]:
    """The on-demand table, in file order; a (cloud, region, instance_type) appears once."""
    path = Path(path)
    out: list[CloudInstance] = []
    seen: dict[tuple[str, str, str], int] = {}
    for line, cells in _rows(path, _ON_DEMAND_HEADER):
        where = f"{path}:{line}"
        cloud, region, itype, gpu = (
            _text(c, f"{where}: column {n}") for c, n in zip(cells[:4], _ON_DEMAND_HEADER, strict=False)
        )
        key = (cloud, region, itype)
        if key in seen:
            raise InputError(
                f"{where}: column instance_type", f"{itype} in {cloud} {region} repeats line {seen[key]}"
            )
        seen[key] = line
        gpus = _int(cells[4], f"{where}: column gpus")
        price = _number(cells[5], f"{where}: column price", positive=True)
        out.append(CloudInstance(cloud, region, itype, gpu.upper(), gpus, price))
    return out


def load_egress(path: str | Path = BUNDLED_EGRESS) -> dict[str, list[EgressTier]]:
    """Each cloud's egress tiers, in order of volume."""
    path = Path(path)
    tiers: dict[str, list[EgressTier]] = {}
    for line, cells in _rows(path, _EGRESS_HEADER):
        where = f"{path}:{line}"
        cloud = _text(cells[0], f"{where}: column cloud")
        lo = _number(cells[1], f"{where}: column from_gb")
        hi = _number(cells[2], f"{where}: column to_gb", allow_inf=True)
        rate = _number(cells[3], f"{where}: column usd_per_gb")
        previous = tiers.setdefault(cloud, [])
        expected = previous[-1].to_gb if previous else 0.0
        if lo != expected:
            raise InputError(
                f"{where}: column from_gb", f"{cloud}'s tiers must join: expected {expected:g}, got {lo:g}"
            )
        if not hi > lo:
            raise InputError(f"{where}: column to_gb", f"must be above from_gb ({lo:g}), got {cells[2]!r}")
        previous.append(EgressTier(lo, hi, rate))
    return tiers


def egress_usd(tiers: list[EgressTier], gb: float) -> float:
    """The price of sending ``gb`` GB out of a cloud in one month (tiers priced in turn)."""
    if gb < 0 or not math.isfinite(gb):
        raise ValueError(f"a transfer is a finite number of GB >= 0, got {gb}")
    if tiers and gb > tiers[-1].to_gb:
        raise ValueError(f"{gb:g} GB is beyond the last tier ({tiers[-1].to_gb:g} GB)")
    return sum(t.usd_per_gb * max(0.0, min(gb, t.to_gb) - t.from_gb) for t in tiers)


def _rows(path: Path, header: tuple[str, ...]) -> list[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    got = tuple(h.strip() for h in next(reader, ()))
    if got != header:
        raise InputError(f"{path}:1", f"expected header {','.join(header)}, got {','.join(got)!r}")
    rows = []
    for cells in reader:
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise InputError(
                f"{path}:{reader.line_num}", f"expected {len(header)} columns, found {len(cells)}"
            )
        rows.append((reader.line_num, cells))
    if not rows:
        raise InputError(str(path), "no rows")
    return rows


def _text(cell: str, where: str) -> str:
    value = cell.strip()
    if not value:
        raise InputError(where, "empty value")
    return value


def _int(cell: str, where: str) -> int:
    try:
        value = int(cell)
    except ValueError:
        raise InputError(where, f"not an integer: {cell!r}") from None
    if value < 1:
        raise InputError(where, f"must be >= 1, got {value}")
    return value


def _number(cell: str, where: str, positive: bool = False, allow_inf: bool = False) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise InputError(where, f"not a number: {cell!r}") from None
    if math.isnan(value) or (math.isinf(value) and not (allow_inf and value > 0)):
        raise InputError(where, f"not a usable number: {cell!r}")
    if value < 0 or (positive and value == 0):
        raise InputError(where, f"must be {'> 0' if positive else '>= 0'}, got {cell!r}")
    return value
