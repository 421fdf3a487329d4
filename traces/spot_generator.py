"""Synthetic spot prices and preemptions fitted to a real trace, for what-if runs.

Price model per market (one (instance type, zone)):

* price changes arrive as a Poisson process of rate ``changes_per_h`` (fitted: changes / span);
* at each change the log price relative to the market's median follows an AR(1) step
  ``x' = a·x + N(0, s²)`` (``a`` and ``s`` fitted by least squares over successive changes);
* on top, *spikes*: with rate ``spikes_per_h`` the price jumps to ``spike_multiple`` × the on-demand
  price for an exponential time of mean ``spike_mean_s``, then returns to the AR(1) level. Fitted from
  the episodes where the real price reached ``spike_threshold`` × on-demand. Post-2017 AWS prices have
  almost none (the "smoothed" market); the 2016 auction market of the Proteus paper had many (its
  Fig. 3), which is the main what-if this generator exists for: raise ``spikes_per_h`` with
  :meth:`PriceModel.with_spikes`.

Preemptions without prices (GCP, or a log of real spot lifetimes) are an exponential lifetime fitted
with censoring: rate = preemptions / total observed lifetime (the MLE for censored exponential data).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd
from clustertwin.traces.spot_prices import COLUMNS, region_of

from clustertwin.errors import InputError


@dataclass(frozen=True)
class PriceModel:
    """Fitted parameters of one market's price process (see the module docstring)."""

    instance_type: str
    zone: str
    median_price: float
    on_demand_price: float
    changes_per_h: float
    ar_coef: float
    ar_sigma: float
    spikes_per_h: float = 0.0
    spike_multiple: float = 1.5
    spike_mean_s: float = 1800.0

    def with_spikes(self, spikes_per_h: float, multiple: float, mean_s: float) -> PriceModel:
        """A what-if copy with another spike process."""
        return dataclasses.replace(
            self, spikes_per_h=spikes_per_h, spike_multiple=multiple, spike_mean_s=mean_s
        )


def fit_price_model(
    table: pd.DataFrame,
    instance_type: str,
    zone: str,
    on_demand_price: float,
    spike_threshold: float = 1.0,
) -> PriceModel:
    """Fit :class:`PriceModel` to one market of a canonical price table (needs >= 3 changes)."""
    rows = table[(table["instance_type"] == instance_type) & (table["zone"] == zone)].sort_values("timestamp")
    if len(rows) < 3:
        raise InputError(
            f"market {instance_type}/{zone}", f"needs >= 3 price changes to fit, has {len(rows)}"
        )
    t = (rows["timestamp"] - rows["timestamp"].iloc[0]).dt.total_seconds().to_numpy()
    p = rows["price"].to_numpy(dtype=float)
    span_h = max(t[-1] / 3600.0, 1e-9)
    spike = p >= spike_threshold * on_demand_price
    calm = p[~spike]
    median = float(np.median(calm)) if len(calm) else float(np.median(p))
    x = np.log(np.maximum(calm, 1e-9) / median)
    if len(x) >= 3 and np.var(x[:-1]) > 0:
        a = float(np.clip(np.dot(x[:-1], x[1:]) / np.dot(x[:-1], x[:-1]), -0.99, 0.99))
        resid = x[1:] - a * x[:-1]
        sigma = float(np.std(resid))
    else:
        a, sigma = 0.0, 0.0
    # Spike episodes: maximal runs of consecutive rows at or above the threshold.
    starts = np.flatnonzero(spike & ~np.r_[False, spike[:-1]])
    durations = []
    for s in starts:
        e = s
        while e + 1 < len(spike) and spike[e + 1]:
            e += 1
        durations.append((t[e + 1] if e + 1 < len(t) else t[e]) - t[s])
    return PriceModel(
        instance_type=instance_type,
        zone=zone,
        median_price=median,
        on_demand_price=on_demand_price,
        changes_per_h=float((len(p) - 1) / span_h),
        ar_coef=a,
        ar_sigma=sigma,
        spikes_per_h=float(len(starts) / span_h),
        spike_multiple=float(np.median(p[spike]) / on_demand_price) if spike.any() else 1.5,
        spike_mean_s=float(np.mean(durations)) if durations and np.mean(durations) > 0 else 1800.0,
    )


