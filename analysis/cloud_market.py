"""Many clouds' GPU prices as one board of options over time, for the chapter-6 what-ifs ([Narayanan]
ch. 6, §6.3.2): AWS spot prices per zone (a canonical spot-price table, the bundled us-east-1 one by
default), Azure low-priority prices per region (daily), GCP preemptible prices (fixed), and every
cloud's on-demand list prices (fixed).

A market's price holds from its row until its next one, and its last price holds to the end of any run
(AWS and Azure record changes only); before its first row a market is not on offer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from clustertwin.policies.cloud import Option
from clustertwin.traces.azure_prices import (
    AZURE_REGION_CODES,
    BUNDLED_AZURE_MAPPING,
    BUNDLED_AZURE_PRICES,
    load_azure_low_priority,
    load_azure_sizes,
)
from clustertwin.traces.cloud_catalog import BUNDLED_CLOUD_ON_DEMAND, CloudInstance, load_cloud_on_demand
from clustertwin.traces.gcp_prices import BUNDLED_GCP_PREEMPTIBLE, load_gcp_preemptible
from clustertwin.traces.libcloud_prices import BUNDLED_LIBCLOUD_ON_DEMAND
from clustertwin.traces.spot_prices import load_bundled_or_path

from clustertwin.errors import InputError

AWS_TRACE = "aws-p2-p3-us-east-1-2020"


@dataclass(frozen=True)
class _Series:
    template: Option  # everything but the price
    times: np.ndarray  # ns since the epoch, UTC, increasing
    prices: np.ndarray


class PriceBoard:
    """Every option's price as a step function of time."""

    def __init__(self, series: Iterable[_Series]) -> None:
        self._series = sorted(series, key=lambda s: s.template.key)
        keys = [s.template.key for s in self._series]
        if len(set(keys)) != len(keys):
            raise ValueError("an option appears twice on the board")
        self._cache: dict[int, list[Option]] = {}
        self._changes = (
            np.unique(np.concatenate([s.times for s in self._series])) if self._series else np.empty(0)
        )

    def options_at(self, when: pd.Timestamp) -> list[Option]:
        """The options on offer at ``when``, at their prices then (remembered: runs share instants)."""
        t = pd.Timestamp(when).value
        if t not in self._cache:
            self._cache[t] = self._options_at(t)
        return self._cache[t]

    def _options_at(self, t: int) -> list[Option]:
        out = []
        for s in self._series:
            i = int(np.searchsorted(s.times, t, side="right")) - 1
            if i >= 0:
                out.append(_priced(s.template, float(s.prices[i])))
        return out

    def changes(self, start: pd.Timestamp, end: pd.Timestamp) -> list[pd.Timestamp]:
        """Instants in (start, end) at which some option's price (or presence) changes."""
        a, b = pd.Timestamp(start).value, pd.Timestamp(end).value
        inside = self._changes[(self._changes > a) & (self._changes < b)]
        return [pd.Timestamp(int(v), tz="UTC") for v in inside]

    def first_and_last(self, cloud: str) -> tuple[pd.Timestamp, pd.Timestamp]:
        """The first and last price rows of ``cloud``'s changing markets (its data window)."""
        times = [s.times for s in self._series if s.template.cloud == cloud and len(s.times) > 1]
        if not times:
            raise ValueError(f"no changing prices for {cloud}")
        every = np.concatenate(times)
        return pd.Timestamp(int(every.min()), tz="UTC"), pd.Timestamp(int(every.max()), tz="UTC")

    def series(self) -> list[tuple[Option, np.ndarray, np.ndarray]]:
        """(option template, times in ns, prices) of every market."""
        return [(s.template, s.times, s.prices) for s in self._series]


def default_board(aws_trace: str = AWS_TRACE) -> PriceBoard:
    """AWS (``aws_trace``: a bundled name or a price file), Azure and GCP spot prices plus every cloud's
    on-demand prices, from the bundled data unless a trace path is given. The on-demand table has Azure's
    US East only; the other Azure regions of the low-priority logs take their pay-as-you-go prices from
    libcloud's catalogue (``traces.libcloud_prices``)."""
    on_demand = load_cloud_on_demand(BUNDLED_CLOUD_ON_DEMAND) + azure_on_demand_elsewhere()
    series = [*aws_spot(load_bundled_or_path(aws_trace), on_demand), *azure_spot(), *gcp_preemptible()]
    # On-demand prices are fixed: on offer from the earliest spot row on.
    origin = min(int(s.times[0]) for s in series)
    series += [
        _Series(
            _option(i.cloud, i.region, i.region, i.instance_type, i.gpu_type, i.gpus, False),
            np.array([origin]),
            np.array([i.price]),
        )
        for i in on_demand
        if i.cloud != "gcp"
    ]
    # GCP rents GPUs singly: its n-GPU on-demand offer is n times the one-GPU price.
    series += [
        _Series(
            _option("gcp", i.region, i.region, f"{n}x{i.gpu_type}", i.gpu_type, n, False),
            np.array([origin]),
            np.array([n * i.price]),
        )
        for i in on_demand
        if i.cloud == "gcp"
        for n in (1, 2, 4, 8)
    ]
    return PriceBoard(series)


