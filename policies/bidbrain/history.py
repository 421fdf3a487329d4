"""β and median time-to-eviction tables, estimated offline from a training window of a price trace.

Proteus §4.2 (Harlap et al., EuroSys'17; [Proteus]): for each market and each bid delta δ on a grid,
replay the training trace from many start times t0, bid ``P(t0) + δ`` and record whether the price
rises above the bid within the billing hour (→ β, the eviction probability) and when (→ the median
time-to-eviction, used to shorten ω_i in Eq. 2). The paper does not give the grid resolution or the
start-time sampling; we use a log grid for δ over [$0.0001, $0.4] (dissertation ch. 4) and a start every
``step_s`` seconds (60 s by default, i.e. every minute).

Pure: arrays in, arrays out. Prices are piecewise constant (the value holds until the next change).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# Market = (instance_type, zone).
Market = tuple[str, str]

DEFAULT_DELTAS: tuple[float, ...] = tuple(float(d) for d in np.geomspace(1e-4, 0.4, 13))


@dataclass(frozen=True)
class PriceSeries:
    """A piecewise-constant price: ``prices[i]`` ($/h) holds from ``times_s[i]`` to ``times_s[i+1]``."""

    times_s: np.ndarray
    prices: np.ndarray

    def at(self, t: float | np.ndarray) -> np.ndarray:
        """Price in effect at time(s) ``t`` (the first price before the first change)."""
        idx = np.searchsorted(self.times_s, t, side="right") - 1
        return self.prices[np.clip(idx, 0, len(self.prices) - 1)]


# How far ahead β and the time to eviction are tabulated: BidBrain plans an allocation an hour at a time.
HORIZON_S = 3600.0


@dataclass(frozen=True)
class EvictionTable:
    """``beta[m][j]`` and ``tte_median_s[m][j]`` for market ``m`` and bid delta ``deltas[j]``."""

    deltas: tuple[float, ...]
    beta: Mapping[Market, np.ndarray]
    tte_median_s: Mapping[Market, np.ndarray]
    horizon_s: float = HORIZON_S

    def lookup(self, market: Market, delta: float) -> tuple[float, float]:
        """(β, median TTE s) for a bid ``delta`` above the current price.

        Snaps *down* to the grid (a smaller delta is never safer, so this errs towards caution). A bid
        below the current price (δ < 0) is evicted at once: (1, 0). An unknown market is treated as
        always evicted, so the policy never bids blind.
        """
        if market not in self.beta or delta < 0:
            return 1.0, 0.0
        j = max(int(np.searchsorted(self.deltas, delta, side="right")) - 1, 0)
        return float(self.beta[market][j]), float(self.tte_median_s[market][j])


def estimate_eviction_table(
    series: Mapping[Market, PriceSeries],
    window_s: tuple[float, float],
    deltas: tuple[float, ...] = DEFAULT_DELTAS,
    step_s: float = 60.0,
    horizon_s: float = HORIZON_S,
) -> EvictionTable:
    """Replay each market over ``window_s`` = (start, end) and tabulate β and the median TTE per δ.

    The price path is sampled on the same ``step_s`` grid, so an excursion shorter than a step can be
    missed; TTE is then a multiple of ``step_s``. Windows that would run past ``end`` are not used. A δ
    never exceeded has median TTE = ``horizon_s``.
    """
    start, end = window_s
    n_win = int(round(horizon_s / step_s))
    grid = np.arange(start, end + step_s / 2, step_s)
    if len(grid) <= n_win:
        raise ValueError(f"training window {end - start:g} s is shorter than the horizon {horizon_s:g} s")
    deltas_arr = np.asarray(deltas, dtype=float)
    beta: dict[Market, np.ndarray] = {}
    tte: dict[Market, np.ndarray] = {}
    for market, s in series.items():
        p = s.at(grid)
        paths = sliding_window_view(p, n_win + 1)  # row i: prices at t0_i, t0_i + step, ..., t0_i + 1 h
        p0 = paths[:, 0]
        later = paths[:, 1:]
        rise = later.max(axis=1) - p0  # largest rise within the hour from each start
        b = np.empty(len(deltas_arr))
        m = np.empty(len(deltas_arr))
        for j, d in enumerate(deltas_arr):
            hit = rise > d
            b[j] = hit.mean()
            if hit.any():
                # First step where the price exceeds the bid, only for the (few) starts that are hit.
                first = np.argmax(later[hit] > (p0[hit] + d)[:, None], axis=1) + 1
                m[j] = float(np.median(first)) * step_s
            else:
                m[j] = horizon_s
        beta[market] = b
        tte[market] = m
    return EvictionTable(tuple(float(d) for d in deltas_arr), beta, tte, horizon_s)