def generate_prices(
    models: list[PriceModel], start: pd.Timestamp, duration_s: float, rng: np.random.Generator
) -> pd.DataFrame:
    """A canonical price table of ``duration_s`` seconds from ``start`` for each model's market.

    Deterministic given ``rng``'s state. Prices never go below 1% of the median (a floor: real spot
    prices have one) and spike prices are ``spike_multiple`` × on-demand exactly.
    """
    start = pd.Timestamp(start)
    start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
    frames = []
    for m in models:
        times = [0.0]
        prices = [m.median_price]
        x = 0.0
        # Calm changes and spike starts are two independent Poisson streams, merged by time.
        calm_t = _poisson_times(rng, m.changes_per_h / 3600.0, duration_s)
        spike_t = _poisson_times(rng, m.spikes_per_h / 3600.0, duration_s)
        spike_end = np.minimum(spike_t + rng.exponential(m.spike_mean_s, len(spike_t)), duration_s)
        in_spike_until = -1.0
        events = sorted(
            [(s, 0, i) for i, s in enumerate(calm_t)] + [(s, 1, i) for i, s in enumerate(spike_t)]
        )
        pending_end: list[float] = []
        for when, kind, i in events:
            # Close a spike that ended before this event.
            while pending_end and pending_end[0] <= when:
                times.append(pending_end.pop(0))
                prices.append(max(m.median_price * float(np.exp(x)), 0.01 * m.median_price))
            x = m.ar_coef * x + m.ar_sigma * float(rng.standard_normal()) if kind == 0 else x
            if kind == 1 and when >= in_spike_until:
                in_spike_until = float(spike_end[i])
                pending_end.append(in_spike_until)
                times.append(when)
                prices.append(m.spike_multiple * m.on_demand_price)
            elif kind == 0 and when >= in_spike_until:
                times.append(when)
                prices.append(max(m.median_price * float(np.exp(x)), 0.01 * m.median_price))
        for end in pending_end:
            if end < duration_s:
                times.append(end)
                prices.append(max(m.median_price * float(np.exp(x)), 0.01 * m.median_price))
        stamps = start + pd.to_timedelta(np.round(np.asarray(times), 3), unit="s")
        frames.append(
            pd.DataFrame(
                {
                    "timestamp": stamps,
                    "region": region_of(m.zone),
                    "zone": m.zone,
                    "instance_type": m.instance_type,
                    "price": np.round(np.asarray(prices, dtype=float), 6),
                }
            )
        )
    out = pd.concat(frames, ignore_index=True)
    out["timestamp"] = out["timestamp"].astype("datetime64[ns, UTC]")
    for col in ("region", "zone", "instance_type"):
        out[col] = out[col].astype(str)
    out = out.loc[:, list(COLUMNS)]
    return out.sort_values(["timestamp", "zone", "instance_type"], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class PreemptionModel:
    """Exponential time-to-preemption with rate ``rate_per_s``."""

    rate_per_s: float

    def sample_lifetimes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` lifetimes in seconds (inf when the rate is 0)."""
        if self.rate_per_s <= 0:
            return np.full(n, np.inf)
        return rng.exponential(1.0 / self.rate_per_s, n)


def fit_preemption_model(lifetimes: pd.DataFrame) -> PreemptionModel:
    """Censored-exponential MLE from :func:`traces.preemption.preemption_times` output."""
    exposure = float(lifetimes["lifetime_s"].sum())
    if exposure <= 0:
        raise InputError("lifetimes", "no observed instance time to fit a preemption rate from")
    return PreemptionModel(float(lifetimes["preempted"].sum()) / exposure)


def _poisson_times(rng: np.random.Generator, rate_per_s: float, duration_s: float) -> np.ndarray:
    if rate_per_s <= 0:
        return np.empty(0)
    n = int(rng.poisson(rate_per_s * duration_s))
    return np.sort(rng.uniform(0.0, duration_s, n))