def azure_on_demand_elsewhere(path: object = BUNDLED_LIBCLOUD_ON_DEMAND) -> list[CloudInstance]:
    """Azure pay-as-you-go prices of the low-priority logs' regions that the on-demand table lacks, under
    the logs' region names."""
    have = {i.region for i in load_cloud_on_demand(BUNDLED_CLOUD_ON_DEMAND) if i.cloud == "azure"}
    names = {code: name for name, code in AZURE_REGION_CODES.items() if name not in have}
    return [
        replace(i, region=names[i.region])
        for i in load_cloud_on_demand(path)  # type: ignore[arg-type]
        if i.cloud == "azure" and i.region in names
    ]


def aws_spot(table: pd.DataFrame, on_demand: list[CloudInstance]) -> list[_Series]:
    """AWS spot markets (instance type, zone) of a canonical table whose types the on-demand table
    describes (it says each type's GPUs); other types are left out."""
    gpus = {i.instance_type: i for i in on_demand if i.cloud == "aws"}
    out = []
    for (itype, zone), rows in table.groupby(["instance_type", "zone"], sort=True):
        if itype not in gpus:
            continue
        rows = rows.sort_values("timestamp", kind="stable")
        kind = gpus[str(itype)]
        option = _option(
            "aws", str(rows["region"].iloc[0]), str(zone), str(itype), kind.gpu_type, kind.gpus, True
        )
        out.append(_steps(option, rows["timestamp"], rows["price"]))
    if not out:
        raise InputError("aws trace", "no AWS market of a GPU instance type the on-demand table lists")
    return out


def azure_spot(regions: dict[str, object] | None = None) -> list[_Series]:
    """Azure low-priority markets (VM size, region) of the bundled daily tables (or ``regions``: region
    -> price file)."""
    files = regions or BUNDLED_AZURE_PRICES
    sizes = load_azure_sizes(BUNDLED_AZURE_MAPPING)
    out = []
    for region, path in files.items():
        table = load_azure_low_priority(path, region)  # type: ignore[arg-type]
        for size, rows in table.groupby("instance_type", sort=True):
            if size not in sizes:
                raise InputError(
                    f"{path}", f"VM size {size} is not in the size mapping {BUNDLED_AZURE_MAPPING}"
                )
            s = sizes[str(size)]
            out.append(
                _steps(
                    _option("azure", region, region, str(size), s.gpu_type, s.gpus, True),
                    rows["timestamp"],
                    rows["price"],
                )
            )
    return out


def gcp_preemptible(path: object = BUNDLED_GCP_PREEMPTIBLE) -> list[_Series]:
    """GCP preemptible offers at their per-GPU list prices (fixed), one per zone, GPU type and count."""
    out = {}
    for offer in load_gcp_preemptible(path):  # type: ignore[arg-type]
        option = _option(
            "gcp",
            offer.region,
            offer.zone,
            f"{offer.gpus}x{offer.gpu_type}",
            offer.gpu_type,
            offer.gpus,
            True,
        )
        out[option.key] = _Series(
            option, np.array([offer.timestamp.value]), np.array([offer.gpus * offer.gpu_price])
        )
    # Fixed prices: on offer as long as any other market (the probing round only shows they exist).
    return [_Series(s.template, np.array([0]), s.prices) for s in out.values()]


def _steps(option: Option, stamps: pd.Series, prices: pd.Series) -> _Series:
    t = pd.to_datetime(stamps, utc=True).astype("int64").to_numpy()
    p = prices.to_numpy(dtype=float)
    keep = np.r_[t[1:] != t[:-1], True]  # several rows at one instant: the last is in effect
    return _Series(option, t[keep], p[keep])


def _option(cloud: str, region: str, zone: str, itype: str, gpu: str, gpus: int, spot: bool) -> Option:
    return Option(cloud, region, zone, itype, gpu, gpus, float("nan"), spot)


def _priced(template: Option, price: float) -> Option:
    return Option(
        template.cloud,
        template.region,
        template.zone,
        template.instance_type,
        template.gpu_type,
        template.gpus,
        price,
        template.spot,
    )
