"""Market replay: one piecewise-constant spot price per (instance type, zone), times relative to the run.

Prices before a market's first change take its first price; after the last change the last price
holds (the trace's "price at start of window" row makes the first case rare). A run's cost must not rest
on either extrapolation: :func:`check_coverage` (called by the spot and Gavel runs) rejects a replay
window that starts before a market's first row or ends more than ``max_stale_s`` after its last one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np
import pandas as pd
from clustertwin.policies.bidbrain.history import Market, PriceSeries

from clustertwin.errors import InputError


def series_from_table(table: pd.DataFrame, origin: pd.Timestamp) -> dict[Market, PriceSeries]:
    """Per-market series from a canonical price table, with times in seconds since ``origin``."""
    out: dict[Market, PriceSeries] = {}
    for (itype, zone), rows in table.groupby(["instance_type", "zone"], sort=True):
        rows = rows.sort_values("timestamp", kind="stable")
        t = (rows["timestamp"] - origin).dt.total_seconds().to_numpy(dtype=float)
        p = rows["price"].to_numpy(dtype=float)
        # Several rows at one instant: the last one is the price in effect.
        keep = np.r_[t[1:] != t[:-1], True]
        out[(str(itype), str(zone))] = PriceSeries(t[keep], p[keep])
    return out


def check_coverage(
    series: Mapping[Market, PriceSeries],
    start_s: float,
    end_s: float,
    max_stale_s: float,
    where: str,
    origin: pd.Timestamp | None = None,
    covered_until_s: float | None = None,
) -> None:
    """Raise :class:`InputError` at ``where`` unless every market has a price row at or before
    ``start_s`` and its last row is at most ``max_stale_s`` before ``end_s`` (times in the series' frame).

    AWS records only price changes, so a quiet market is normal, but a replay far past a market's last
    row would bill an unknown price as the last known one, forever.
    """

    def at(t: float) -> str:
        return (origin + pd.Timedelta(seconds=t)).isoformat() if origin is not None else f"t={t:g} s"

    for (itype, zone), s in sorted(series.items()):
        if not len(s.times_s):
            continue
        first, last = float(s.times_s[0]), float(s.times_s[-1])
        if covered_until_s is not None:
            last = max(last, covered_until_s)
        if start_s < first:
            raise InputError(
                where,
                f"the replay starts at {at(start_s)} but the trace's prices for {itype} in {zone} begin at "
                f"{at(first)}: the price before that is unknown",
            )
        if math.isfinite(end_s) and end_s - last > max_stale_s:
            raise InputError(
                where,
                f"the run lasts until {at(end_s)} but the trace's last price for {itype} in {zone} is at "
                f"{at(last)}, {(end_s - last) / 3600.0:.1f} h earlier (more than max_stale_h = "
                f"{max_stale_s / 3600.0:g}): the price after that is unknown; start earlier, use a longer "
                "trace or raise market.max_stale_h",
            )


class MarketReplay:
    """Price lookups and change points over a set of markets."""

    def __init__(self, series: Mapping[Market, PriceSeries], covered_until_s: float | None = None) -> None:
        self.series = dict(series)
        # A synthetic trace holds every market's last price to its generated end (see check_coverage).
        self.covered_until_s = covered_until_s

    @property
    def markets(self) -> list[Market]:
        return sorted(self.series)

    def price(self, market: Market, t: float) -> float:
        return float(self.series[market].at(t))

    def changes(self, market: Market, after: float, until: float) -> Iterator[tuple[float, float]]:
        """(time, new price) of every change in (after, until], in order; equal prices are skipped."""
        s = self.series[market]
        i = int(np.searchsorted(s.times_s, after, side="right"))
        last = self.price(market, after)
        while i < len(s.times_s) and s.times_s[i] <= until:
            if s.prices[i] != last:
                last = float(s.prices[i])
                yield float(s.times_s[i]), last
            i += 1

    def integral_usd(self, market: Market, t0: float, t1: float) -> float:
        """∫ price dt over [t0, t1] in $ per instance (price is $/h)."""
        if t1 <= t0:
            return 0.0
        s = self.series[market]
        cuts = s.times_s[(s.times_s > t0) & (s.times_s < t1)]
        edges = np.r_[t0, cuts, t1]
        prices = s.at(edges[:-1])
        return float(np.sum(prices * np.diff(edges)) / 3600.0)
