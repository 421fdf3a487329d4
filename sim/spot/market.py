"""Market replay: one piecewise-constant spot price per (instance type, zone), times relative to the run.

Prices before a market's first change take its first price; after the last change the last price
holds (the trace's "price at start of window" row makes the first case rare).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pandas as pd

from policies.bidbrain.history import Market, PriceSeries


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


class MarketReplay:
    """Price lookups and change points over a set of markets."""

    def __init__(self, series: Mapping[Market, PriceSeries]) -> None:
        self.series = dict(series)

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
